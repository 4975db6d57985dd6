package ui

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/engine"
)

// /compact [n] (issue 15 item 16): the model summarizes the oldest n
// turns, and the summary replaces them in what the model sees, so a full
// pool or context can go on without losing them entirely. The summary
// streams into the chat like an answer.

// compactJob is a summary generation in flight.
type compactJob struct {
	turns   int    // oldest turns the summary replaces
	pending string // a refused message to send after it, or ""
}

// summaryMaxTokens bounds the summary.
const summaryMaxTokens = 256

const summaryInstruction = "Summarize the conversation below in a few short sentences for the assistant to continue from. " +
	"Keep facts, names, numbers, code identifiers, decisions and open questions. Write only the summary."

// summaryPrefix heads the summary where it replaces the turns.
const summaryPrefix = "Summary of our earlier conversation (older turns were replaced by it):\n"

// transcriptOf writes messages as plain "User:/Assistant:" text.
func transcriptOf(msgs []engine.Message) string {
	var b strings.Builder
	for _, msg := range msgs {
		role := "User"
		if msg.Role == "assistant" {
			role = "Assistant"
		}
		fmt.Fprintf(&b, "%s: %s\n\n", role, strings.TrimSpace(msg.Content))
	}
	return strings.TrimSpace(b.String())
}

// compactCommand starts the summary of the oldest turns.
func (m *model) compactCommand(arg string) tea.Cmd {
	turns := len(turnStarts(m.msgs))
	if turns == 0 {
		m.addError("/compact: the conversation has no turns to summarize")
		return nil
	}
	n := max(turns/2, 1)
	pending := ""
	if d := m.drop; d != nil && d.turns > 0 {
		n, pending = d.turns, d.text
	}
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 {
			m.addError(fmt.Sprintf("/compact: %q is not a number of turns (1 to %d)", arg, turns))
			return nil
		}
		n = min(v, turns)
	}
	old := m.msgs[:len(m.msgs)-len(withoutTurns(m.msgs, n))]
	req := engine.Request{
		Messages: []engine.Message{
			{Role: "system", Content: summaryInstruction},
			{Role: "user", Content: transcriptOf(old)},
		},
		MaxTokens: summaryMaxTokens,
		Sampling:  m.cfg.Sampling,
	}
	if m.cfg.MaxTokens > 0 {
		req.MaxTokens = min(req.MaxTokens, m.cfg.MaxTokens)
	}
	if err := m.eng.FitCheck(req); err != nil {
		m.addError(fmt.Sprintf("/compact: the oldest %d %s do not fit for summarizing either (%v); /drop drops them instead", n, plural(n, "turn", "turns"), err))
		return nil
	}
	m.drop = nil
	if pending != "" && m.inputValue() == pending {
		m.input.Reset()
	}
	m.addInfo(fmt.Sprintf("summarizing the oldest %d of %d %s; the summary replaces them in what the model sees (Esc stops, changing nothing)", n, turns, plural(turns, "turn", "turns")))
	ae := &entry{kind: entryAssistant, streaming: true}
	m.addEntry(ae)
	m.scrollBottom()
	ctx, cancel := context.WithCancel(m.ctx)
	m.genSeq++
	g := &generation{id: m.genSeq, cancel: cancel, entry: ae, userMsg: len(m.msgs), compact: &compactJob{turns: n, pending: pending}}
	g.ch = m.sess.Generate(ctx, req)
	m.gen = g
	return tea.Batch(listen(g.id, g.ch), m.scheduleTick())
}

// finishCompact ends a summary generation: a complete summary replaces
// the turns; a stopped or empty one changes nothing.
func (m *model) finishCompact(g *generation) tea.Cmd {
	m.gen = nil
	g.cancel()
	m.stats = m.eng.Stats()
	summary := strings.TrimSpace(g.entry.text)
	if g.stopped || !g.finished || summary == "" {
		if g.entry.note == "" || g.entry.note == "stopped" {
			g.entry.note = "summary stopped; nothing replaced"
		}
		m.setNotice("", false)
		if g.compact.pending != "" {
			m.setInput(g.compact.pending)
		}
		return nil
	}
	rest := withoutTurns(m.msgs, g.compact.turns)
	m.msgs = append([]engine.Message{
		{Role: "user", Content: summaryPrefix + summary},
		{Role: "assistant", Content: "Understood; I will continue from this summary."},
	}, rest...)
	m.unsaved = true
	g.entry.note = fmt.Sprintf("summary of the oldest %d %s; it replaces them in what the model sees", g.compact.turns, plural(g.compact.turns, "turn", "turns"))
	if p := g.compact.pending; p != "" {
		return tea.Batch(m.autosave(), m.send(p))
	}
	return m.autosave()
}
