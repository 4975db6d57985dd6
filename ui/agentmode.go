package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/agent/tui"
	"github.com/ftchat/ftchat/engine"
)

// AgentRunner is the coding agent behind the TUI's agent mode
// (*agent.Agent): one Run per user request, Reset for /clear.
type AgentRunner interface {
	Run(ctx context.Context, request string) (agent.Result, error)
	Reset()
}

// NewAgentFunc builds the agent once the program exists. send delivers a
// message to the program from any goroutine; the agent's Sink and Approver
// must use it (tui.Sink{Send: send}, tui.Approver{Send: send}) so that its
// text, tool calls, notes and approval requests reach the chat view.
type NewAgentFunc func(send func(tea.Msg)) (AgentRunner, error)

// contextWarnFrac is the KV pool usage above which agent mode warns that
// the oldest turns are about to be dropped.
const contextWarnFrac = 0.9

// resultLines is how many lines of a tool result the chat shows.
const resultLines = 4

// agentDoneMsg ends one Run.
type agentDoneMsg struct {
	id  int
	res agent.Result
	err error
}

// agentMode is the state of the agent front end: the runner, the approval
// dialog while one is open, and the blocks of the run in progress.
type agentMode struct {
	runner AgentRunner
	dialog *tui.Dialog
	choice int // the highlighted answer of the dialog: 0 once, 1 session, 2 deny
	rows   int // preview lines of the open dialog
	tool   *entry
	// running is closed when the Run in flight returns.
	running chan struct{}
	// shown says whether the run's current assistant entry is in the chat
	// yet: after a tool call it is added only once text arrives.
	shown bool
}

var approvalChoices = []struct{ key, label string }{{"o", "once"}, {"s", "session"}, {"d", "deny"}}

// startAgent builds the agent with send (Run passes tea.Program.Send) and
// switches the model to agent mode. Sessions save the requests and the
// agent's answers (not its tool calls); a resumed one is handed to the
// agent.
func (m *model) startAgent(send func(tea.Msg)) error {
	r, err := m.cfg.Agent(send)
	if err != nil {
		return err
	}
	if r == nil {
		return errors.New("ui: Config.Agent returned no agent")
	}
	m.ag = &agentMode{runner: r}
	m.input.Placeholder = "Give the agent a task · / for commands · Enter sends, Ctrl+J newline"
	m.inputCache.ok = false
	if m.cfg.AgentInfo != "" {
		m.addInfo(m.cfg.AgentInfo)
	}
	if len(m.msgs) > 0 { // --continue resumed a session before the agent existed
		m.restoreAgent()
	}
	return nil
}

// agentRestorer is an AgentRunner that can take over a saved conversation
// (*agent.Agent does).
type agentRestorer interface {
	Restore(msgs []engine.Message)
}

// restoreAgent hands the conversation shown to the agent.
func (m *model) restoreAgent() {
	if r, ok := m.ag.runner.(agentRestorer); ok {
		r.Restore(m.msgs)
		return
	}
	m.addInfo("this agent cannot take over a saved conversation: it starts without it")
}

// agentDisabled are the chat commands that do not apply to the agent's
// conversation.
var agentDisabled = map[string]string{
	"/system":  "the agent's system prompt is fixed; restart with --system to change it",
	"/drop":    "the agent drops its oldest turns and tool results itself when its context fills",
	"/compact": "the agent drops its oldest turns and tool results itself when its context fills",
}

// sendAgent starts a Run for one user request.
func (m *model) sendAgent(text string) tea.Cmd {
	if m.reconf != nil {
		m.setNotice("the KV cache is being reconfigured; wait for it to finish", true)
		return nil
	}
	content, attached := text, ""
	if m.piped != "" {
		content = attachContext(text, m.piped, m.cfg.PipedFrom)
		attached = fmt.Sprintf("+ %s context: %s tokens", m.cfg.pipedFrom(), formatInt(int64(m.pipedTokens)))
		m.piped = ""
	}
	m.msgs = append(m.msgs, engine.Message{Role: "user", Content: content})
	m.addEntry(&entry{kind: entryUser, text: text, attached: attached})
	ae := &entry{kind: entryAssistant, streaming: true}
	m.addEntry(ae)
	m.ag.shown, m.ag.tool = true, nil
	m.scrollBottom()
	m.setNotice("", false)

	ctx, cancel := context.WithCancel(m.ctx)
	m.genSeq++
	g := &generation{id: m.genSeq, cancel: cancel, entry: ae, userMsg: len(m.msgs) - 1}
	m.gen = g
	r, id := m.ag.runner, g.id
	running := make(chan struct{})
	m.ag.running = running
	run := func() tea.Msg {
		defer close(running)
		res, err := r.Run(ctx, content)
		return agentDoneMsg{id: id, res: res, err: err}
	}
	return tea.Batch(run, m.scheduleTick())
}

// waitAgent waits up to d for a cancelled Run to return, so that the
// caller can close the engine session after Run without racing it.
func (m *model) waitAgent(d time.Duration) {
	if m.ag == nil || m.ag.running == nil {
		return
	}
	select {
	case <-m.ag.running:
	case <-time.After(d):
	}
}

