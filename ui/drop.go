package ui

import (
	"errors"
	"fmt"
	"strconv"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// dropOffer is a message refused because the conversation does not fit
// the KV pool or the model's context, and how many of the oldest turns
// would have to go for it to fit (issue 15 item 16). Enter on the same
// text, or /drop, drops them and sends it.
type dropOffer struct {
	text  string
	turns int // oldest turns to drop; 0: dropping every turn is not enough
}

// turnStarts lists the index in msgs of each turn: a user message and
// the answers that follow it.
func turnStarts(msgs []engine.Message) []int {
	var out []int
	for i, msg := range msgs {
		if msg.Role == "user" || i == 0 {
			out = append(out, i)
		}
	}
	return out
}

// withoutTurns is msgs without its oldest n turns.
func withoutTurns(msgs []engine.Message, n int) []engine.Message {
	starts := turnStarts(msgs)
	if n >= len(starts) {
		return nil
	}
	return msgs[starts[n]:]
}

// turnsToDrop finds the fewest oldest turns whose removal lets content
// (the new user message) fit, keeping the system prompt. It returns 0
// when even the message alone does not fit.
func (m *model) turnsToDrop(content string) int {
	turns := len(turnStarts(m.msgs))
	fits := func(n int) bool {
		req := m.request()
		req.Messages = req.Messages[:0:0]
		if m.system != "" {
			req.Messages = append(req.Messages, engine.Message{Role: "system", Content: m.system})
		}
		req.Messages = append(req.Messages, withoutTurns(m.msgs, n)...)
		req.Messages = append(req.Messages, engine.Message{Role: "user", Content: content})
		return m.eng.FitCheck(req) == nil
	}
	// Fitting only gets easier with more dropped: binary search.
	lo, hi := 1, turns
	if turns == 0 || !fits(hi) {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// refuseFull reports a message that does not fit and offers to drop the
// oldest turns. It returns false when err is not a full pool or context.
func (m *model) refuseFull(text, content string, err error) bool {
	var full *kvcache.PoolFullError
	if !errors.As(err, &full) {
		return false
	}
	n := m.turnsToDrop(content)
	m.drop = &dropOffer{text: text, turns: n}
	turns := len(turnStarts(m.msgs))
	msg := "not sent: " + err.Error()
	switch {
	case n > 0:
		m.addError(msg)
		m.addInfo(fmt.Sprintf("press Enter again to drop the oldest %d of %d %s (about %s tokens; the system prompt stays) and send your message; /compact summarizes them instead, /drop N chooses how many",
			n, turns, plural(turns, "turn", "turns"), formatInt(int64(m.turnTokens(n)))))
		m.setNotice(fmt.Sprintf("Enter: drop the oldest %d %s and send", n, plural(n, "turn", "turns")), false)
	default:
		m.drop = nil
		m.addError(msg + " Dropping older turns is not enough: the message alone does not fit.")
	}
	return true
}

// turnTokens counts the text of the oldest n turns.
func (m *model) turnTokens(n int) int {
	kept := len(withoutTurns(m.msgs, n))
	t := 0
	for _, msg := range m.msgs[:len(m.msgs)-kept] {
		t += m.eng.CountTokens(msg.Content)
	}
	return t
}

// dropTurns drops the oldest n turns from what the model sees; the chat
// view keeps them, marked by an info line.
func (m *model) dropTurns(n int) {
	turns := len(turnStarts(m.msgs))
	n = min(n, turns)
	tokens := m.turnTokens(n)
	m.msgs = append([]engine.Message(nil), withoutTurns(m.msgs, n)...)
	m.unsaved = true
	m.addInfo(fmt.Sprintf("dropped the oldest %d of %d %s (about %s tokens) from what the model sees; the system prompt stays, %d %s left; they stay on screen and are gone from the saved session",
		n, turns, plural(turns, "turn", "turns"), formatInt(int64(tokens)), turns-n, plural(turns-n, "turn", "turns")))
}

// dropCommand is /drop [N]: drop the oldest N turns (default: what the
// last refused message needs, else 1), then send the refused message.
func (m *model) dropCommand(arg string) tea.Cmd {
	turns := len(turnStarts(m.msgs))
	if turns == 0 {
		m.addError("/drop: the conversation has no turns to drop")
		return nil
	}
	n := 1
	if m.drop != nil && m.drop.turns > 0 {
		n = m.drop.turns
	}
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 {
			m.addError(fmt.Sprintf("/drop: %q is not a number of turns (1 to %d)", arg, turns))
			return nil
		}
		n = v
	}
	m.dropTurns(n)
	if d := m.drop; d != nil {
		m.drop = nil
		if m.inputValue() == d.text {
			m.input.Reset()
		}
		return m.send(d.text)
	}
	return nil
}

// acceptDrop handles Enter on the text of a drop offer: drop, then send.
func (m *model) acceptDrop(v string) (tea.Cmd, bool) {
	d := m.drop
	if d == nil || d.turns == 0 || v != d.text {
		return nil, false
	}
	m.drop = nil
	m.input.Reset()
	m.dropTurns(d.turns)
	return m.send(v), true
}
