package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/agent/tui"
	"github.com/ftchat/ftchat/engine"
)

// agentScript is one scripted Run: it drives the sink and the approver as
// the real agent does and returns the Run's result.
type agentScript func(ctx context.Context, s tui.Sink, ap tui.Approver) (agent.Result, error)

// fakeAgent is a scripted agent double: each Run plays the next script
// through the real tui.Sink and tui.Approver.
type fakeAgent struct {
	mu       sync.Mutex
	sink     tui.Sink
	ap       tui.Approver
	scripts  []agentScript
	requests []string
	resets   int
	restored [][]engine.Message // Restore calls
	ctxErr   error              // the context error the last script saw when it ended
}

func (f *fakeAgent) Run(ctx context.Context, request string) (agent.Result, error) {
	f.mu.Lock()
	f.requests = append(f.requests, request)
	var sc agentScript
	if len(f.scripts) > 0 {
		sc, f.scripts = f.scripts[0], f.scripts[1:]
	}
	f.mu.Unlock()
	if sc == nil {
		return agent.Result{}, errors.New("fakeAgent: no script")
	}
	res, err := sc(ctx, f.sink, f.ap)
	f.mu.Lock()
	f.ctxErr = ctx.Err()
	f.mu.Unlock()
	return res, err
}

func (f *fakeAgent) Reset() {
	f.mu.Lock()
	f.resets++
	f.mu.Unlock()
}

func (f *fakeAgent) Restore(msgs []engine.Message) {
	f.mu.Lock()
	f.restored = append(f.restored, append([]engine.Message(nil), msgs...))
	f.mu.Unlock()
}

func (f *fakeAgent) push(s agentScript) { f.scripts = append(f.scripts, s) }

// agentDriver is a driver in agent mode: the agent's messages arrive on
// ch (unbuffered, so they keep their order with the Run's end) and pump
// feeds them to the model.
type agentDriver struct {
	*driver
	ch chan tea.Msg
	ag *fakeAgent
}

func newAgentDriver(t *testing.T, mut func(*Config)) *agentDriver {
	t.Helper()
	fa := &fakeAgent{}
	ad := &agentDriver{ch: make(chan tea.Msg), ag: fa}
	ad.driver = newDriver(t, func(c *Config) {
		c.AgentInfo = "[agent] SmolLM2 in /tmp/work · 7 tools · writes and commands ask first"
		c.Agent = func(send func(tea.Msg)) (AgentRunner, error) {
			fa.sink, fa.ap = tui.Sink{Send: send}, tui.Approver{Send: send}
			return fa, nil
		}
		if mut != nil {
			mut(c)
		}
	})
	if err := ad.m.startAgent(func(msg tea.Msg) { ad.ch <- msg }); err != nil {
		t.Fatal(err)
	}
	return ad
}

// pump delivers the agent's messages and the finished commands until
// cond holds.
func (d *agentDriver) pump(cond func() bool) {
	d.t.Helper()
	deadline := time.After(5 * time.Second)
	for !cond() {
		var pend chan tea.Msg
		if len(d.pending) > 0 {
			pend = d.pending[0]
		}
		select {
		case msg := <-d.ch:
			d.send(msg)
		case msg := <-pend:
			d.pending = d.pending[1:]
			d.handle(msg)
		case <-deadline:
			d.t.Fatal("pump: the condition did not hold within 5s")
		}
	}
}

func (d *agentDriver) idle() bool       { return d.m.gen == nil }
func (d *agentDriver) dialogOpen() bool { return d.m.ag.dialog != nil }

func writePlan() *agent.Plan {
	return &agent.Plan{Tool: "write_file", NeedsApproval: true, Summary: "write NOTES.md (new file, 2 lines)",
		Preview: "--- /dev/null\n+++ NOTES.md\n@@ -0,0 +1,2 @@\n+hello\n+world\n"}
}