// agentUpdate handles the agent's messages, and keys while the approval
// dialog is open. handled false passes msg on to the chat's Update.
func (m *model) agentUpdate(msg tea.Msg) (cmd tea.Cmd, handled bool) {
	a, g := m.ag, m.gen
	switch msg := msg.(type) {
	case tea.KeyPressMsg:
		if a.dialog == nil {
			return nil, false
		}
		return m.dialogKey(msg), true
	case tea.WindowSizeMsg:
		return nil, false // the dialog is sized at each frame
	case tickMsg:
		// Agent events carry no stats: poll the engine at the frame rate.
		if g != nil {
			m.stats = m.eng.Stats()
		}
		return nil, false
	case tui.TextMsg:
		if g != nil {
			m.showAssistant()
			g.text.WriteString(msg.Text)
			g.dirty = true
		}
	case tui.ThinkingMsg:
		if g != nil {
			m.showAssistant()
			g.think.WriteString(msg.Text)
			g.dirty = true
		}
	case tui.ProgressMsg:
		if g != nil {
			g.prefill = [2]int{msg.Done, msg.Total}
		}
	case tui.ToolCallMsg:
		if g != nil {
			g.prefill = [2]int{} // the next step reports its own
			m.closeAssistant()
			a.tool = &entry{kind: entryTool, text: callLine(msg)}
			m.addEntry(a.tool)
		}
	case tui.ToolResultMsg:
		if g != nil {
			t := a.tool
			if t == nil { // a call that failed before it was planned
				t = &entry{kind: entryTool, text: "→ " + msg.Call.Name}
				m.closeAssistant()
				m.addEntry(t)
			}
			t.note, t.failed, t.valid = resultText(msg), msg.Err != nil, false
			a.tool = nil
		}
	case tui.NoteMsg:
		if g != nil {
			m.closeAssistant()
		}
		m.addEntry(&entry{kind: entryNote, text: "[agent] " + msg.Text})
	case tui.ApprovalMsg:
		if g == nil || g.stopped {
			msg.Answer(agent.Deny) // a request that outlived its run
			return nil, true
		}
		d := tui.NewDialog(msg, m.width, 8)
		a.dialog, a.choice = &d, 0
		a.rows = strings.Count(strings.TrimRight(msg.Plan.Preview, "\n"), "\n") + 1
		m.scrollBottom()
	case tui.DecidedMsg:
		m.addEntry(&entry{kind: entryNote, text: fmt.Sprintf("[agent] %s: %s", msg.Plan.Summary, msg.Decision)})
	case agentDoneMsg:
		if g == nil || msg.id != g.id {
			return nil, true
		}
		return m.finishAgent(msg), true
	default:
		return nil, false
	}
	return nil, true
}

// dialogKey answers or scrolls the approval dialog. o/s/d answer at once;
// left/right/tab move the highlighted answer and Enter takes it; Ctrl+C
// denies and stops the run.
func (m *model) dialogKey(k tea.KeyPressMsg) tea.Cmd {
	a := m.ag
	var cmd tea.Cmd
	switch k.Keystroke() {
	case "left", "shift+tab":
		a.choice = (a.choice + len(approvalChoices) - 1) % len(approvalChoices)
		return nil
	case "right", "tab":
		a.choice = (a.choice + 1) % len(approvalChoices)
		return nil
	case "enter":
		c := approvalChoices[a.choice].key
		*a.dialog, cmd = a.dialog.Update(tea.KeyPressMsg{Code: rune(c[0]), Text: c})
	case "ctrl+c":
		*a.dialog, cmd = a.dialog.Update(tea.KeyPressMsg{Code: 'd', Text: "d"})
		m.cancelGen()
	default:
		*a.dialog, cmd = a.dialog.Update(k)
	}
	if a.dialog.Done() {
		a.dialog = nil
	}
	return cmd
}

// showAssistant puts the run's current assistant entry into the chat when
// text arrives after a tool call or a note.
func (m *model) showAssistant() {
	if !m.ag.shown {
		m.ag.shown = true
		m.addEntry(m.gen.entry)
	}
}

// closeAssistant ends the current assistant block (a tool call or a note
// follows it) and starts a new one that is shown once text arrives.
func (m *model) closeAssistant() {
	g := m.gen
	m.flushStream()
	g.entry.streaming, g.entry.valid = false, false
	if m.ag.shown && strings.TrimSpace(g.entry.text) == "" && strings.TrimSpace(g.entry.think) == "" {
		m.removeEntry(g.entry)
	}
	g.entry = &entry{kind: entryAssistant, streaming: true}
	g.text.Reset()
	g.think.Reset()
	m.ag.shown = false
}

func (m *model) removeEntry(e *entry) {
	for i := len(m.entries) - 1; i >= 0; i-- {
		if m.entries[i] == e {
			m.entries = append(m.entries[:i], m.entries[i+1:]...)
			if m.anchorE >= len(m.entries) {
				m.anchorE, m.anchorL = max(len(m.entries)-1, 0), 0
			}
			return
		}
	}
}

