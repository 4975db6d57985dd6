package engine

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/tokenizer"
	"github.com/ftchat/ftchat/prompts"
)

// renderer turns a conversation into the model's prompt text.
type renderer interface {
	Render(msgs []Message, tools []Tool, addGenerationPrompt bool) (string, error)
	// RenderSpans also returns the byte ranges that hold message data,
	// to be encoded with special-token text as plain text.
	RenderSpans(msgs []Message, tools []Tool, addGenerationPrompt bool) (string, [][2]int, error)
}

// chatTemplate renders with the model's own Jinja template.
type chatTemplate struct {
	t        *chat.Template
	bos, eos string
	format   chat.ToolFormat
	tok      *tokenizer.Tokenizer // for the tool-definition check; nil skips it
}

func newRenderer(f *gguf.File, tok *tokenizer.Tokenizer) (renderer, string, error) {
	t, err := chat.FromGGUF(f)
	if err != nil {
		return nil, "", err
	}
	if !t.Fallback {
		t.Origin = f.Path // render errors (a hostile template over its limits) name the model file
	}
	ct := &chatTemplate{t: t, tok: tok}
	if tok.BOS() >= 0 {
		ct.bos = tok.Piece(tok.BOS())
	}
	if tok.EOS() >= 0 {
		ct.eos = tok.Piece(tok.EOS())
	}
	arch, _ := f.String("general.architecture")
	src := t.Source
	if t.Fallback {
		src = ""
	}
	ct.format = chat.ToolFormatFor(arch, src)
	name := "gguf"
	if t.Fallback {
		name = "chatml (fallback: " + t.FallbackReason + ")"
	}
	return ct, name, nil
}

func (c *chatTemplate) Render(msgs []Message, tools []Tool, addGen bool) (string, error) {
	msgs, tools, err := c.prepare(msgs, tools)
	if err != nil {
		return "", err
	}
	return c.t.Render(msgs, tools, c.opts(addGen))
}

// prepare inlines the tools when the template has no tool format.
func (c *chatTemplate) prepare(msgs []Message, tools []Tool) ([]Message, []Tool, error) {
	if len(tools) > 0 && c.format == chat.ToolNone {
		var err error
		if msgs, err = inlineTools(msgs, tools); err != nil {
			return nil, nil, err
		}
		tools = nil
	}
	return msgs, tools, nil
}

// opts: ContentIsAnswer, as ftchat keeps an answer's thinking in
// Message.Reasoning, never in its Content.
func (c *chatTemplate) opts(addGen bool) chat.RenderOptions {
	return chat.RenderOptions{AddGenerationPrompt: addGen, BOS: c.bos, EOS: c.eos, ContentIsAnswer: true}
}

// RenderSpans renders like Render and also returns the byte ranges of the
// prompt that hold message data (contents, names, ids, tool-call
// arguments): the tokenizer encodes them with special-token text as plain
// text, so no message can forge a turn.
//
// The ranges are not guessed from the prompt. The conversation is rendered
// a second time with every data string replaced by an opaque placeholder
// (a random nonce absent from every input and from the template), which
// leaves pieces made only of the template's own text; the real prompt must
// then be exactly those pieces with each placeholder replaced by its string
// as the template may have written it (unchanged, trimmed, or JSON-escaped
// by tojson). Special tokens are parsed only inside the pieces, which hold
// no message text. A template that transforms data any other way (upper,
// replace, slicing, branching on the text) cannot be split so, and the
// prompt is refused rather than encoded with specials parsed in content.
func (c *chatTemplate) RenderSpans(msgs []Message, tools []Tool, addGen bool) (string, [][2]int, error) {
	msgs, tools, err := c.prepare(msgs, tools)
	if err != nil {
		return "", nil, err
	}
	for _, m := range msgs {
		if !plainRole(m.Role) {
			return "", nil, fmt.Errorf("message role %q: a role is a plain name (system, user, assistant, tool)", m.Role)
		}
	}
	if c.tok != nil && len(tools) > 0 {
		// Tool definitions are ftchat's own; they are template input, so
		// they must not carry control-token text either.
		b, _ := json.Marshal(tools)
		if c.tok.HasSpecialText(string(b)) {
			return "", nil, errors.New("a tool definition contains special-token text; remove it from the tool's name, description or parameters")
		}
	}
	text, err := c.t.Render(msgs, tools, c.opts(addGen))
	if err != nil {
		return "", nil, err
	}
	ph, err := c.newPlaceholders(msgs)
	if err != nil {
		return "", nil, err
	}
	marked := make([]Message, len(msgs))
	for i, m := range msgs {
		marked[i] = ph.message(m)
	}
	withPH, err := c.t.Render(marked, tools, c.opts(addGen))
	if err != nil {
		return "", nil, fmt.Errorf("chat template: rendering with message text hidden: %w", err)
	}
	spans, ok := ph.match(withPH, text)
	if !ok {
		return "", nil, errors.New("chat template: it rewrites message text (beyond trimming or tojson) so that the text cannot be told apart from the template's own control tokens; " +
			"ftchat refuses to encode such a prompt, as message text could become control tokens. Use a model whose chat template inserts message contents as they are")
	}
	return text, spans, nil
}

