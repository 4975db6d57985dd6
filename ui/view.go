package ui

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
)

// ---- scrolling -----------------------------------------------------------

func (m *model) blockLen(i int) int {
	n := len(m.r.render(m.entries[i], m.showThink))
	if i > 0 {
		n++ // blank separator line
	}
	return n
}

func (m *model) blockLine(i, k int) string {
	if i > 0 {
		if k == 0 {
			return ""
		}
		k--
	}
	return m.entries[i].lines[k]
}

// topAnchor returns the top visible line while following the bottom.
func (m *model) topAnchor(h int) (int, int) {
	total := 0
	for i := len(m.entries) - 1; i >= 0; i-- {
		n := m.blockLen(i)
		total += n
		if total >= h {
			return i, total - h
		}
	}
	return 0, 0
}

func (m *model) scrollUp(n int) {
	if len(m.entries) == 0 {
		return
	}
	if m.follow {
		m.anchorE, m.anchorL = m.topAnchor(m.chatHeight())
		m.follow = false
	}
	m.anchorL -= n
	for m.anchorL < 0 && m.anchorE > 0 {
		m.anchorE--
		m.anchorL += m.blockLen(m.anchorE)
	}
	m.anchorL = max(m.anchorL, 0)
	m.followIfBottomVisible()
}

func (m *model) scrollDown(n int) {
	if m.follow || len(m.entries) == 0 {
		return
	}
	m.anchorL += n
	for m.anchorE < len(m.entries)-1 && m.anchorL >= m.blockLen(m.anchorE) {
		m.anchorL -= m.blockLen(m.anchorE)
		m.anchorE++
	}
	m.followIfBottomVisible()
}

// followIfBottomVisible goes back to following once the last line is in
// view from the anchor.
func (m *model) followIfBottomVisible() {
	h, seen := m.chatHeight(), 0
	for i := m.anchorE; i < len(m.entries) && seen <= h; i++ {
		seen += m.blockLen(i)
		if i == m.anchorE {
			seen -= m.anchorL
		}
	}
	if seen <= h {
		m.scrollBottom()
	}
}

func (m *model) scrollTop() {
	m.follow, m.anchorE, m.anchorL = false, 0, 0
	m.followIfBottomVisible()
}

func (m *model) scrollBottom() { m.follow, m.newBelow = true, false }

// chatLines returns the h visible lines of the chat view.
func (m *model) chatLines(h int) []string {
	out := make([]string, 0, h)
	if h <= 0 || len(m.entries) == 0 {
		return out
	}
	ae, al := m.anchorE, m.anchorL
	if m.follow {
		ae, al = m.topAnchor(h)
	}
	for i := ae; i < len(m.entries) && len(out) < h; i++ {
		n := m.blockLen(i)
		for k := al; k < n && len(out) < h; k++ {
			out = append(out, m.blockLine(i, k))
		}
		al = 0
	}
	return out
}

// ---- layout and view -----------------------------------------------------

// statusView is cached on the stats and width: View runs after every
// message, including each batch of streamed tokens.
func (m *model) statusView() []string {
	var pre [2]int
	if g := m.gen; g != nil && g.prefill[1] > 0 && g.prefill[0] < g.prefill[1] {
		pre = g.prefill
	}
	if m.statusCache.lines == nil || m.statusCache.stats != m.stats || m.statusCache.width != m.width || m.statusCache.prefill != pre {
		m.statusCache.stats, m.statusCache.width, m.statusCache.prefill = m.stats, m.width, pre
		m.statusCache.lines = statusLinesPrefill(m.stats, pre[0], pre[1], m.width, m.st)
		if w := contextWarning(m.stats); w != "" && m.ag != nil {
			m.statusCache.lines = append([]string{m.st.err.Render(ansi.Truncate(w, m.width-1, "…"))}, m.statusCache.lines...)
		}
	}
	return m.statusCache.lines
}

// inputView caches the textarea's rendering, which is costly, on what
// it depends on.
func (m *model) inputView() (string, *tea.Cursor) {
	k := inputKey{val: m.input.Value(), line: m.input.Line(), col: m.input.Column(), w: m.width, h: m.input.Height(), scroll: m.input.ScrollYOffset()}
	if !m.inputCache.ok || m.inputCache.key != k {
		m.inputCache.key, m.inputCache.ok = k, true
		m.inputCache.view = strings.ReplaceAll(m.input.View(), string(tabRune), tabGlyph)
		m.inputCache.cursor = m.input.Cursor()
	}
	var cur *tea.Cursor
	if c := m.inputCache.cursor; c != nil {
		cc := *c
		cur = &cc
	}
	return m.inputCache.view, cur
}

type inputKey struct {
	val                     string
	line, col, w, h, scroll int
}

// inputHeight is the input's height: its rows, soft-wrapped ones included
// (a long single line grows the input too), from 1 to 8, and at most a
// third of the screen.
func (m *model) inputHeight() int {
	v := m.input.Value()
	if c := &m.inputRows; !c.ok || c.val != v || c.w != m.width {
		// The textarea counts its wrapped rows, clamped to its MaxHeight
		// (8), only when its width is set (with DynamicHeight); typing
		// does not recount, so recount here when the text changed.
		m.input.SetWidth(m.width)
		c.val, c.w, c.n, c.ok = v, m.width, m.input.Height(), true
	}
	return min(max(m.inputRows.n, 1), 8, max(m.height/3, 1))
}

// layout splits the height: chat, the notice line, the input, and the
// status pane, which gives way first on a very small screen.
func (m *model) layout() (chatH, inputH int, status []string) {
	inputH = m.inputHeight()
	status = m.statusView()
	status = status[:min(len(status), max(m.height-1-inputH-1, 0))]
	chatH = max(m.height-1-inputH-len(status), 0)
	return chatH - m.menuRows(chatH), inputH, status
}