func TestAgentRunStreams(t *testing.T) {
	d := newAgentDriver(t, nil)
	gate := make(chan struct{})
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Thinking("the user greets me")
		s.Text("Hello, ")
		<-gate
		s.Text("**world**!")
		return agent.Result{Answer: "Hello, **world**!", Steps: 1, Stop: agent.StopAnswer}, nil
	})
	d.submit("hi there")
	d.pump(func() bool { return d.m.gen != nil && d.m.gen.text.String() == "Hello, " })
	d.send(tickMsg{}) // a frame flushes the stream
	if f := d.frame(); !strings.Contains(f, "Hello,") || !strings.Contains(f, "answering") {
		t.Errorf("streaming frame lacks the partial answer:\n%s", f)
	}
	close(gate)
	d.pump(d.idle)
	if got := d.ag.requests; len(got) != 1 || got[0] != "hi there" {
		t.Fatalf("agent requests = %q", got)
	}
	if len(d.sess.reqs) != 0 {
		t.Errorf("agent mode called Session.Generate %d times", len(d.sess.reqs))
	}
	f := d.frame()
	for _, want := range []string{"[agent] SmolLM2 in /tmp/work", "hi there", "Hello, world!", "thinking (4 words)"} {
		if !strings.Contains(f, want) {
			t.Errorf("frame lacks %q:\n%s", want, f)
		}
	}
	if m := d.m.msgs; len(m) != 2 || m[1].Role != "assistant" || m[1].Content != "Hello, **world**!" {
		t.Errorf("conversation = %+v", m)
	}
	// The request and the answer are saved, marked as an agent session.
	names, _ := d.m.store.List()
	if len(names) != 1 {
		t.Fatalf("agent mode saved sessions %v, want one", names)
	}
	sf, err := d.m.store.Load(names[0])
	if err != nil {
		t.Fatal(err)
	}
	if sf.Mode != "agent" || len(sf.Messages) != 2 || sf.Messages[0].Content != "hi there" || sf.Messages[1].Content != "Hello, **world**!" {
		t.Errorf("saved session = %+v", sf)
	}
}

func TestAgentToolBlocks(t *testing.T) {
	d := newAgentDriver(t, nil)
	read := engine.ToolCall{ID: "1", Name: "read_file", Arguments: map[string]any{"path": "main.go"}}
	grep := engine.ToolCall{ID: "2", Name: "grep", Arguments: map[string]any{"pattern": "("}}
	var long []string
	for i := 1; i <= 10; i++ {
		long = append(long, fmt.Sprintf("%d\tline %d of main.go", i, i))
	}
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Text("Let me look at the file.")
		s.ToolCall(read, "read main.go")
		s.ToolResult(read, strings.Join(long, "\n")+"\n", nil)
		s.ToolCall(grep, "")
		s.ToolResult(grep, "", errors.New("bad pattern: missing )"))
		s.Note("context: dropped the 1 oldest request(s)")
		s.Text("It prints hi.")
		return agent.Result{Answer: "It prints hi.", Steps: 3, Stop: agent.StopAnswer}, nil
	})
	d.submit("what does main.go do?")
	d.pump(d.idle)
	f := d.frame()
	order := []string{
		"Let me look at the file.",
		"→ read_file: read main.go",
		"│ 1    line 1 of main.go",
		"│ 4    line 4 of main.go",
		fmt.Sprintf("│ … 10 lines, %d B in all", len(strings.Join(long, "\n"))+1),
		`→ grep {"pattern":"("}`,
		"│ ✗ bad pattern: missing )",
		"[agent] context: dropped the 1 oldest request(s)",
		"It prints hi.",
	}
	pos := 0
	for _, want := range order {
		i := strings.Index(f[pos:], want)
		if i < 0 {
			t.Fatalf("frame lacks %q after position %d:\n%s", want, pos, f)
		}
		pos += i + len(want)
	}
	if strings.Contains(f, "line 5 of main.go") {
		t.Errorf("tool result not clipped:\n%s", f)
	}
	// Each text block is its own entry; no empty assistant block is left.
	for _, e := range d.m.entries {
		if e.kind == entryAssistant && strings.TrimSpace(e.text) == "" {
			t.Errorf("empty assistant entry left in the chat")
		}
	}
}

