package ui

import (
	"fmt"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
)

// codeBlock is a fenced code block of an answer.
type codeBlock struct {
	lang, code string
}

// codeBlocks returns the fenced code blocks of markdown text, in order.
// A fence is ``` or ~~~ (or longer) at the start of a line, up to three
// spaces in; it closes on a line of the same character, at least as long.
// An unclosed block runs to the end.
func codeBlocks(md string) []codeBlock {
	var out []codeBlock
	var cur *codeBlock
	var body []string
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimLeft(line, " ")
		indent := len(line) - len(t)
		if cur == nil {
			if indent > 3 {
				continue
			}
			if f := fenceOf(t); f != "" {
				fence = f
				cur = &codeBlock{}
				if info := strings.Fields(t[len(f):]); len(info) > 0 {
					cur.lang = info[0]
				}
				body = nil
			}
			continue
		}
		if f := fenceOf(strings.TrimSpace(line)); f != "" && f[0] == fence[0] && len(f) >= len(fence) && strings.TrimSpace(line) == f {
			cur.code = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
			continue
		}
		body = append(body, line)
	}
	if cur != nil {
		cur.code = strings.Join(body, "\n")
		out = append(out, *cur)
	}
	return out
}

// fenceOf returns the fence that t starts with, or "".
func fenceOf(t string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(t) && t[n] == c {
			n++
		}
		if n >= 3 {
			if c == '`' && strings.Contains(t[n:], "`") {
				return "" // ``` followed by a backtick is inline code
			}
			return t[:n]
		}
	}
	return ""
}

// describeBlocks lists code blocks as "1 go (5 lines), 2 sh (1 line)".
func describeBlocks(bs []codeBlock) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		lang := b.lang
		if lang == "" {
			lang = "text"
		}
		n := strings.Count(b.code, "\n") + 1
		parts[i] = fmt.Sprintf("%d %s (%d %s)", i+1, lang, n, plural(n, "line", "lines"))
	}
	return strings.Join(parts, ", ")
}

// copyCommand is /copy [-K] [N|code]: the last answer (or the K-th from
// the end), its code block N, or its last code block.
func (m *model) copyCommand(arg string) tea.Cmd {
	// A leading -K chooses the K-th answer from the end (-1 the last).
	back, which := 1, "the last answer"
	if f := strings.Fields(arg); len(f) > 0 && strings.HasPrefix(f[0], "-") {
		k, err := strconv.Atoi(f[0][1:])
		n := m.answers()
		if n == 0 {
			m.addError("/copy: there is no answer to copy yet")
			return nil
		}
		if err != nil || k < 1 || k > n {
			m.addError(fmt.Sprintf("/copy %s: -K picks the K-th answer from the end, -1 to -%d here", f[0], n))
			return nil
		}
		back, arg = k, strings.Join(f[1:], " ")
		if k > 1 {
			which = fmt.Sprintf("answer -%d", k)
		}
	}
	a := m.answerBack(back)
	if a == "" {
		m.addError("/copy: there is no answer to copy yet")
		return nil
	}
	if arg == "" {
		return m.copyText(a, which)
	}
	bs := codeBlocks(a)
	if len(bs) == 0 {
		m.addError("/copy " + arg + ": " + which + " has no code block; /copy copies the whole answer")
		return nil
	}
	n := len(bs)
	if arg != "code" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 || v > len(bs) {
			m.addError(fmt.Sprintf("/copy %s: %s has %d code %s: %s; /copy N copies one, /copy code the last",
				arg, which, len(bs), plural(len(bs), "block", "blocks"), describeBlocks(bs)))
			return nil
		}
		n = v
	}
	what := fmt.Sprintf("code block %d of %d (%s)", n, len(bs), describeBlocks(bs[n-1 : n])[2:])
	if back > 1 {
		what += " of " + which
	}
	return m.copyText(bs[n-1].code, what)
}

// copyText puts s on the clipboard: OSC 52 through the terminal, plus the
// native clipboard tool when there is one.
func (m *model) copyText(s, what string) tea.Cmd {
	clip := m.clip
	m.copying = what
	return tea.Batch(tea.SetClipboard(s), func() tea.Msg {
		how, err := clip(s)
		return copiedMsg{how: how, err: err}
	})
}

// answers counts the conversation's answers.
func (m *model) answers() int {
	n := 0
	for _, msg := range m.msgs {
		if msg.Role == "assistant" {
			n++
		}
	}
	return n
}

// answerBack is the k-th answer from the end (1: the last), or "".
func (m *model) answerBack(k int) string {
	for i := len(m.msgs) - 1; i >= 0; i-- {
		if m.msgs[i].Role == "assistant" {
			if k--; k == 0 {
				return m.msgs[i].Content
			}
		}
	}
	return ""
}
