package ui

import (
	"cmp"
	"strings"

	"charm.land/glamour/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
)

// entryKind is what an entry of the chat view shows.
type entryKind int

const (
	entryUser entryKind = iota
	entryAssistant
	entryInfo  // command output, notices
	entryError // one-line errors
	entryTool  // agent mode: a tool call and its clipped result (note)
	entryNote  // agent mode: the agent's notes (denials, dropped context)
)

// entry is one block of the chat view. Finished entries keep their rendered
// lines cached for the width and thinking visibility they were rendered at,
// so a frame never re-renders the history.
type entry struct {
	kind     entryKind
	text     string // markdown for the assistant, plain text otherwise
	think    string // thinking deltas (assistant)
	note     string // e.g. "stopped", shown dimmed after the answer
	attached string // user: one-line description of attached context
	failed   bool   // tool: the call returned an error
	label    string // assistant: the model that wrote it, when not the renderer's (after /model)

	// cache
	lines     []string
	cacheW    int
	cacheShow bool
	valid     bool

	// streaming: the answer is rendered as a stable prefix (whole markdown
	// blocks, re-rendered only when a block completes) plus a tail that is
	// re-rendered on each tick.
	streaming   bool
	stableLen   int
	stableLines []string
}

// renderer renders entries at one width with one glamour style.
type renderer struct {
	width int
	style string
	// label heads each answer (the model's name); "" for none
	label string
	tr    *glamour.TermRenderer
	st    styles
}

type styles struct {
	user, userBar, asst, dim, err, info, note, think lipgloss.Style
}

func newStyles() styles {
	return styles{
		user:    lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12")),
		userBar: lipgloss.NewStyle().Foreground(lipgloss.Color("12")),
		asst:    lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("13")),
		dim:     lipgloss.NewStyle().Foreground(lipgloss.Color("8")),
		err:     lipgloss.NewStyle().Foreground(lipgloss.Color("9")),
		info:    lipgloss.NewStyle().Foreground(lipgloss.Color("7")),
		note:    lipgloss.NewStyle().Foreground(lipgloss.Color("11")).Italic(true),
		think:   lipgloss.NewStyle().Foreground(lipgloss.Color("8")).Italic(true),
	}
}

func newRenderer(width int, style string) *renderer {
	r := &renderer{width: width, style: style, st: newStyles()}
	// Glamour's document margin is 2 columns on each side in the built-in
	// styles; wrap so that the rendered text fits the terminal.
	tr, err := glamour.NewTermRenderer(glamour.WithStandardStyle(style), glamour.WithWordWrap(max(width-4, 10)))
	if err == nil {
		r.tr = tr
	}
	return r
}

// markdown renders md to lines, falling back to wrapped plain text if
// glamour fails (it should not, but a chat must never lose an answer).
func (r *renderer) markdown(md string) []string {
	if strings.TrimSpace(md) == "" {
		return nil
	}
	// Tabs would be expanded by the terminal, not counted by the layout.
	md = strings.ReplaceAll(md, "\t", "    ")
	md = escapeHTML(md)
	if r.tr != nil {
		if out, err := r.tr.Render(md); err == nil {
			return trimBlank(strings.Split(out, "\n"))
		}
	}
	return r.plain(md, "  ", lipgloss.NewStyle())
}

// plain wraps text to the width after prefix, styling each line.
func (r *renderer) plain(text, prefix string, st lipgloss.Style) []string {
	w := max(r.width-ansi.StringWidth(prefix), 10)
	text = strings.ReplaceAll(text, "\t", "    ")
	var out []string
	for _, l := range strings.Split(text, "\n") {
		for _, wl := range strings.Split(ansi.Wrap(l, w, ""), "\n") {
			out = append(out, prefix+st.Render(wl))
		}
	}
	return out
}