func TestAgentApproval(t *testing.T) {
	esc := tea.KeyPressMsg{Code: tea.KeyEscape}
	enter := tea.KeyPressMsg{Code: tea.KeyEnter}
	right := tea.KeyPressMsg{Code: tea.KeyRight}
	left := tea.KeyPressMsg{Code: tea.KeyLeft}
	r := func(c rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: c, Text: string(c)} }
	tests := []struct {
		name      string
		keys      []tea.KeyPressMsg
		want      agent.Decision
		cancelled bool
	}{
		{"o allows once", []tea.KeyPressMsg{r('o')}, agent.AllowOnce, false},
		{"s allows for the session", []tea.KeyPressMsg{r('s')}, agent.AllowSession, false},
		{"d denies", []tea.KeyPressMsg{r('d')}, agent.Deny, false},
		{"enter takes the highlighted once", []tea.KeyPressMsg{enter}, agent.AllowOnce, false},
		{"right enter: session", []tea.KeyPressMsg{right, enter}, agent.AllowSession, false},
		{"left enter wraps to deny", []tea.KeyPressMsg{left, enter}, agent.Deny, false},
		{"scrolling does not answer", []tea.KeyPressMsg{keyDown, keyUp, r('s')}, agent.AllowSession, false},
		{"esc denies", []tea.KeyPressMsg{esc}, agent.Deny, false},
		{"ctrl+c denies and stops the run", []tea.KeyPressMsg{keyCtrlC}, agent.Deny, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newAgentDriver(t, nil)
			got := agent.Decision(-1)
			call := engine.ToolCall{ID: "1", Name: "write_file", Arguments: map[string]any{"path": "NOTES.md"}}
			d.ag.push(func(ctx context.Context, s tui.Sink, ap tui.Approver) (agent.Result, error) {
				s.ToolCall(call, "write NOTES.md (new file, 2 lines)")
				dec, err := ap.Approve(ctx, writePlan())
				got = dec
				if dec == agent.Deny {
					s.Note("denied: write NOTES.md (new file, 2 lines)")
				} else {
					s.ToolResult(call, "wrote NOTES.md (12 bytes)", nil)
				}
				if ctx.Err() != nil {
					return agent.Result{}, ctx.Err()
				}
				return agent.Result{Answer: "ok", Steps: 2, Stop: agent.StopAnswer}, err
			})
			d.submit("write hello to NOTES.md")
			d.pump(d.dialogOpen)
			f := d.frame()
			for _, want := range []string{"write_file needs your approval: write NOTES.md", "+hello", "+world", "[o]nce", "approve? ›[o]nce‹"} {
				if !strings.Contains(f, want) {
					t.Errorf("dialog frame lacks %q:\n%s", want, f)
				}
			}
			for _, k := range tc.keys {
				d.key(k)
			}
			if d.dialogOpen() {
				t.Fatal("the dialog is still open after the answer")
			}
			d.pump(d.idle)
			if got != tc.want {
				t.Errorf("the approver got %v, want %v", got, tc.want)
			}
			cancelled := errors.Is(d.ag.ctxErr, context.Canceled)
			if cancelled != tc.cancelled {
				t.Errorf("run cancelled = %v, want %v", cancelled, tc.cancelled)
			}
			f = d.frame()
			if !strings.Contains(f, "write NOTES.md (new file, 2 lines): "+tc.want.String()) {
				t.Errorf("frame lacks the decision %q:\n%s", tc.want, f)
			}
			if strings.Contains(f, "needs your approval") {
				t.Errorf("dialog still drawn:\n%s", f)
			}
		})
	}
}

