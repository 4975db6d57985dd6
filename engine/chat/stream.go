package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	thinkOpen     = "<think>"
	thinkClose    = "</think>"
	hermesOpen    = "<tool_call>"
	hermesClose   = "</tool_call>"
	llamaPyTag    = "<|python_tag|>"
	maxCallBytes  = 1 << 20 // a tool call longer than this is reported malformed
	segmentsStart = 4
)

// SegmentKind says what a Segment carries.
type SegmentKind int

const (
	SegText      SegmentKind = iota // Text: answer text
	SegThinking                     // Text: reasoning inside <think>...</think>
	SegToolCall                     // Call: one complete, parsed tool call
	SegToolError                    // Text: the raw text of a malformed call; Err says what is wrong
)

func (k SegmentKind) String() string {
	switch k {
	case SegText:
		return "text"
	case SegThinking:
		return "thinking"
	case SegToolCall:
		return "tool_call"
	case SegToolError:
		return "tool_error"
	}
	return fmt.Sprintf("SegmentKind(%d)", int(k))
}

// Segment is one typed piece of model output.
type Segment struct {
	Kind SegmentKind
	Text string
	Call *ToolCall // SegToolCall; ID is left empty for the caller to assign
	Err  error     // SegToolError: a *MalformedCallError
}

// MalformedCallError is a tool call the model started but did not write
// correctly (bad JSON, no name, unterminated).
type MalformedCallError struct {
	Raw    string // everything the model wrote for the call, tags included
	Reason string
	Format ToolFormat // the format the call was parsed in (CallExample shows it)
}

func (e *MalformedCallError) Error() string {
	return "malformed tool call: " + e.Reason
}

type parseMode int

const (
	modeText     parseMode = iota
	modeThink              // inside <think>
	modeHermes             // inside <tool_call>, waiting for </tool_call>
	modeLlamaObj           // a JSON object that may be a Llama 3 call
	modePyTag              // after <|python_tag|>
	modeXML                // inside <tool_call> of the XML format, waiting for its </tool_call>
)

// StreamParser splits streamed model output into text, thinking and tool
// calls. Feed it decoded text deltas as they arrive and call Flush at the
// end of the stream. Text that could still become a tag (a trailing "<tool_"
// or "</thi") is held back until the next delta decides it, and so is
// trailing whitespace: whitespace the template puts around tags (after
// <think>, around </think>, between tool calls) is dropped, so segments do
// not start or end with it. The segments do not depend on how the text was
// split into deltas.
type StreamParser struct {
	format ToolFormat
	mode   parseMode
	buf    []byte // unconsumed output; appended to, so long calls cost linear time
	out    []Segment
	// searchFrom is where the next search for </tool_call> starts: the body
	// before it has been searched already.
	searchFrom int

	skipWS     bool // drop leading whitespace (start of output, after a tag)
	skipSemi   bool // also drop ';' (between Llama 3 JSON calls)
	sawContent bool // non-whitespace answer text emitted
	afterPyTag bool // a modeLlamaObj object follows <|python_tag|>: it must be a call
	scan       jsonScan
	pyTagJunk  bool // text after <|python_tag|> that is not a JSON object
	// schemas are the offered tools' parameter schemas (SetTools), by tool
	// name: they type ToolQwenXML values.
	schemas map[string]map[string]any
	xml     xmlCallState // the <tool_call> being read in modeXML
	// thinkEmitted: the current thinking block has emitted text (so a tag
	// at buf[0] does not start a line).
	thinkEmitted bool
}

// NewStreamParser returns a parser for one generation. startInThinking
// says the prompt already opened <think> (see PromptOpensThinking).
func NewStreamParser(format ToolFormat, startInThinking bool) *StreamParser {
	p := &StreamParser{format: format, skipWS: true}
	if startInThinking {
		p.mode = modeThink
	}
	return p
}

// Feed consumes a delta and returns the segments it completed.
func (p *StreamParser) Feed(delta string) []Segment {
	p.buf = append(p.buf, delta...)
	p.process(false)
	return p.take()
}

// Flush ends the stream: held text is emitted, an unterminated tool call
// becomes a call if its JSON is complete and valid, else a SegToolError.
func (p *StreamParser) Flush() []Segment {
	p.process(true)
	return p.take()
}

func (p *StreamParser) take() []Segment {
	out := p.out
	p.out = nil
	return out
}

func (p *StreamParser) emit(kind SegmentKind, text string) {
	if text == "" {
		return
	}
	if kind == SegText {
		p.sawContent = true
	}
	if kind == SegThinking {
		p.thinkEmitted = true
	}
	if n := len(p.out); n > 0 && p.out[n-1].Kind == kind && (kind == SegText || kind == SegThinking) {
		p.out[n-1].Text += text
		return
	}
	if p.out == nil {
		p.out = make([]Segment, 0, segmentsStart)
	}
	p.out = append(p.out, Segment{Kind: kind, Text: text})
}

