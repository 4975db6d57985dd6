// Package tui connects the agent to a Bubble Tea program: a Sink and an
// Approver that send messages to the program, and Dialog, the approval
// dialog (summary, scrollable colored diff, once/session/deny).
//
// The agent runs in its own goroutine; Sink calls Send for each event and
// Approver.Approve blocks that goroutine until the UI answers the
// ApprovalMsg (or the context ends, which denies).
package tui

import (
	"context"
	"fmt"
	"strings"
	"sync"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/engine"
)

// Messages the program receives while the agent works.
type (
	TextMsg     struct{ Text string }
	ThinkingMsg struct{ Text string }
	ToolCallMsg struct {
		Call    engine.ToolCall
		Summary string
	}
	ToolResultMsg struct {
		Call   engine.ToolCall
		Output string
		Err    error
	}
	NoteMsg     struct{ Text string }
	ProgressMsg struct{ Done, Total int } // prefill of a generation step
)

// ApprovalMsg asks the user about Plan. Answer it exactly once (later
// answers are ignored); Dialog does that.
type ApprovalMsg struct {
	Plan  *agent.Plan
	reply chan agent.Decision
	once  *sync.Once
}

// Answer delivers the user's decision to the waiting agent.
func (m ApprovalMsg) Answer(d agent.Decision) {
	m.once.Do(func() { m.reply <- d })
}

// Sink sends the agent's events to the program (tea.Program.Send).
type Sink struct{ Send func(tea.Msg) }

func (s Sink) Text(d string)     { s.Send(TextMsg{d}) }
func (s Sink) Thinking(d string) { s.Send(ThinkingMsg{d}) }
func (s Sink) ToolCall(c engine.ToolCall, summary string) {
	s.Send(ToolCallMsg{Call: c, Summary: summary})
}
func (s Sink) ToolResult(c engine.ToolCall, out string, err error) {
	s.Send(ToolResultMsg{Call: c, Output: out, Err: err})
}
func (s Sink) Note(msg string) { s.Send(NoteMsg{msg}) }

// Progress reports prefill progress (agent.ProgressSink).
func (s Sink) Progress(done, total int) { s.Send(ProgressMsg{done, total}) }

// Approver asks through the program and waits for the answer.
type Approver struct{ Send func(tea.Msg) }

func (a Approver) Approve(ctx context.Context, p *agent.Plan) (agent.Decision, error) {
	m := ApprovalMsg{Plan: p, reply: make(chan agent.Decision, 1), once: &sync.Once{}}
	a.Send(m)
	select {
	case d := <-m.reply:
		return d, nil
	case <-ctx.Done():
		return agent.Deny, ctx.Err()
	}
}

// DecidedMsg is returned (as a command's message) when Dialog was answered.
type DecidedMsg struct {
	Plan     *agent.Plan
	Decision agent.Decision
}

// Dialog shows one approval request. Keys: o or y (once), s (session),
// d, n or esc (deny), up/down/pgup/pgdown (scroll the preview).
type Dialog struct {
	req           ApprovalMsg
	width, height int
	offset        int
	lines         []string
	done          bool
}

// NewDialog sizes the dialog for a width x height area.
func NewDialog(req ApprovalMsg, width, height int) Dialog {
	return Dialog{req: req, width: max(20, width), height: max(8, height), lines: splitPreview(req.Plan.Preview)}
}

func splitPreview(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Done reports whether the dialog was answered.
func (d Dialog) Done() bool { return d.done }

// SetSize resizes the dialog.
func (d Dialog) SetSize(width, height int) Dialog {
	d.width, d.height = max(20, width), max(8, height)
	d.offset = min(d.offset, d.maxOffset())
	return d
}

// bodyRows is how many preview lines fit between the title and the keys.
func (d Dialog) bodyRows() int { return d.height - 4 }

func (d Dialog) maxOffset() int { return max(0, len(d.lines)-d.bodyRows()) }

// Update handles keys; an answer returns a command yielding DecidedMsg.
func (d Dialog) Update(msg tea.Msg) (Dialog, tea.Cmd) {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok || d.done {
		return d, nil
	}
	decide := func(dec agent.Decision) (Dialog, tea.Cmd) {
		d.done = true
		d.req.Answer(dec)
		p := d.req.Plan
		return d, func() tea.Msg { return DecidedMsg{Plan: p, Decision: dec} }
	}
	switch k.Keystroke() {
	case "o", "y", "enter":
		return decide(agent.AllowOnce)
	case "s":
		return decide(agent.AllowSession)
	case "d", "n", "esc", "ctrl+c":
		return decide(agent.Deny)
	case "down", "j":
		d.offset = min(d.offset+1, d.maxOffset())
	case "up", "k":
		d.offset = max(d.offset-1, 0)
	case "pgdown", "space":
		d.offset = min(d.offset+d.bodyRows(), d.maxOffset())
	case "pgup":
		d.offset = max(d.offset-d.bodyRows(), 0)
	}
	return d, nil
}

var (
	titleStyle = lipgloss.NewStyle().Bold(true)
	addStyle   = lipgloss.NewStyle().Foreground(lipgloss.Color("2"))
	delStyle   = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	hunkStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	dimStyle   = lipgloss.NewStyle().Foreground(lipgloss.Color("8"))
	boxStyle   = lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1)
)

// View renders the dialog in its width and height, border included.
func (d Dialog) View() string {
	inner := d.width - 4 // border and padding
	p := d.req.Plan
	var b strings.Builder
	b.WriteString(titleStyle.Render(clip(fmt.Sprintf("%s needs your approval: %s", p.Tool, p.Summary), inner)))
	b.WriteString("\n")
	rows := d.bodyRows()
	end := min(len(d.lines), d.offset+rows)
	shown := 0
	for _, l := range d.lines[d.offset:end] {
		b.WriteString(styleLine(clip(strings.ReplaceAll(l, "\t", "    "), inner)))
		b.WriteString("\n")
		shown++
	}
	for ; shown < rows; shown++ {
		b.WriteString("\n")
	}
	scroll := ""
	if len(d.lines) > rows {
		scroll = fmt.Sprintf("  ↑↓ %d-%d/%d", d.offset+1, end, len(d.lines))
	}
	keys := fmt.Sprintf("[o]nce  [s]ession (all %s calls)  [d]eny", p.Tool) + scroll
	if len([]rune(keys)) > inner {
		keys = "[o]nce [s]ession [d]eny" + scroll
	}
	b.WriteString(dimStyle.Render(clip(keys, inner)))
	return boxStyle.Width(d.width).Render(b.String())
}

func styleLine(l string) string {
	switch {
	case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		return titleStyle.Render(l)
	case strings.HasPrefix(l, "+"):
		return addStyle.Render(l)
	case strings.HasPrefix(l, "-"):
		return delStyle.Render(l)
	case strings.HasPrefix(l, "@@"):
		return hunkStyle.Render(l)
	}
	return l
}

// clip cuts s to n cells (runes; previews are mostly ASCII).
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 1 {
		return string(r[:n])
	}
	return string(r[:n-1]) + "…"
}