func TestAgentEscCancels(t *testing.T) {
	d := newAgentDriver(t, nil)
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Text("working on it")
		<-ctx.Done()
		return agent.Result{Answer: "working on it", Steps: 1}, ctx.Err()
	})
	d.submit("refactor everything")
	d.pump(func() bool { return d.m.gen != nil && d.m.gen.text.Len() > 0 })
	d.typeText("next")
	d.enter() // refused while running
	if len(d.ag.requests) != 1 {
		t.Fatalf("a second run started while the first was running")
	}
	d.key(keyEsc)
	d.pump(d.idle)
	if !errors.Is(d.ag.ctxErr, context.Canceled) {
		t.Fatalf("the run's context was not cancelled: %v", d.ag.ctxErr)
	}
	f := d.frame()
	if !strings.Contains(f, "[agent] stopped") || strings.Contains(f, "agent: context canceled") {
		t.Errorf("frame after Esc:\n%s", f)
	}
	if d.m.notice != "stopped" {
		t.Errorf("notice = %q", d.m.notice)
	}
	// The next request runs normally.
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Text("done")
		return agent.Result{Answer: "done", Steps: 1, Stop: agent.StopAnswer}, nil
	})
	d.m.input.Reset()
	d.submit("again")
	d.pump(d.idle)
	if !strings.Contains(d.frame(), "done") || len(d.ag.requests) != 2 {
		t.Errorf("second run: requests %q\n%s", d.ag.requests, d.frame())
	}
}

func TestAgentErrorShown(t *testing.T) {
	d := newAgentDriver(t, nil)
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		return agent.Result{}, errors.New("the current request does not fit the KV cache")
	})
	d.submit("huge")
	d.pump(d.idle)
	if f := d.frame(); !strings.Contains(f, "agent: the current request does not fit the KV cache") {
		t.Errorf("frame:\n%s", f)
	}
	if len(d.m.msgs) != 0 {
		t.Errorf("an unanswered request stays in the conversation: %+v", d.m.msgs)
	}
}

func TestAgentCommands(t *testing.T) {
	d := newAgentDriver(t, nil)
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Text("an answer")
		return agent.Result{Answer: "an answer", Steps: 1, Stop: agent.StopAnswer}, nil
	})
	d.submit("question")
	d.pump(d.idle)
	tests := []struct {
		cmd, want string
	}{
		{"/save x", `saved as "x"`},
		{"/load x", `resumed session "x" (2 messages)`},
		{"/system be brief", "/system is not available in agent mode"},
		{"/clear", "conversation cleared"},
	}
	for _, tc := range tests {
		d.submit(tc.cmd)
		if e := d.lastEntry(); !strings.Contains(e.text, tc.want) {
			found := false
			for _, e := range d.m.entries {
				found = found || strings.Contains(e.text, tc.want)
			}
			if !found {
				t.Errorf("%s: last entry %q, want %q", tc.cmd, e.text, tc.want)
			}
		}
	}
	// /load handed the saved conversation to the agent.
	if len(d.ag.restored) != 1 || len(d.ag.restored[0]) != 2 || d.ag.restored[0][0].Content != "question" || d.ag.restored[0][1].Content != "an answer" {
		t.Errorf("agent restored %+v, want the saved question and answer", d.ag.restored)
	}
	// /clear resets the agent; the session was reset by /load and /clear.
	if d.ag.resets != 1 || d.sess.resets != 2 {
		t.Errorf("agent resets %d, session resets %d; want 1 and 2", d.ag.resets, d.sess.resets)
	}
	if len(d.m.msgs) != 0 || len(d.m.entries) != 1 {
		t.Errorf("/clear left %d messages and %d entries", len(d.m.msgs), len(d.m.entries))
	}
}