func (p *StreamParser) emitCall(c *ToolCall) {
	p.out = append(p.out, Segment{Kind: SegToolCall, Call: c})
}

func (p *StreamParser) emitError(raw, reason string) {
	p.out = append(p.out, Segment{Kind: SegToolError, Text: raw, Err: &MalformedCallError{Raw: raw, Reason: reason, Format: p.format}})
}

// openTags are the tags that switch mode out of text.
func (p *StreamParser) openTags() []string {
	switch p.format {
	case ToolHermes, ToolQwenXML:
		return []string{thinkOpen, hermesOpen}
	case ToolLlama3JSON:
		return []string{thinkOpen, llamaPyTag}
	}
	return []string{thinkOpen}
}

func (p *StreamParser) process(final bool) {
	for {
		if p.skipWS {
			p.buf = bytes.TrimLeftFunc(p.buf, func(r rune) bool {
				return unicode.IsSpace(r) || (p.skipSemi && r == ';')
			})
			if len(p.buf) == 0 {
				return
			}
			p.skipWS, p.skipSemi = false, false
		}
		var progressed bool
		switch p.mode {
		case modeText:
			progressed = p.stepText(final)
		case modeThink:
			progressed = p.stepThink(final)
		case modeHermes:
			progressed = p.stepHermes(final)
		case modeLlamaObj:
			progressed = p.stepLlamaObj(final)
		case modePyTag:
			progressed = p.stepPyTag(final)
		case modeXML:
			progressed = p.stepXML(final)
		}
		if !progressed {
			return
		}
	}
}

// emitHeld emits s except a trailing possible tag prefix and trailing
// whitespace (unless final), keeping those in the buffer.
func (p *StreamParser) emitHeld(kind SegmentKind, tags []string, final bool) {
	if final {
		p.emit(kind, string(bytes.TrimRightFunc(p.buf, unicode.IsSpace)))
		p.buf = p.buf[:0]
		return
	}
	cut := partialTagStart(p.buf, tags)
	keepFrom := len(bytes.TrimRightFunc(p.buf[:cut], unicode.IsSpace))
	keepFrom = completeRunes(p.buf[:keepFrom])
	p.emit(kind, string(p.buf[:keepFrom]))
	p.buf = p.buf[keepFrom:]
}

func (p *StreamParser) stepText(final bool) bool {
	if p.format == ToolLlama3JSON && !p.sawContent && len(p.buf) > 0 && p.buf[0] == '{' {
		p.mode = modeLlamaObj
		p.afterPyTag = false
		p.scan = jsonScan{}
		return true
	}
	tags := p.openTags()
	i, tag := firstTag(p.buf, tags)
	if i < 0 {
		p.emitHeld(SegText, tags, final)
		return false
	}
	p.emit(SegText, string(bytes.TrimRightFunc(p.buf[:i], unicode.IsSpace)))
	p.buf = p.buf[i+len(tag):]
	switch tag {
	case thinkOpen:
		p.mode = modeThink
		p.skipWS = true
		p.thinkEmitted = false
	case hermesOpen:
		p.searchFrom = 0
		p.mode = modeHermes // keeps its whitespace: the raw text of a malformed call is reported verbatim
		if p.format == ToolQwenXML {
			p.mode = modeXML
			p.xml = xmlCallState{schemas: p.schemas}
		}
	case llamaPyTag:
		p.mode = modePyTag
		p.skipWS = true
	}
	return true
}

func (p *StreamParser) stepThink(final bool) bool {
	tags := []string{thinkClose}
	if p.format == ToolQwenXML {
		tags = append(tags, hermesOpen)
	}
	i := bytes.Index(p.buf, []byte(thinkClose))
	call := p.callInThinking()
	if call >= 0 && (i < 0 || call < i) {
		// Qwen3.5 models often skip </think> before a call: a <tool_call>
		// at the start of a line ends the thinking (as llama.cpp reads it).
		p.emit(SegThinking, string(bytes.TrimRightFunc(p.buf[:call], unicode.IsSpace)))
		p.buf = p.buf[call+len(hermesOpen):]
		p.searchFrom = 0
		p.mode = modeXML
		p.xml = xmlCallState{schemas: p.schemas}
		return true
	}
	if i < 0 {
		p.emitHeld(SegThinking, tags, final)
		return false
	}
	p.emit(SegThinking, string(bytes.TrimRightFunc(p.buf[:i], unicode.IsSpace)))
	p.buf = p.buf[i+len(thinkClose):]
	p.mode = modeText
	p.skipWS = true
	return true
}