func (m *model) chatHeight() int {
	ch, _, _ := m.layout()
	return ch
}

// noticeLine is the rule between the chat and the input, carrying the
// generation state, notices and scroll hints.
func (m *model) noticeLine() string {
	var left string
	style := m.st.dim
	switch {
	case m.swap != nil:
		left, style = m.swapNotice(), m.st.note
	case m.reconf != nil:
		frac := 0.0
		if m.reconf.total > 0 {
			frac = float64(m.reconf.done) / float64(m.reconf.total)
		}
		queued := ""
		if m.queued != "" {
			queued = " · message queued"
		}
		left = fmt.Sprintf("kv → %s %s %s / %s tokens%s · esc cancels", m.reconf.dtype, bar(frac, 12),
			formatInt(int64(m.reconf.done)), formatInt(int64(m.reconf.total)), queued)
		if m.reconf.cancelled {
			left = fmt.Sprintf("kv → %s: cancelling, keeping the old cache…%s", m.reconf.dtype, queued)
		}
		style = m.st.note
	case m.gen != nil && m.gen.stopped:
		left = "stopping…"
	case m.ag != nil && m.ag.dialog != nil:
		left, style = m.dialogNotice(), m.st.note
	case m.gen != nil && m.gen.entry.text == "" && m.gen.entry.think == "" && m.gen.prefill[1] > 0:
		left = fmt.Sprintf("prefill %s / %s tokens · esc to stop", formatInt(int64(m.gen.prefill[0])), formatInt(int64(m.gen.prefill[1])))
	case m.gen != nil:
		left = "answering · " + formatRate(m.stats.DecodeTokensPerS) + " tok/s · esc to stop"
	case m.notice == "" && len(m.menuItems()) > 0:
		left = "↑/↓ choose · Tab completes · Enter runs · Esc closes"
	case m.notice != "":
		left = m.notice
		if m.noticeErr {
			style = m.st.err
		} else {
			style = m.st.note
		}
	}
	right := ""
	if !m.follow {
		right = "↑ scrolled · End/ctrl+end: bottom"
		if m.newBelow {
			right = "↓ new output below · ctrl+end"
		}
	}
	lw, rw := ansi.StringWidth(left), ansi.StringWidth(right)
	if lw+rw+6 > m.width {
		left = ansi.Truncate(left, max(m.width-rw-6, 0), "…")
		lw = ansi.StringWidth(left)
	}
	// Lines stay one column short of the width, as the other rules do.
	fill := max(m.width-lw-rw-5, 0)
	line := m.st.dim.Render("──")
	if left != "" {
		line = m.st.dim.Render("─ ") + style.Render(left) + " "
	} else {
		fill++
	}
	line += m.st.dim.Render(strings.Repeat("─", fill))
	if right != "" {
		line += " " + m.st.note.Render(right)
	} else {
		line += m.st.dim.Render("─")
	}
	return line
}

// frame renders the whole screen as a string and the cursor position.
func (m *model) frame() (string, *tea.Cursor) {
	ch, ih, status := m.layout()
	m.input.SetHeight(ih)
	menu := m.menuView(max(m.height-1-ih-len(status)-ch, 0))
	lines := m.chatView(ch)
	iv, cur := m.inputView()
	if m.ag != nil && m.ag.dialog != nil {
		cur = nil // keys go to the dialog
	}
	size := len(iv) + 4*m.width + ch
	for _, l := range lines {
		size += len(l)
	}
	for _, l := range status {
		size += len(l) + 1
	}
	var b strings.Builder
	b.Grow(size)
	narrow := m.width < 16 // below this, minimum wrap widths exceed the screen
	for i := 0; i < ch; i++ {
		if i < len(lines) {
			if narrow {
				b.WriteString(ansi.Truncate(lines[i], m.width, ""))
			} else {
				b.WriteString(lines[i])
			}
		}
		b.WriteByte('\n')
	}
	for _, l := range menu {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	b.WriteString(m.noticeLine())
	b.WriteByte('\n')
	b.WriteString(iv)
	for _, s := range status {
		b.WriteByte('\n')
		b.WriteString(s)
	}
	if cur != nil {
		cur.Y += ch + len(menu) + 1
	}
	return b.String(), cur
}

// View implements tea.Model.
func (m *model) View() tea.View {
	if m.quitting {
		return tea.NewView("")
	}
	s, cur := m.frame()
	v := tea.NewView(s)
	v.AltScreen = true
	v.MouseMode = tea.MouseModeCellMotion
	v.Cursor = cur
	v.WindowTitle = "ftchat"
	// The terminal's own progress indicator (where supported) mirrors the
	// re-prefill of /kvdtype and long prefills.
	switch {
	case m.swap != nil && m.swap.total > 0:
		v.ProgressBar = tea.NewProgressBar(tea.ProgressBarDefault, int(m.swap.done*100/m.swap.total))
	case m.swap != nil:
		v.ProgressBar = tea.NewProgressBar(tea.ProgressBarIndeterminate, 0)
	case m.reconf != nil && m.reconf.total > 0:
		v.ProgressBar = tea.NewProgressBar(tea.ProgressBarDefault, m.reconf.done*100/m.reconf.total)
	case m.reconf != nil:
		v.ProgressBar = tea.NewProgressBar(tea.ProgressBarIndeterminate, 0)
	case m.gen != nil && m.gen.prefill[1] > 0 && m.gen.prefill[0] < m.gen.prefill[1]:
		v.ProgressBar = tea.NewProgressBar(tea.ProgressBarDefault, m.gen.prefill[0]*100/m.gen.prefill[1])
	}
	return v
}