// The status pane polls the engine while the agent runs and warns when
// the pool is nearly full; the chat mode shows no such warning.
func TestAgentStatusPolling(t *testing.T) {
	d := newAgentDriver(t, nil)
	gate := make(chan struct{})
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Text("thinking hard")
		<-gate
		return agent.Result{Answer: "thinking hard", Steps: 1, Stop: agent.StopAnswer}, nil
	})
	d.submit("big task")
	d.pump(func() bool { return d.m.gen != nil && d.m.gen.text.Len() > 0 })
	tests := []struct {
		used, pages int
		want        string
		warning     bool
	}{
		{30000, 1875, "30,000 / 65,536 tok", false},
		{58982, 3686, "58,982 / 65,536 tok", false}, // 90.0%: not above the threshold
		{58000, 3700, "58,000 / 65,536 tok", true},  // tokens 88.5%, pages 90.3%: the pool fills by pages
		{62259, 3892, "62,259 / 65,536 tok", true},  // 95%
	}
	for _, tc := range tests {
		d.eng.mu.Lock()
		d.eng.stats.TokensUsed, d.eng.stats.PagesUsed = tc.used, tc.pages
		d.eng.mu.Unlock()
		d.send(tickMsg{})
		f := d.frame()
		if !strings.Contains(f, tc.want) {
			t.Errorf("used %d: status lacks %q:\n%s", tc.used, tc.want, f)
		}
		if got := strings.Contains(f, "context near the KV limit"); got != tc.warning {
			t.Errorf("used %d: warning shown = %v, want %v:\n%s", tc.used, got, tc.warning, f)
		}
	}
	if !strings.Contains(d.frame(), "context near the KV limit (95%)") {
		t.Errorf("warning lacks the percentage:\n%s", d.frame())
	}
	close(gate)
	d.pump(d.idle)

	chat := newDriver(t, nil)
	chat.eng.stats.TokensUsed, chat.eng.stats.PagesUsed = 62259, 3892
	chat.m.stats = chat.eng.Stats()
	if strings.Contains(chat.frame(), "context near the KV limit") {
		t.Error("chat mode shows the agent's drop warning")
	}
}

// TestAgentGoldenApproval is the approval dialog over the chat at 80x24.
func TestAgentGoldenApproval(t *testing.T) {
	d := newAgentDriver(t, nil)
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Text("`main.go` prints **hi** and exits.")
		return agent.Result{Answer: "main.go prints hi and exits.", Steps: 1, Stop: agent.StopAnswer}, nil
	})
	d.submit("what does main.go do?")
	d.pump(d.idle)
	call := engine.ToolCall{ID: "1", Name: "write_file", Arguments: map[string]any{"path": "NOTES.md"}}
	d.ag.push(func(ctx context.Context, s tui.Sink, ap tui.Approver) (agent.Result, error) {
		s.Text("I will write the notes.")
		s.ToolCall(call, "write NOTES.md (new file, 2 lines)")
		dec, err := ap.Approve(ctx, writePlan())
		if err != nil || dec == agent.Deny {
			return agent.Result{}, err
		}
		return agent.Result{Answer: "done", Steps: 2, Stop: agent.StopAnswer}, nil
	})
	d.submit("write hello world to NOTES.md")
	d.pump(d.dialogOpen)
	d.send(tickMsg{})
	got := d.frame()
	if n := strings.Count(got, "\n") + 1; n != 24 {
		t.Errorf("frame has %d lines, want 24", n)
	}
	checkGolden(t, "agent_approval_80x24", got)
	d.key(tea.KeyPressMsg{Code: 'd', Text: "d"})
	d.pump(d.idle)
}