func (m *model) finishAgent(msg agentDoneMsg) tea.Cmd {
	g, a := m.gen, m.ag
	m.flushStream()
	g.entry.streaming, g.entry.valid = false, false
	cancelled := g.stopped || errors.Is(msg.err, context.Canceled)
	if a.shown && strings.TrimSpace(g.entry.text) == "" && strings.TrimSpace(g.entry.think) == "" {
		m.removeEntry(g.entry)
	}
	if a.dialog != nil { // the run ended (cancelled) while asking
		*a.dialog, _ = a.dialog.Update(tea.KeyPressMsg{Code: 'd', Text: "d"})
		a.dialog = nil
	}
	switch {
	case cancelled:
		m.addEntry(&entry{kind: entryNote, text: "[agent] stopped"})
		m.setNotice("stopped", false)
	case msg.err != nil:
		m.addError("agent: " + msg.err.Error())
	}
	if answer := msg.res.Answer; strings.TrimSpace(answer) != "" {
		m.msgs = append(m.msgs, engine.Message{Role: "assistant", Content: answer})
	} else {
		m.msgs = m.msgs[:g.userMsg]
	}
	m.gen = nil
	a.tool = nil
	g.cancel()
	m.stats = m.eng.Stats()
	return m.autosave()
}

// callLine is the one-line head of a tool block: the plan's summary, or
// the arguments when there is none.
func callLine(msg tui.ToolCallMsg) string {
	if msg.Summary != "" {
		return "→ " + msg.Call.Name + ": " + msg.Summary
	}
	args, _ := json.Marshal(msg.Call.Arguments)
	return "→ " + msg.Call.Name + " " + clipRunes(string(args), 200)
}

// resultText clips a tool result to its first lines.
func resultText(msg tui.ToolResultMsg) string {
	if msg.Err != nil {
		return "✗ " + msg.Err.Error()
	}
	out := strings.TrimRight(msg.Output, "\n")
	if out == "" {
		return "(no output)"
	}
	lines := strings.Split(out, "\n")
	if len(lines) <= resultLines {
		return out
	}
	return strings.Join(lines[:resultLines], "\n") +
		fmt.Sprintf("\n… %s lines, %s in all", formatInt(int64(len(lines))), formatBytes(int64(len(msg.Output))))
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// toolLines renders a tool block: the call, then its clipped result.
func (r *renderer) toolLines(e *entry) []string {
	out := r.plain(e.text, "  ", r.st.info)
	if e.note != "" {
		st := r.st.dim
		if e.failed {
			st = r.st.err
		}
		for _, l := range strings.Split(e.note, "\n") {
			out = append(out, "    "+r.st.dim.Render("│ ")+st.Render(ansi.Truncate(strings.ReplaceAll(l, "\t", "    "), max(r.width-7, 4), "…")))
		}
	}
	return out
}

// chatView returns the chat area's lines; with the approval dialog open,
// the dialog takes the bottom of the area and the chat's latest lines
// (what led to the request) stay visible above it.
func (m *model) chatView(chatH int) []string {
	if m.ag == nil || m.ag.dialog == nil || chatH <= 0 {
		return m.chatLines(chatH)
	}
	// As tall as the preview (plus title, keys and border), up to two
	// thirds of the chat; a longer preview scrolls.
	h := min(chatH, max(8, min(m.ag.rows+4, chatH*2/3)))
	*m.ag.dialog = m.ag.dialog.SetSize(m.width-1, h)
	box := strings.Split(m.ag.dialog.View(), "\n")
	if len(box) > chatH {
		box = box[:chatH]
	}
	lines := m.chatLines(chatH - len(box))
	for len(lines) < chatH-len(box) {
		lines = append(lines, "")
	}
	return append(lines, box...)
}

// dialogNotice is the notice line while the dialog is open: the answers,
// with the highlighted one marked.
func (m *model) dialogNotice() string {
	parts := make([]string, len(approvalChoices))
	for i, c := range approvalChoices {
		parts[i] = "[" + c.key + "]" + c.label[1:]
		if i == m.ag.choice {
			parts[i] = "›" + parts[i] + "‹"
		}
	}
	return "approve? " + strings.Join(parts, " ") + " · ←→ Enter · ↑↓ scroll"
}

// contextWarning is the status pane's first line when the pool is nearly
// full in agent mode; "" otherwise. The pool fills by pages, so the fuller
// of tokens/capacity and pages/total counts (the bar shows pages).
func contextWarning(s engine.Stats) string {
	if s.Remote != "" {
		return "" // a server's pool is shared by its clients, and nothing is dropped here to fit it
	}
	frac := 0.0
	if s.TokensCapacity > 0 {
		frac = float64(s.TokensUsed) / float64(s.TokensCapacity)
	}
	if s.PagesTotal > 0 {
		frac = max(frac, float64(s.PagesUsed)/float64(s.PagesTotal))
	}
	if frac <= contextWarnFrac {
		return ""
	}
	return fmt.Sprintf("⚠ context near the KV limit (%.0f%%): the oldest requests get dropped to fit · /clear starts over", frac*100)
}