// trimBlank drops leading and trailing lines that are blank once escape
// codes are removed (glamour pads documents with them).
func trimBlank(lines []string) []string {
	blank := func(s string) bool { return strings.TrimSpace(ansi.Strip(s)) == "" }
	for len(lines) > 0 && blank(lines[0]) {
		lines = lines[1:]
	}
	for len(lines) > 0 && blank(lines[len(lines)-1]) {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// render returns e's lines, from the cache when still valid.
func (r *renderer) render(e *entry, showThink bool) []string {
	if e.valid && e.cacheW == r.width && e.cacheShow == showThink {
		return e.lines
	}
	var out []string
	switch e.kind {
	case entryUser:
		out = append(out, r.st.user.Render("▌ you"))
		out = append(out, r.plain(e.text, r.st.userBar.Render("▌ "), lipgloss.NewStyle())...)
		if e.attached != "" {
			out = append(out, r.st.userBar.Render("▌ ")+r.st.dim.Render(e.attached))
		}
	case entryAssistant:
		if label := cmp.Or(e.label, r.label); label != "" {
			out = append(out, r.st.asst.Render("◆ "+label))
		}
		out = append(out, r.thinkLines(e, showThink)...)
		if e.streaming {
			out = append(out, r.streamLines(e)...)
		} else {
			out = append(out, r.markdown(e.text)...)
		}
		if e.note != "" {
			out = append(out, "  "+r.st.note.Render(e.note))
		}
	case entryInfo:
		out = r.plain(e.text, "  ", r.st.info)
	case entryError:
		out = r.plain(e.text, "  ", r.st.err)
	case entryTool:
		out = r.toolLines(e)
	case entryNote:
		out = r.plain(e.text, "  ", r.st.note)
	}
	e.lines, e.cacheW, e.cacheShow, e.valid = out, r.width, showThink, true
	return out
}

func (r *renderer) thinkLines(e *entry, show bool) []string {
	t := strings.TrimSpace(e.think)
	if t == "" {
		return nil
	}
	label := "thinking"
	if e.streaming && strings.TrimSpace(e.text) == "" {
		label = "thinking…" // still in it: a reasoning model may think for long
	}
	if !show {
		words := len(strings.Fields(t))
		return []string{"  " + r.st.dim.Render("▸ "+label+" ("+itoa(words)+" words) · ctrl+t to show")}
	}
	out := []string{"  " + r.st.dim.Render("▾ "+label+" · ctrl+t to hide")}
	out = append(out, r.plain(t, "  "+r.st.dim.Render("┊ "), r.st.think)...)
	return append(out, "")
}

// streamLines renders a streaming answer: each completed markdown block is
// rendered once, when it completes, and appended; only the unfinished tail
// is rendered on every call. The finished answer is rendered whole.
func (r *renderer) streamLines(e *entry) []string {
	cut := stableCut(e.text)
	if e.cacheW != r.width || cut < e.stableLen {
		e.stableLen, e.stableLines = 0, nil
	}
	if cut > e.stableLen {
		blocks := r.markdown(e.text[e.stableLen:cut])
		if len(e.stableLines) > 0 && len(blocks) > 0 {
			e.stableLines = append(e.stableLines, "")
		}
		e.stableLines = append(e.stableLines, blocks...)
		e.stableLen = cut
	}
	tail := r.markdown(e.text[cut:])
	out := make([]string, 0, len(e.stableLines)+len(tail)+1)
	out = append(out, e.stableLines...)
	if len(e.stableLines) > 0 && len(tail) > 0 {
		out = append(out, "")
	}
	return append(out, tail...)
}

// stableCut returns the end of the last complete markdown block of s: the
// position after the last blank line that is outside a code fence. Text
// before it no longer changes how it renders as more text arrives.
func stableCut(s string) int {
	cut, inFence, pos := 0, false, 0
	prevBlank := false
	for pos < len(s) {
		nl := strings.IndexByte(s[pos:], '\n')
		if nl < 0 {
			break // the last line is still being written
		}
		line := s[pos : pos+nl]
		pos += nl + 1
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			inFence = !inFence
			if !inFence {
				cut = pos // a closed fence ends a block
			}
			prevBlank = false
			continue
		}
		blank := t == ""
		if blank && !inFence && !prevBlank {
			cut = pos
		}
		prevBlank = blank
	}
	return cut
}

func itoa(n int) string { return formatInt(int64(n)) }