// syncBuffer is the program's output, written by its goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAgentRunProgram drives agent mode through a real Bubble Tea program
// (Run with piped keys): the agent's messages arrive through the
// program's Send, a key answers the dialog, and Ctrl+D during a run
// cancels it and Run returns only after the agent's Run has.
func TestAgentRunProgram(t *testing.T) {
	fa := &fakeAgent{}
	asked := make(chan struct{})
	decided := make(chan agent.Decision, 1)
	returned := make(chan struct{})
	call := engine.ToolCall{ID: "1", Name: "write_file", Arguments: map[string]any{"path": "NOTES.md"}}
	fa.push(func(ctx context.Context, s tui.Sink, ap tui.Approver) (agent.Result, error) {
		s.Text("writing the notes")
		s.ToolCall(call, "write NOTES.md (new file, 2 lines)")
		d, err := ap.Approve(ctx, writePlan())
		decided <- d
		return agent.Result{Answer: "writing the notes", Steps: 2, Stop: agent.StopAnswer}, err
	})
	fa.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		defer close(returned)
		s.Text("long task")
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a tool's process group being killed
		return agent.Result{}, ctx.Err()
	})
	pr, pw := io.Pipe()
	out := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- Run(context.Background(), Config{
			Engine: newFakeEngine(), Session: &fakeSession{}, SessionDir: t.TempDir(), In: pr, Out: out, Width: 80, Height: 24,
			Agent: func(send func(tea.Msg)) (AgentRunner, error) {
				relay := func(m tea.Msg) {
					send(m)
					if _, ok := m.(tui.ApprovalMsg); ok {
						close(asked)
					}
				}
				fa.sink, fa.ap = tui.Sink{Send: relay}, tui.Approver{Send: relay}
				return fa, nil
			},
		})
	}()
	pw.Write([]byte("write notes\r"))
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no approval request reached the program")
	}
	pw.Write([]byte("s"))
	select {
	case d := <-decided:
		if d != agent.AllowSession {
			t.Fatalf("decision %v, want %v", d, agent.AllowSession)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dialog did not answer the approver")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ansi.Strip(out.String()), "allowed for this session") {
		if time.Now().After(deadline) {
			t.Fatalf("the decision was not shown: %q", tail(ansi.Strip(out.String()), 400))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the first run's end arrive
	pw.Write([]byte("next task\r"))
	for !strings.Contains(ansi.Strip(out.String()), "long task") {
		if time.Now().After(deadline) {
			t.Fatalf("the second run did not stream: %q", tail(ansi.Strip(out.String()), 400))
		}
		time.Sleep(10 * time.Millisecond)
	}
	pw.Write([]byte{0x04}) // ctrl+d quits during the run
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctrl+d")
	}
	select {
	case <-returned:
	default:
		t.Fatal("Run returned before the agent's cancelled Run did")
	}
	if got := fa.requests; len(got) != 2 || got[1] != "next task" {
		t.Errorf("requests %q", got)
	}
	if !strings.Contains(out.String(), "resume with: ftchat --agent --continue") {
		t.Errorf("agent mode printed no resume hint for the agent: %q", out.String())
	}
}

// --agent --continue: the latest session is shown and handed to the agent.
func TestAgentContinueRestoresTheAgent(t *testing.T) {
	dir := t.TempDir()
	st := &Store{Dir: dir}
	saved := &SessionFile{Name: "earlier", Created: time.Now().UTC(), Updated: time.Now().UTC(), Mode: "agent",
		Messages: []engine.Message{{Role: "user", Content: "list the files"}, {Role: "assistant", Content: "main.go and go.mod"}}}
	if err := st.Save(saved, 1); err != nil {
		t.Fatal(err)
	}
	d := newAgentDriver(t, func(c *Config) { c.SessionDir, c.Continue = dir, true })
	if got := d.ag.restored; len(got) != 1 || len(got[0]) != 2 || got[0][1].Content != "main.go and go.mod" {
		t.Fatalf("agent restored %+v", got)
	}
	if f := d.frame(); !strings.Contains(f, "list the files") || !strings.Contains(f, `resumed session "earlier"`) {
		t.Errorf("frame:\n%s", f)
	}
	// The next request goes on in the same session file.
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		return agent.Result{Answer: "done", Steps: 1, Stop: agent.StopAnswer}, nil
	})
	d.submit("and the tests?")
	d.pump(d.idle)
	f, err := st.Load("earlier")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Messages) != 4 || f.Messages[3].Content != "done" {
		t.Errorf("session after the next request: %+v", f.Messages)
	}
}

// The agent's prefill progress shows in the notice line like a chat's,
// and is cleared by a tool call (the next step reports its own).
func TestAgentPrefillProgress(t *testing.T) {
	d := newAgentDriver(t, nil)
	gate := make(chan struct{})
	d.ag.push(func(ctx context.Context, s tui.Sink, _ tui.Approver) (agent.Result, error) {
		s.Progress(512, 2048)
		<-gate
		s.ToolCall(engine.ToolCall{ID: "1", Name: "list"}, "list .")
		s.Text("done")
		return agent.Result{Answer: "done", Steps: 2, Stop: agent.StopAnswer}, nil
	})
	d.submit("look around")
	d.pump(func() bool { return d.m.gen != nil && d.m.gen.prefill == [2]int{512, 2048} })
	if f := d.frame(); !strings.Contains(f, "prefill 512 / 2,048 tokens") {
		t.Errorf("frame lacks the prefill progress:\n%s", f)
	}
	close(gate)
	d.pump(func() bool { return d.m.gen == nil || d.m.gen.prefill == [2]int{} })
	d.pump(d.idle)
}
