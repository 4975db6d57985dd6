// Package agent is ftchat's coding agent: a loop that lets the model call
// tools (read, search, edit and write files, run commands) in one workspace
// directory, with every path confined to it and every change approved by
// the user (or denied, or allowed wholesale with --yolo).
//
// One Run is one user request: Generate with the tools offered; when the
// answer holds tool calls, run them (asking for approval where needed),
// append the calls and their results to the conversation and Generate
// again, until the model answers without a call or a limit is hit: model
// turns (MaxSteps) and tokens per answer (MaxTokens) are capped by default.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// Generator is what the loop needs from a model: *engine.Session.
type Generator interface {
	Generate(ctx context.Context, req engine.Request) <-chan engine.Event
}

// Fitter checks a request against the KV pool before it is sent
// (*engine.Engine). CountTokens sizes turns for the drop policy.
type Fitter interface {
	FitCheck(req engine.Request) error
	CountTokens(text string) int
}

// DefaultMaxSteps bounds the generations (model turns) of one request:
// room for a task of many tool calls, and an end for a model that loops.
const DefaultMaxSteps = 20

// DefaultMaxTokens bounds one generation when Config.MaxTokens is 0: a
// small model that never stops (or answers a task with pages of made-up
// code) ends in minutes, not when the KV pool is full.
const DefaultMaxTokens = 2048

// Config configures an Agent. Gen, Tools and Sink are required.
type Config struct {
	Gen      Generator
	Fit      Fitter // optional: without it the pool is not checked up front
	Tools    *Tools
	Approver Approver // nil denies everything that needs approval
	Sink     Sink
	// System is the system prompt (prompts.Agent). The tools are not in
	// it: they go in Request.Tools, and the engine renders them with the
	// model's template, or appends ftchat's tool list (prompts.ToolsBlock)
	// when the template has no tool format.
	System    string
	MaxSteps  int // 0: DefaultMaxSteps
	MaxTokens int // per generation; 0: DefaultMaxTokens, < 0: no limit
	Sampling  engine.Sampling
	// MaxStepsFlag and MaxTokensFlag name the settings that raise the
	// limits (e.g. "--agent-max-steps"), for the note when one stops a run.
	MaxStepsFlag, MaxTokensFlag string
	// NoToolHint, when set, is noted once per Agent when the first answer
	// to a request holds no tool call and the model has called none yet:
	// models too small to call tools answer from imagination, and the user
	// should learn that from the first task, not the sixth.
	NoToolHint string
}

// Stop says why a Run ended.
type Stop string

const (
	StopAnswer    Stop = "answer"     // the model answered without a tool call
	StopStepLimit Stop = "step_limit" // MaxSteps generations, still calling tools
	StopPoolFull  Stop = "pool_full"  // the KV pool filled up during an answer
	StopLength    Stop = "length"     // MaxTokens reached
)

// Result sums up one Run.
type Result struct {
	Answer string // the text of the last generation
	Steps  int    // generations run
	Stop   Stop
	Denied []string // summaries of the actions that were denied
}

// Agent holds one conversation.
type Agent struct {
	cfg    Config
	perms  permissions
	msgs   []engine.Message
	turns  []int // index in msgs where each user request starts
	nextID int
	// calledTool: the model has written a tool call (well-formed or not);
	// hinted: NoToolHint was noted.
	calledTool, hinted bool
}