// callInThinking finds, in the XML format, a <tool_call> inside thinking
// that starts a line (after spaces or tabs): the start of the block or
// right after a newline. Held-back whitespace stays in buf, so a newline
// before the tag is always there to see; a tag at buf[0] follows emitted
// thinking that ended mid-line unless nothing was emitted yet. -1: none.
func (p *StreamParser) callInThinking() int {
	if p.format != ToolQwenXML {
		return -1
	}
	for from := 0; ; {
		k := bytes.Index(p.buf[from:], []byte(hermesOpen))
		if k < 0 {
			return -1
		}
		k += from
		before := bytes.TrimRight(p.buf[:k], " \t")
		if len(before) == 0 && !p.thinkEmitted || len(before) > 0 && before[len(before)-1] == '\n' {
			return k
		}
		from = k + 1
	}
}

func (p *StreamParser) stepHermes(final bool) bool {
	i := bytes.Index(p.buf[p.searchFrom:], []byte(hermesClose))
	if i >= 0 {
		i += p.searchFrom
	}
	if i < 0 {
		p.searchFrom = max(0, len(p.buf)-len(hermesClose)+1)
		if len(p.buf) > maxCallBytes {
			p.emitError(hermesOpen+string(p.buf), fmt.Sprintf("no %s within %d bytes", hermesClose, maxCallBytes))
			p.buf = p.buf[:0]
			p.mode = modeText
			p.skipWS = true
			return true
		}
		if final {
			body := string(p.buf)
			p.buf = p.buf[:0]
			p.mode = modeText
			if strings.TrimSpace(body) == "" {
				p.emitError(hermesOpen+body, "the output ended inside an empty "+hermesOpen)
				return false
			}
			c, err := parseCallJSON(body, "arguments")
			if err != nil {
				p.emitError(hermesOpen+body, "the output ended before "+hermesClose+" and "+err.Error())
				return false
			}
			p.emitCall(c)
		}
		return false
	}
	body := string(p.buf[:i])
	raw := hermesOpen + body + hermesClose
	p.buf = p.buf[i+len(hermesClose):]
	p.mode = modeText
	p.skipWS = true
	if c, err := parseCallJSON(body, "arguments"); err != nil {
		p.emitError(raw, err.Error())
	} else {
		p.emitCall(c)
	}
	return true
}

// stepLlamaObj scans a JSON object at the start of the reply (or after
// <|python_tag|>). A complete object shaped {"name", "parameters"} is a call;
// other JSON, and text that is not JSON, is answer text, unless it came after
// <|python_tag|> or started like a call ({"name": ...), which makes it a
// malformed call.
func (p *StreamParser) stepLlamaObj(final bool) bool {
	end, state := p.scan.feed(p.buf)
	switch state {
	case scanMore:
		if len(p.buf) > maxCallBytes {
			p.llamaFail(string(p.buf), fmt.Sprintf("JSON object not closed within %d bytes", maxCallBytes))
			p.buf = p.buf[:0]
			return true
		}
		if !final {
			return false
		}
		raw := string(p.buf)
		p.buf = p.buf[:0]
		if p.afterPyTag || looksLikeCall(raw) {
			p.llamaFail(raw, "the output ended inside the JSON object")
		} else {
			p.mode = modeText
			p.emit(SegText, strings.TrimRightFunc(raw, unicode.IsSpace))
		}
		return false
	case scanNotJSON:
		if p.afterPyTag {
			p.mode = modePyTag
			p.pyTagJunk = true
			return true
		}
		p.mode = modeText
		p.sawContent = true // prose starting with '{': no call can follow
		return true
	}
	raw := string(p.buf[:end])
	p.buf = p.buf[end:]
	c, err := parseCallJSON(raw, "parameters")
	if err == nil {
		p.emitCall(c)
		p.mode = modeText
		if p.afterPyTag {
			p.mode = modePyTag
		}
		p.skipWS, p.skipSemi = true, true
		return true
	}
	if p.afterPyTag || looksLikeCall(raw) {
		p.llamaFail(raw, err.Error())
		return true
	}
	p.mode = modeText
	p.emit(SegText, raw)
	return true
}

func (p *StreamParser) llamaFail(raw, reason string) {
	if p.afterPyTag {
		raw = llamaPyTag + raw
	}
	p.emitError(raw, reason)
	p.mode = modeText
	p.skipWS = true
}

