package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/prompts"
)

// statsEvery is how often a streaming answer updates the status pane.
const statsEvery = 250 * time.Millisecond

// Generate streams the answer to req from the server. The channel is
// closed after EventDone or EventError; cancelling ctx closes the request
// (the server stops generating) and ends with EventDone, StopCancelled.
func (s *Session) Generate(ctx context.Context, req engine.Request) <-chan engine.Event {
	ch := make(chan engine.Event, 64)
	go func() {
		defer close(ch)
		send := func(ev engine.Event) {
			select {
			case ch <- ev:
			case <-ctx.Done():
				if ev.Kind == engine.EventDone || ev.Kind == engine.EventError {
					select {
					case ch <- ev:
					case <-time.After(time.Second):
					}
				}
			}
		}
		g := &generation{e: s.e, req: req, send: send, start: time.Now()}
		err := g.run(ctx)
		switch {
		case ctx.Err() != nil:
			send(engine.Event{Kind: engine.EventDone, Stop: engine.StopCancelled, Stats: s.e.Stats()})
		case err != nil:
			send(engine.Event{Kind: engine.EventError, Err: err, Stats: s.e.Stats()})
		}
	}()
	return ch
}

// oaMessage and friends are the OpenAI chat wire format.
type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
	Name       string       `json:"name,omitempty"`
}

type oaToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string     `json:"type"`
	Function oaFunction `json:"function"`
}

type oaFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
}

type oaRequest struct {
	Model         string          `json:"model"`
	Messages      []oaMessage     `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions map[string]bool `json:"stream_options,omitempty"`
	Tools         []oaTool        `json:"tools,omitempty"`
	MaxTokens     int             `json:"max_tokens,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	Seed          *int64          `json:"seed,omitempty"`
	Stop          []string        `json:"stop,omitempty"`
}

// wireRequest is req in the OpenAI format. Only the sampling parameters
// every server takes are sent (top-k, min-p and the repeat penalty are not
// OpenAI's, and some servers refuse unknown fields). With inline, the
// tools go into the system prompt as ftchat's tool list and earlier calls
// and results become text, for a server that refuses the tools parameter.
func wireRequest(model string, req engine.Request, inline bool) (oaRequest, error) {
	w := oaRequest{Model: model, Stream: true, StreamOptions: map[string]bool{"include_usage": true}, MaxTokens: max(req.MaxTokens, 0)}
	sp := req.Sampling
	if t := float64(sp.Temperature); t >= 0 && !math.IsNaN(t) {
		w.Temperature = &t
	}
	if p := float64(sp.TopP); p > 0 && p < 1 {
		w.TopP = &p
	}
	if sp.Seed != 0 {
		seed := int64(sp.Seed & math.MaxInt32) // int32 range: llama.cpp and others refuse larger seeds
		w.Seed = &seed
	}
	w.Stop = sp.Stop
	msgs := req.Messages
	if inline && len(req.Tools) > 0 {
		var err error
		if msgs, err = inlineTools(msgs, req.Tools); err != nil {
			return w, err
		}
	} else {
		for _, t := range req.Tools {
			w.Tools = append(w.Tools, oaTool{Type: "function", Function: oaFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
		}
	}
	for _, m := range msgs {
		content := m.Content
		om := oaMessage{Role: m.Role, Content: &content, ToolCallID: m.ToolCallID}
		if m.Role == "tool" {
			om.Name = m.Name
		}
		for _, tc := range m.ToolCalls {
			args, err := json.Marshal(tc.Arguments)
			if err != nil {
				return w, fmt.Errorf("tool call %s: %w", tc.Name, err)
			}
			var c oaToolCall
			c.ID, c.Type = tc.ID, "function"
			c.Function.Name, c.Function.Arguments = tc.Name, string(args)
			om.ToolCalls = append(om.ToolCalls, c)
		}
		if len(om.ToolCalls) > 0 && content == "" {
			om.Content = nil
		}
		w.Messages = append(w.Messages, om)
	}
	return w, nil
}

// inlineTools writes the tools into the system prompt (prompts/tools.md,
// the Hermes format the fallback parser reads) and turns earlier calls and
// results into plain turns a server without tool support takes.
func inlineTools(msgs []engine.Message, tools []engine.Tool) ([]engine.Message, error) {
	sigs := make([]string, len(tools))
	for i, t := range tools {
		b, err := json.Marshal(oaTool{Type: "function", Function: oaFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}})
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		sigs[i] = string(b)
	}
	block, err := prompts.ToolsBlock(sigs)
	if err != nil {
		return nil, err
	}
	out := make([]engine.Message, 0, len(msgs)+1)
	if len(msgs) > 0 && msgs[0].Role == "system" {
		out = append(out, engine.Message{Role: "system", Content: strings.TrimRight(msgs[0].Content, "\n") + "\n\n" + block})
		msgs = msgs[1:]
	} else {
		out = append(out, engine.Message{Role: "system", Content: block})
	}
	for _, m := range msgs {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			parts := []string{}
			if m.Content != "" {
				parts = append(parts, m.Content)
			}
			for _, tc := range m.ToolCalls {
				args, err := json.Marshal(tc.Arguments)
				if err != nil {
					return nil, fmt.Errorf("tool call %s: %w", tc.Name, err)
				}
				name, _ := json.Marshal(tc.Name)
				parts = append(parts, fmt.Sprintf("<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", name, args))
			}
			out = append(out, engine.Message{Role: "assistant", Content: strings.Join(parts, "\n")})
		case m.Role == "tool":
			out = append(out, engine.Message{Role: "user", Content: "<tool_response>\n" + m.Content + "\n</tool_response>"})
		default:
			out = append(out, engine.Message{Role: m.Role, Content: m.Content})
		}
	}
	return out, nil
}