// New checks cfg and starts a conversation with the system prompt.
func New(cfg Config) (*Agent, error) {
	if cfg.Gen == nil || cfg.Tools == nil || cfg.Sink == nil {
		return nil, errors.New("agent: Config.Gen, Tools and Sink are required")
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	switch {
	case cfg.MaxTokens == 0:
		cfg.MaxTokens = DefaultMaxTokens
	case cfg.MaxTokens < 0:
		cfg.MaxTokens = 0 // the engine's "no limit"
	}
	a := &Agent{cfg: cfg, perms: permissions{approver: cfg.Approver}}
	if cfg.System != "" {
		a.msgs = append(a.msgs, engine.Message{Role: "system", Content: cfg.System})
	}
	return a, nil
}

// Messages is the conversation so far, in the agent's own form (tool calls
// as ToolCalls, results as role "tool").
func (a *Agent) Messages() []engine.Message { return a.msgs }

// Reset forgets the conversation but the system prompt (/clear).
// "Allow for this session" approvals are kept: they belong to the session,
// not the conversation.
func (a *Agent) Reset() {
	if len(a.msgs) > 0 && a.msgs[0].Role == "system" {
		a.msgs = a.msgs[:1]
	} else {
		a.msgs = nil
	}
	a.turns = nil
}

// Restore replaces the conversation (the system prompt stays) with the
// user and assistant messages of msgs, e.g. a saved session's requests and
// answers; each user message starts a turn. Tool calls and results are
// not part of a saved session, so other roles are skipped.
func (a *Agent) Restore(msgs []engine.Message) {
	a.Reset()
	for _, m := range msgs {
		switch m.Role {
		case "user":
			a.turns = append(a.turns, len(a.msgs))
		case "assistant":
		default:
			continue
		}
		a.msgs = append(a.msgs, engine.Message{Role: m.Role, Content: m.Content})
	}
}

// Run handles one user request to the end: an answer, the step limit, a
// full pool, or an error (cancellation included).
func (a *Agent) Run(ctx context.Context, request string) (Result, error) {
	a.turns = append(a.turns, len(a.msgs))
	a.msgs = append(a.msgs, engine.Message{Role: "user", Content: request})
	var res Result
	for {
		if res.Steps == a.cfg.MaxSteps {
			res.Stop = StopStepLimit
			a.cfg.Sink.Note(fmt.Sprintf("stopped after %d model turns (%s); the model was still calling tools; the results so far are above",
				a.cfg.MaxSteps, orDefault(a.cfg.MaxStepsFlag, "the step limit")))
			return res, nil
		}
		req, err := a.fit()
		if err != nil {
			return res, err
		}
		res.Steps++
		out, err := a.generate(ctx, req)
		if err != nil {
			return res, err
		}
		res.Answer = out.text
		firstAnswer := res.Steps == 1
		if len(out.calls) > 0 || len(out.malformed) > 0 {
			a.calledTool = true
		}
		if len(out.calls) == 0 && len(out.malformed) == 0 {
			a.msgs = append(a.msgs, engine.Message{Role: "assistant", Content: out.text, Reasoning: out.thinking})
			switch out.stop {
			case engine.StopPoolFull:
				res.Stop = StopPoolFull
				a.cfg.Sink.Note("stopped: the KV cache is full; the answer above is cut short")
			case engine.StopMaxTokens:
				res.Stop = StopLength
				a.cfg.Sink.Note(fmt.Sprintf("stopped: the answer reached %d tokens (%s); it is cut short",
					a.cfg.MaxTokens, orDefault(a.cfg.MaxTokensFlag, "the token limit")))
			default:
				res.Stop = StopAnswer
				if out.text == "" {
					a.cfg.Sink.Note("the model ended its turn without writing an answer")
				}
			}
			if firstAnswer && !a.calledTool && !a.hinted && a.cfg.NoToolHint != "" {
				a.hinted = true
				a.cfg.Sink.Note(a.cfg.NoToolHint)
			}
			return res, nil
		}
		a.msgs = append(a.msgs, engine.Message{Role: "assistant", Content: out.text, Reasoning: out.thinking, ToolCalls: out.calls})
		for _, c := range out.calls {
			content, denied := a.execute(ctx, c)
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if denied != "" {
				res.Denied = append(res.Denied, denied)
			}
			a.msgs = append(a.msgs, engine.Message{Role: "tool", Content: content, ToolCallID: c.ID, Name: c.Name})
		}
		if len(out.malformed) > 0 {
			a.msgs = append(a.msgs, engine.Message{Role: "user", Content: malformedFeedback(out.malformed)})
		}
	}
}

// malformedFeedback tells the model what was wrong with its calls and how
// a call looks, in the format its template taught it.
func malformedFeedback(errs []error) string {
	var b strings.Builder
	format := chat.ToolHermes
	for _, e := range errs {
		fmt.Fprintf(&b, "Error: %v. ", e)
		var me *chat.MalformedCallError
		if errors.As(e, &me) && me.Format != chat.ToolNone {
			format = me.Format
		}
	}
	b.WriteString("The call was not run. Write a call exactly like this: " + chat.CallExample(format))
	return b.String()
}

// execute plans, approves and runs one call; it returns the tool message
// content, and the plan summary when the user denied it.
func (a *Agent) execute(ctx context.Context, c engine.ToolCall) (string, string) {
	sink := a.cfg.Sink
	plan, err := a.cfg.Tools.Plan(c)
	if err != nil {
		sink.ToolResult(c, "", err)
		return "Error: " + err.Error(), ""
	}
	sink.ToolCall(c, plan.Summary)
	d, err := a.perms.check(ctx, plan)
	if err != nil {
		err = fmt.Errorf("approval failed: %w", err)
		sink.ToolResult(c, "", err)
		return "Error: " + err.Error(), ""
	}
	if d == Deny {
		sink.Note("denied: " + plan.Summary)
		return "The user denied this action (" + plan.Summary + "). Do not try it again; say what you wanted to do instead.", plan.Summary
	}
	out, err := plan.Run(ctx)
	sink.ToolResult(c, out, err)
	if err != nil {
		return "Error: " + err.Error(), ""
	}
	return out, ""
}

type stepOutput struct {
	text      string
	thinking  string // kept as Message.Reasoning: the template decides what the next prompt shows
	calls     []engine.ToolCall
	malformed []error
	stop      engine.StopReason
}

// generate runs one generation, streaming text to the sink and collecting
// the tool calls the engine parsed (EventToolCall) and the malformed ones
// it reported (EventToolError).
func (a *Agent) generate(ctx context.Context, req engine.Request) (stepOutput, error) {
	var out stepOutput
	var text, thinking strings.Builder
	var genErr error
	for ev := range a.cfg.Gen.Generate(ctx, req) {
		switch ev.Kind {
		case engine.EventText:
			text.WriteString(ev.Text)
			a.cfg.Sink.Text(ev.Text)
		case engine.EventThinking:
			thinking.WriteString(ev.Text)
			a.cfg.Sink.Thinking(ev.Text)
		case engine.EventProgress:
			if ps, ok := a.cfg.Sink.(ProgressSink); ok {
				ps.Progress(ev.Done, ev.Total)
			}
		case engine.EventToolCall:
			if ev.ToolCall != nil {
				out.calls = append(out.calls, a.newCall(ev.ToolCall.Name, ev.ToolCall.Arguments))
			}
		case engine.EventToolError:
			err := ev.Err
			if err == nil {
				err = errors.New("malformed tool call")
			}
			// Kept in the turn, so the conversation shows what the model
			// wrote before the error message about it.
			text.WriteString(ev.Text)
			out.malformed = append(out.malformed, err)
			a.cfg.Sink.Note(fmt.Sprintf("malformed tool call (%v): %s", err, clip(ev.Text, 200)))
		case engine.EventDone:
			out.stop = ev.Stop
		case engine.EventError:
			genErr = ev.Err
		}
	}
	out.text = strings.TrimSpace(text.String())
	out.thinking = strings.TrimSpace(thinking.String())
	if genErr != nil {
		return out, genErr
	}
	if out.stop == engine.StopCancelled || ctx.Err() != nil {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		return out, context.Canceled
	}
	return out, nil
}

func (a *Agent) newCall(name string, args map[string]any) engine.ToolCall {
	a.nextID++
	if args == nil {
		args = map[string]any{}
	}
	return engine.ToolCall{ID: fmt.Sprintf("call_%d", a.nextID), Name: name, Arguments: args}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// request builds the engine request for the conversation.
func (a *Agent) request() engine.Request {
	return engine.Request{Messages: a.msgs, Tools: a.cfg.Tools.Defs(), MaxTokens: a.cfg.MaxTokens, Sampling: a.cfg.Sampling}
}

// fit returns the request for the next step, first making the
// conversation fit the KV pool by the documented policy (docs/agent.md):
//  1. drop whole earlier requests (a user request with its calls, results
//     and answer), oldest first, as few as kvcache.DropOldestTurns says;
//  2. then, within the current request, replace tool results with a short
//     note, oldest first.
//
// The system prompt and the current request are always kept. Each drop is
// reported to the sink; when nothing is left to drop the error says so.
func (a *Agent) fit() (engine.Request, error) {
	for {
		req := a.request()
		if a.cfg.Fit == nil {
			return req, nil
		}
		err := a.cfg.Fit.FitCheck(req)
		if err == nil {
			return req, nil
		}
		var full *kvcache.PoolFullError
		if !errors.As(err, &full) {
			return req, err
		}
		if note, ok := a.dropTurns(full); ok {
			a.cfg.Sink.Note(note)
			continue
		}
		if note, ok := a.dropToolResult(); ok {
			a.cfg.Sink.Note(note)
			continue
		}
		return req, fmt.Errorf("the current request does not fit the KV cache even with all older turns and tool results dropped: %w", err)
	}
}

func (a *Agent) msgTokens(ms []engine.Message) int {
	n := 0
	for _, m := range ms {
		n += a.cfg.Fit.CountTokens(m.Content) + 4 // role markers
		for _, c := range m.ToolCalls {
			b, _ := json.Marshal(c.Arguments)
			n += a.cfg.Fit.CountTokens(c.Name+string(b)) + 8
		}
	}
	return n
}

// dropTurns drops the oldest earlier requests.
func (a *Agent) dropTurns(full *kvcache.PoolFullError) (string, bool) {
	earlier := len(a.turns) - 1 // the last turn is the current request
	if earlier == 0 {
		return "", false
	}
	sizes := make([]int, earlier)
	sum := 0
	for i := range earlier {
		sizes[i] = a.msgTokens(a.msgs[a.turns[i]:a.turns[i+1]])
		sum += sizes[i]
	}
	need := max(0, full.Asked-sum)
	drop, err := kvcache.DropOldestTurns(sizes, 0, need, full.Fit)
	if err != nil || drop == 0 {
		drop = 1 // the estimate missed template overhead: drop one and check again
	}
	drop = min(drop, earlier)
	from, to := a.turns[0], a.turns[drop]
	dropped := to - from
	tokens := 0
	for _, s := range sizes[:drop] {
		tokens += s
	}
	a.msgs = append(a.msgs[:from:from], a.msgs[to:]...)
	a.turns = a.turns[drop:]
	for i := range a.turns {
		a.turns[i] -= dropped
	}
	return fmt.Sprintf("context: the conversation did not fit the KV cache (%d tokens asked, %d fit); dropped the %d oldest request(s) (%d messages, about %d tokens); the system prompt and the current request are kept",
		full.Asked, full.Fit, drop, dropped, tokens), true
}

// droppedMark starts the content of a tool result that was dropped.
const droppedMark = "[dropped to fit the context"

// dropToolResult replaces the oldest tool result of the current request.
func (a *Agent) dropToolResult() (string, bool) {
	start := 0
	if len(a.turns) > 0 {
		start = a.turns[len(a.turns)-1]
	}
	for i := start; i < len(a.msgs); i++ {
		m := &a.msgs[i]
		if m.Role != "tool" || strings.HasPrefix(m.Content, droppedMark) {
			continue
		}
		size := len(m.Content)
		m.Content = fmt.Sprintf("%s: %d bytes of %s output]", droppedMark, size, m.Name)
		return fmt.Sprintf("context: the conversation did not fit the KV cache; dropped the output of %s (%d bytes) from this request", m.Name, size), true
	}
	return "", false
}