// stepPyTag handles what follows <|python_tag|>: JSON calls separated by
// ';' or whitespace. Anything else (Llama's Python-syntax built-in tool
// calls) is reported malformed at the end of the stream.
func (p *StreamParser) stepPyTag(final bool) bool {
	if len(p.buf) == 0 {
		return false
	}
	if p.pyTagJunk || p.buf[0] != '{' {
		if len(p.buf) > maxCallBytes || final {
			raw := string(p.buf)
			p.buf = p.buf[:0]
			p.mode = modeText
			p.pyTagJunk = false
			p.emitError(llamaPyTag+raw, "not a JSON tool call (Python-syntax built-in tool calls are not supported)")
			return !final
		}
		p.pyTagJunk = true
		return false
	}
	p.mode = modeLlamaObj
	p.afterPyTag = true
	p.scan = jsonScan{}
	return true
}

// looksLikeCall: text beginning {"name" is a call attempt, not prose.
func looksLikeCall(s string) bool {
	s = strings.TrimLeftFunc(strings.TrimPrefix(strings.TrimSpace(s), "{"), unicode.IsSpace)
	return strings.HasPrefix(s, `"name"`)
}

// parseCallJSON decodes {"name": ..., "<argsKey>": {...}}; "arguments" and
// "parameters" are both accepted, and arguments given as a JSON string
// holding an object are decoded.
func parseCallJSON(body, argsKey string) (*ToolCall, error) {
	body = strings.TrimSpace(body)
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid JSON: extra text after the object")
	}
	var name string
	if err := json.Unmarshal(raw["name"], &name); err != nil || strings.TrimSpace(name) == "" {
		return nil, fmt.Errorf(`no "name" string in the call`)
	}
	argRaw, ok := raw[argsKey]
	if !ok {
		for _, k := range []string{"arguments", "parameters"} {
			if argRaw, ok = raw[k]; ok {
				break
			}
		}
	}
	args := map[string]any{}
	if ok && !bytes.Equal(bytes.TrimSpace(argRaw), []byte("null")) {
		var s string
		if json.Unmarshal(argRaw, &s) == nil {
			argRaw = json.RawMessage(s)
		}
		if err := json.Unmarshal(argRaw, &args); err != nil {
			return nil, fmt.Errorf("arguments of %q are not a JSON object: %v", name, err)
		}
		if args == nil {
			args = map[string]any{}
		}
	}
	return &ToolCall{Name: name, Arguments: args}, nil
}

// completeRunes returns len(b) minus a trailing incomplete UTF-8 sequence
// (a delta may end inside a character; emit it whole with the next one).
func completeRunes(b []byte) int {
	for k := len(b) - 1; k >= 0 && k >= len(b)-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			if !utf8.FullRune(b[k:]) {
				return k
			}
			break
		}
	}
	return len(b)
}

// firstTag finds the earliest occurrence of any tag.
func firstTag(s []byte, tags []string) (int, string) {
	best, bestTag := -1, ""
	for _, t := range tags {
		if i := bytes.Index(s, []byte(t)); i >= 0 && (best < 0 || i < best) {
			best, bestTag = i, t
		}
	}
	return best, bestTag
}

// partialTagStart returns the first index from which s is a proper prefix
// of one of tags (so it must be held back), or len(s).
func partialTagStart(s []byte, tags []string) int {
	maxLen := 0
	for _, t := range tags {
		maxLen = max(maxLen, len(t))
	}
	from := max(0, len(s)-maxLen+1)
	for i := from; i < len(s); i++ {
		if s[i] != '<' {
			continue
		}
		for _, t := range tags {
			if len(s)-i < len(t) && strings.HasPrefix(t, string(s[i:])) {
				return i
			}
		}
	}
	return len(s)
}

// jsonScan finds the end of a JSON object incrementally; it remembers how
// far it has scanned so feeding a growing buffer costs linear time.
type jsonScan struct {
	pos, depth int
	inStr, esc bool
	started    bool
	sawKey     bool // first non-space byte after '{' checked
}

type scanState int

const (
	scanMore scanState = iota
	scanDone
	scanNotJSON
)

func (js *jsonScan) feed(s []byte) (end int, st scanState) {
	for ; js.pos < len(s); js.pos++ {
		c := s[js.pos]
		if !js.started {
			if c != '{' {
				return 0, scanNotJSON
			}
			js.started = true
			js.depth = 1
			continue
		}
		if !js.sawKey {
			if c == ' ' || c == '\n' || c == '\t' || c == '\r' {
				continue
			}
			if c != '"' && c != '}' {
				return 0, scanNotJSON
			}
			js.sawKey = true
		}
		if js.inStr {
			switch {
			case js.esc:
				js.esc = false
			case c == '\\':
				js.esc = true
			case c == '"':
				js.inStr = false
			}
			continue
		}
		switch c {
		case '"':
			js.inStr = true
		case '{', '[':
			js.depth++
		case '}', ']':
			js.depth--
			if js.depth == 0 {
				js.pos++
				return js.pos, scanDone
			}
		}
	}
	return 0, scanMore
}