// toolsRefused reports whether a 4xx answer is the server refusing the
// tools parameter (rather than the request as a whole).
func toolsRefused(code int, body []byte) bool {
	if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity && code != http.StatusNotImplemented {
		return false
	}
	msg := strings.ToLower(serverMessage(body))
	return strings.Contains(msg, "tool") || strings.Contains(msg, "function")
}

// generation is one Generate call.
type generation struct {
	e     *Engine
	req   engine.Request
	send  func(engine.Event)
	start time.Time

	first     time.Time // first answer token
	last      time.Time
	chunks    int // content-bearing chunks (a token count when usage is missing)
	usage     *oaUsage
	finish    string
	parser    *chat.StreamParser // thinking and prompt-format tool calls in the text
	calls     []*pendingCall     // native tool_calls, by index
	textCalls int                // calls the parser found in the text
	nextStats time.Time
}

type pendingCall struct {
	id, name string
	args     strings.Builder
}

type oaUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type oaChunk struct {
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Delta   *oaDelta `json:"delta"`
		Message *oaDelta `json:"message"` // a non-streamed answer
		Finish  *string  `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaUsage `json:"usage"`
}

type oaDelta struct {
	Content          *string      `json:"content"`
	ReasoningContent *string      `json:"reasoning_content"`
	Reasoning        *string      `json:"reasoning"`
	ToolCalls        []oaToolCall `json:"tool_calls"`
}

func (g *generation) run(ctx context.Context) error {
	e := g.e
	e.mu.Lock()
	inline := e.noTools
	e.mu.Unlock()
	resp, err := g.post(ctx, inline)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK && len(g.req.Tools) > 0 && !inline {
		body, _ := readCapped(resp.Body, maxJSONBytes, "the error")
		resp.Body.Close()
		if e.nativeOnly || !toolsRefused(resp.StatusCode, body) {
			return e.statusErr(resp, body)
		}
		// The server has no native tool calling: offer the tools in the
		// prompt and parse the calls from the text, from now on.
		e.mu.Lock()
		e.noTools = true
		e.mu.Unlock()
		inline = true
		if resp, err = g.post(ctx, true); err != nil {
			return err
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, err := readCapped(resp.Body, maxJSONBytes, "the error")
		if err != nil {
			return e.readErr(err)
		}
		return e.statusErr(resp, body)
	}
	// The text goes through ftchat's stream parser, as the local engine's
	// does: a server without a reasoning parser sends <think> blocks in the
	// content, and one without a tool parser (or with the tools inlined)
	// sends the calls as text in the model's format.
	g.parser = newParser(e.model, g.req.Tools, inline)
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/json") {
		err = g.readJSON(resp.Body)
	} else {
		err = g.readSSE(ctx, resp.Body)
	}
	if err != nil {
		return err
	}
	return g.finishTurn(ctx)
}

// post sends the request, waiting out one 429's Retry-After.
func (g *generation) post(ctx context.Context, inline bool) (*http.Response, error) {
	body, err := wireRequest(g.e.model, g.req, inline)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	for attempt := 0; ; attempt++ {
		hreq, err := g.e.newRequest(ctx, http.MethodPost, g.e.endpoint("chat/completions"), bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		hreq.Header.Set("Accept", "text/event-stream")
		resp, err := g.e.do(hreq)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests || attempt > 0 {
			return resp, nil
		}
		wait, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now())
		if !ok || wait > g.e.maxWait {
			return resp, nil // statusErr words it
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONBytes))
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// retryAfter reads a Retry-After header: seconds or an HTTP date. A
// missing header means one second.
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return time.Second, true
	}
	if n, err := strconv.Atoi(h); err == nil {
		if n < 0 || n > 86400 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// newParser reads the tool calls the model wrote as text.
func newParser(model string, tools []engine.Tool, inline bool) *chat.StreamParser {
	format := chat.ToolNone
	if len(tools) > 0 {
		format = toolFormatFor(model, inline)
	}
	p := chat.NewStreamParser(format, false)
	p.SetTools(tools)
	return p
}

// toolFormatFor is the tool-call format to look for in the text: ftchat's
// Hermes list when the tools were inlined, else the model family's own
// (the name is all the client knows of it).
func toolFormatFor(model string, inline bool) chat.ToolFormat {
	if inline {
		return chat.ToolHermes
	}
	m := strings.ToLower(model)
	switch {
	case strings.Contains(m, "qwen3.5") || strings.Contains(m, "qwen3.6") || strings.Contains(m, "qwen3-coder") || strings.Contains(m, "qwen3_coder"):
		return chat.ToolQwenXML
	case strings.Contains(m, "llama-3") || strings.Contains(m, "llama3"):
		return chat.ToolLlama3JSON
	}
	return chat.ToolHermes
}

// idleReader fails a read the server leaves silent for longer than the
// timeout, by cancelling the request.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
	total int64
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.d)
		ir.total += int64(n)
		if ir.total > maxStreamBytes {
			return n, &tooLargeError{"the streamed answer", maxStreamBytes}
		}
	}
	return n, err
}

// readSSE reads the event stream: `data: {chunk}` lines up to `data: [DONE]`.
func (g *generation) readSSE(ctx context.Context, body io.ReadCloser) error {
	idled := make(chan struct{})
	timer := time.AfterFunc(g.e.timeout, func() {
		close(idled)
		body.Close() // unblocks the read
	})
	defer timer.Stop()
	sc := bufio.NewScanner(&idleReader{r: body, timer: timer, d: g.e.timeout})
	sc.Buffer(make([]byte, 64<<10), maxEventBytes)
	var data []byte // an event's data lines, joined
	done := false
	for !done && sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0: // end of an event
			if len(data) > 0 {
				var err error
				if done, err = g.event(data); err != nil {
					return err
				}
				data = data[:0]
			}
		case line[0] == ':': // comment (keep-alive)
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	err := sc.Err()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	select {
	case <-idled:
		return fmt.Errorf("the engine at %s sent nothing for %s in the middle of an answer; gave up (--remote-timeout)", g.e.baseStr, g.e.timeout)
	default:
	}
	if err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("the engine at %s sent an event larger than %d MiB; refused", g.e.baseStr, maxEventBytes>>20)
		}
		return g.e.readErr(err)
	}
	if !done && len(data) > 0 { // a last event without its blank line
		var err error
		if done, err = g.event(data); err != nil {
			return err
		}
	}
	if !done && g.finish == "" {
		return fmt.Errorf("the engine at %s ended the stream before the answer was complete (no finish_reason or [DONE])", g.e.baseStr)
	}
	return nil
}

// readJSON reads a non-streamed answer (a server that ignored stream).
func (g *generation) readJSON(body io.Reader) error {
	b, err := readCapped(body, maxStreamBytes, "the answer")
	if err != nil {
		return g.e.readErr(err)
	}
	if _, err := g.event(b); err != nil {
		return err
	}
	if g.finish == "" {
		g.finish = "stop"
	}
	return nil
}

// event handles one chunk; done is [DONE].
func (g *generation) event(data []byte) (done bool, err error) {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		return true, nil
	}
	var c oaChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return false, fmt.Errorf("the engine at %s sent an event that is not an OpenAI chat chunk (%v): %s", g.e.baseStr, err, clip(string(data), 120))
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return false, fmt.Errorf("the engine at %s failed mid-answer: %s", g.e.baseStr, serverMessage(data))
	}
	if c.Usage != nil {
		g.usage = c.Usage
	}
	for i, ch := range c.Choices {
		if i > 0 {
			break // n > 1 is never asked for
		}
		d := ch.Delta
		if d == nil {
			d = ch.Message
		}
		if d != nil {
			if err := g.delta(d); err != nil {
				return false, err
			}
		}
		if ch.Finish != nil && *ch.Finish != "" {
			g.finish = *ch.Finish
		}
	}
	if now := time.Now(); now.After(g.nextStats) && !g.first.IsZero() {
		g.nextStats = now.Add(statsEvery)
		g.send(engine.Event{Kind: engine.EventStats, Stats: g.liveStats(now)})
	}
	return false, nil
}

func (g *generation) delta(d *oaDelta) error {
	now := time.Now()
	got := false
	for _, r := range []*string{d.ReasoningContent, d.Reasoning} {
		if r != nil && *r != "" {
			g.send(engine.Event{Kind: engine.EventThinking, Text: *r})
			got = true
			break // a server sends one of the two names
		}
	}
	if d.Content != nil && *d.Content != "" {
		got = true
		g.segments(g.parser.Feed(*d.Content))
	}
	for _, tc := range d.ToolCalls {
		got = true
		idx := len(g.calls)
		switch {
		case tc.Index != nil:
			idx = *tc.Index
		case tc.ID == "" && len(g.calls) > 0:
			idx = len(g.calls) - 1 // a continuation without an index
		}
		if idx < 0 || idx > 128 {
			return fmt.Errorf("the engine at %s sent a tool call with index %d; refused", g.e.baseStr, idx)
		}
		for len(g.calls) <= idx {
			g.calls = append(g.calls, &pendingCall{})
		}
		pc := g.calls[idx]
		if tc.ID != "" {
			pc.id = tc.ID
		}
		pc.name += tc.Function.Name
		if pc.args.Len()+len(tc.Function.Arguments) > maxArgsBytes {
			return fmt.Errorf("the engine at %s sent tool call arguments larger than %d MiB; refused", g.e.baseStr, maxArgsBytes>>20)
		}
		pc.args.WriteString(tc.Function.Arguments)
	}
	if got {
		if g.first.IsZero() {
			g.first = now
		}
		g.last = now
		g.chunks++
	}
	return nil
}

// segments turns the fallback parser's output into events.
func (g *generation) segments(segs []chat.Segment) {
	for _, s := range segs {
		switch s.Kind {
		case chat.SegText:
			g.send(engine.Event{Kind: engine.EventText, Text: s.Text})
		case chat.SegThinking:
			g.send(engine.Event{Kind: engine.EventThinking, Text: s.Text})
		case chat.SegToolCall:
			g.send(engine.Event{Kind: engine.EventToolCall, ToolCall: s.Call})
			g.textCalls++
		case chat.SegToolError:
			g.send(engine.Event{Kind: engine.EventToolError, Text: s.Text, Err: s.Err})
		}
	}
}

// finishTurn emits the native tool calls, refreshes the server's numbers
// and ends with EventDone.
func (g *generation) finishTurn(ctx context.Context) error {
	g.segments(g.parser.Flush())
	calls := g.textCalls
	for _, pc := range g.calls {
		if pc.name == "" {
			g.send(engine.Event{Kind: engine.EventToolError, Text: pc.args.String(), Err: errors.New("the server sent a tool call without a function name")})
			continue
		}
		args := map[string]any{}
		raw := strings.TrimSpace(pc.args.String())
		if raw != "" {
			if err := json.Unmarshal([]byte(raw), &args); err != nil {
				g.send(engine.Event{Kind: engine.EventToolError, Text: raw, Err: fmt.Errorf("the arguments of %s are not a JSON object: %v", pc.name, err)})
				continue
			}
		}
		g.send(engine.Event{Kind: engine.EventToolCall, ToolCall: &engine.ToolCall{ID: pc.id, Name: pc.name, Arguments: args}})
		calls++
	}
	end := time.Now()
	g.e.refreshMetrics(ctx)
	st := g.finalStats(end)
	stop := engine.StopEOS
	switch {
	case calls > 0 || g.finish == "tool_calls" || g.finish == "function_call":
		stop = engine.StopToolCall
	case g.finish == "length":
		stop = engine.StopMaxTokens
	case g.finish == "stop" && len(g.req.Sampling.Stop) > 0:
		stop = engine.StopString // the server does not say which; a stop string is the likelier
	}
	g.send(engine.Event{Kind: engine.EventDone, Stop: stop, Stats: st})
	return nil
}

// liveStats is the stats while streaming: the decode rate so far.
func (g *generation) liveStats(now time.Time) engine.Stats {
	st := g.e.Stats()
	st.FirstToken = g.first.Sub(g.start)
	if d := now.Sub(g.first).Seconds(); d > 0 && g.chunks > 1 {
		st.DecodeTokensPerS = float64(g.chunks-1) / d
	}
	st.LastTurnDuration = now.Sub(g.start)
	return st
}

// finalStats records the turn: the server's usage when it sent one, else
// the chunks counted; the rates are measured here, so they include the
// network.
func (g *generation) finalStats(end time.Time) engine.Stats {
	e := g.e
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.stats
	prompt, completion, cached := 0, g.chunks, 0
	if u := g.usage; u != nil {
		prompt, completion = max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
		if u.PromptTokensDetails != nil {
			cached = min(max(u.PromptTokensDetails.CachedTokens, 0), prompt)
		}
	}
	st.LastPrefillTokens = prompt - cached
	st.PrefillTokens += int64(prompt - cached)
	st.ReusedTokens += int64(cached)
	st.DecodeTokens += int64(completion)
	st.LastTurnDuration = end.Sub(g.start)
	st.PrefillTokensPerS, st.DecodeTokensPerS, st.FirstToken = 0, 0, 0
	if !g.first.IsZero() {
		st.FirstToken = g.first.Sub(g.start)
		if s := st.FirstToken.Seconds(); s > 0 && prompt > cached {
			st.PrefillTokensPerS = float64(prompt-cached) / s
		}
		// The first token came with the prefill; the rest are decode.
		if s := g.last.Sub(g.first).Seconds(); s > 0 && completion > 1 {
			st.DecodeTokensPerS = float64(completion-1) / s
		}
	}
	return *st
}