// plainRole reports whether a role is a bare name: roles are template
// input that is not hidden behind placeholders (templates compare them).
func plainRole(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for i := 0; i < len(r); i++ {
		b := r[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// phDigits is the fixed width of a placeholder's index: fixed so that the
// placeholders of a map's keys sort as the keys do.
const phDigits = 9

// placeholders maps opaque strings nonce+index to the data they stand for.
type placeholders struct {
	nonce string
	vals  []string
	cands map[int][]string
}

func (c *chatTemplate) newPlaceholders(msgs []Message) (*placeholders, error) {
	var inputs []string
	inputs = append(inputs, c.t.Source, c.bos, c.eos)
	for _, m := range msgs {
		inputs = append(inputs, m.Content, m.Reasoning, m.Name, m.ToolCallID)
		for _, tc := range m.ToolCalls {
			inputs = append(inputs, tc.ID, tc.Name)
			b, _ := json.Marshal(tc.Arguments)
			inputs = append(inputs, string(b))
		}
	}
	for range 4 {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		// Letters and digits only: trim, tojson and escaping keep it whole.
		nonce := "ftchatPH" + hex.EncodeToString(b[:]) + "n"
		clash := false
		for _, s := range inputs {
			if strings.Contains(s, nonce) {
				clash = true
				break
			}
		}
		if !clash {
			return &placeholders{nonce: nonce, cands: map[int][]string{}}, nil
		}
	}
	return nil, errors.New("chat template: could not choose a placeholder absent from the conversation")
}

// of returns the placeholder for s; the empty string and whitespace stay
// as they are (templates test contents for emptiness, trimmed or not, and
// whitespace holds no special text).
func (p *placeholders) of(s string) string {
	if strings.TrimSpace(s) == "" {
		return s
	}
	p.vals = append(p.vals, s)
	return fmt.Sprintf("%s%0*d", p.nonce, phDigits, len(p.vals)-1)
}

func (p *placeholders) message(m Message) Message {
	out := Message{Role: m.Role, Content: p.of(m.Content), Reasoning: p.of(m.Reasoning), Name: p.of(m.Name), ToolCallID: p.of(m.ToolCallID)}
	for _, tc := range m.ToolCalls {
		args, _ := p.value(map[string]any(tc.Arguments)).(map[string]any)
		if tc.Arguments == nil {
			args = nil
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: p.of(tc.ID), Name: p.of(tc.Name), Arguments: args})
	}
	return out
}

// value hides every string of JSON-shaped data, map keys included. Keys
// get indexes in their sorted order, so the template sees them in the
// same order as the real keys.
func (p *placeholders) value(v any) any {
	switch x := v.(type) {
	case string:
		return p.of(x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make(map[string]any, len(x))
		for _, k := range keys {
			out[p.of(k)] = p.value(x[k])
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = p.value(e)
		}
		return out
	}
	return v
}

// match splits withPH into template pieces and placeholders and finds
// text as those pieces with each placeholder replaced by one of its
// string's renderings. It returns the ranges of text the data took.
func (p *placeholders) match(withPH, text string) ([][2]int, bool) {
	type item struct {
		lit string
		ph  int // -1 for a template piece
	}
	var items []item
	rest := withPH
	for {
		i := strings.Index(rest, p.nonce)
		if i < 0 {
			break
		}
		digits := rest[i+len(p.nonce):]
		k := -1
		if len(digits) >= phDigits {
			if n, err := strconv.Atoi(digits[:phDigits]); err == nil && n >= 0 && n < len(p.vals) {
				k = n
			}
		}
		if k < 0 {
			// A cut placeholder: the template sliced data; refused below,
			// as the piece then cannot be found in text.
			items = append(items, item{lit: rest[:i+len(p.nonce)], ph: -1})
			rest = rest[i+len(p.nonce):]
			continue
		}
		if i > 0 {
			items = append(items, item{lit: rest[:i], ph: -1})
		}
		items = append(items, item{ph: k})
		rest = digits[phDigits:]
	}
	if rest != "" {
		items = append(items, item{lit: rest, ph: -1})
	}
	// Depth-first over the candidate renderings, remembering dead ends
	// (item, position) so the search stays polynomial.
	dead := map[[2]int]bool{}
	var spans [][2]int
	var walk func(n, pos int) bool
	walk = func(n, pos int) bool {
		if n == len(items) {
			return pos == len(text)
		}
		if dead[[2]int{n, pos}] {
			return false
		}
		it := items[n]
		if it.ph < 0 {
			if strings.HasPrefix(text[pos:], it.lit) && walk(n+1, pos+len(it.lit)) {
				return true
			}
		} else {
			for _, c := range p.candidates(it.ph) {
				if !strings.HasPrefix(text[pos:], c) {
					continue
				}
				mark := len(spans)
				if c != "" {
					spans = append(spans, [2]int{pos, pos + len(c)})
				}
				if walk(n+1, pos+len(c)) {
					return true
				}
				spans = spans[:mark]
			}
		}
		dead[[2]int{n, pos}] = true
		return false
	}
	if !walk(0, 0) {
		return nil, false
	}
	return spans, true
}

// candidates are the ways templates write a data string: as it is,
// trimmed (|trim, .strip and friends, as Llama 3 does) or JSON-escaped
// inside a tojson string.
func (p *placeholders) candidates(k int) []string {
	if c, ok := p.cands[k]; ok {
		return c
	}
	s := p.vals[k]
	out := []string{s}
	add := func(c string) {
		for _, o := range out {
			if o == c {
				return
			}
		}
		out = append(out, c)
	}
	trim, js := dataFilters()
	if v, err := trim.Render(nil, nil, chat.RenderOptions{Extra: map[string]any{"s": s}}); err == nil {
		add(v)
	}
	if v, err := js.Render(nil, nil, chat.RenderOptions{Extra: map[string]any{"s": s}}); err == nil && len(v) >= 2 {
		add(v[1 : len(v)-1])
	}
	for _, cut := range []string{"\n", " \t\n\r"} {
		add(strings.Trim(s, cut))
		add(strings.TrimLeft(s, cut))
		add(strings.TrimRight(s, cut))
	}
	p.cands[k] = out
	return out
}

// dataFilters are the template engine's own trim and tojson, so that a
// candidate is byte for byte what the chat template writes.
var dataFilters = sync.OnceValues(func() (*chat.Template, *chat.Template) {
	trim, err1 := chat.New("{{ s|trim }}")
	js, err2 := chat.New("{{ s|tojson }}")
	if err := errors.Join(err1, err2); err != nil {
		panic("engine: data filter templates do not parse: " + err.Error())
	}
	return trim, js
})

// inlineTools rewrites a conversation for a template without tool support
// (SmolLM2, Llama 3.0): the tool list (prompts/tools.md) is appended to the
// system message, earlier calls become <tool_call> text in the assistant
// turn, and tool results become user turns wrapped in <tool_response>.
// Calls are then parsed in the Hermes format that text asks for.
func inlineTools(msgs []chat.Message, tools []chat.Tool) ([]chat.Message, error) {
	sigs := make([]string, len(tools))
	for i, t := range tools {
		sig, err := json.Marshal(map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		sigs[i] = string(sig)
	}
	block, err := prompts.ToolsBlock(sigs)
	if err != nil {
		return nil, err
	}
	out := make([]chat.Message, 0, len(msgs)+1)
	if len(msgs) > 0 && msgs[0].Role == "system" {
		sys := msgs[0]
		sys.Content = strings.TrimRight(sys.Content, "\n") + "\n\n" + block
		out = append(out, sys)
		msgs = msgs[1:]
	} else {
		out = append(out, chat.Message{Role: "system", Content: block})
	}
	for _, m := range msgs {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			var c strings.Builder
			c.WriteString(m.Content)
			for _, tc := range m.ToolCalls {
				args, _ := json.Marshal(tc.Arguments)
				if c.Len() > 0 {
					c.WriteString("\n")
				}
				fmt.Fprintf(&c, "<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", tc.Name, args)
			}
			out = append(out, chat.Message{Role: "assistant", Content: c.String()})
		case m.Role == "tool":
			// Consecutive results share one user turn.
			block := "<tool_response>\n" + m.Content + "\n</tool_response>"
			if n := len(out); n > 0 && out[n-1].Role == "user" && strings.HasPrefix(out[n-1].Content, "<tool_response>") {
				out[n-1].Content += "\n" + block
			} else {
				out = append(out, chat.Message{Role: "user", Content: block})
			}
		default:
			out = append(out, m)
		}
	}
	return out, nil
}

// outputParser splits the generated text into answer text, thinking and
// tool calls, in the model family's own tool-call format.
type outputParser struct {
	p     *chat.StreamParser
	calls int
	// stopAtCall ends generation after the first complete call when the
	// tools were inlined: such models were never trained to stop there and
	// go on to invent the tool's answer.
	stopAtCall bool
}

// offered are the tools of the request: their schemas type the values of
// formats whose calls are not JSON (chat.ToolQwenXML).
func newOutputParser(r renderer, prompt string, tools bool, offered ...Tool) *outputParser {
	format, inlined := chat.ToolNone, false
	if ct, ok := r.(*chatTemplate); ok && tools {
		format = ct.format
		if format == chat.ToolNone {
			format, inlined = chat.ToolHermes, true
		}
	}
	p := chat.NewStreamParser(format, chat.PromptOpensThinking(prompt))
	p.SetTools(offered)
	return &outputParser{p: p, stopAtCall: inlined}
}

func (p *outputParser) feed(s string) []Event {
	if s == "" {
		return nil
	}
	return p.events(p.p.Feed(s))
}

func (p *outputParser) flush() []Event { return p.events(p.p.Flush()) }

func (p *outputParser) events(segs []chat.Segment) []Event {
	var out []Event
	for _, sg := range segs {
		switch sg.Kind {
		case chat.SegText:
			out = append(out, Event{Kind: EventText, Text: sg.Text})
		case chat.SegThinking:
			out = append(out, Event{Kind: EventThinking, Text: sg.Text})
		case chat.SegToolCall:
			p.calls++
			out = append(out, Event{Kind: EventToolCall, ToolCall: &ToolCall{
				ID: fmt.Sprintf("call_%d", p.calls), Name: sg.Call.Name, Arguments: sg.Call.Arguments, ArgsJSON: sg.Call.ArgsJSON}})
		case chat.SegToolError:
			out = append(out, Event{Kind: EventToolError, Text: sg.Text, Err: sg.Err})
		}
	}
	return out
}
