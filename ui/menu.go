package ui

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
)

// The command menu (issue 15 item 17): typing "/" lists the slash commands
// whose names start with what is typed, with their descriptions, above the
// input. Up/Down choose, Tab completes the chosen one, Enter runs it (or
// completes it when it needs an argument), Esc closes the menu.

// menuMaxRows bounds the menu's height.
const menuMaxRows = 8

// menuItems are the commands matching the input while a command name is
// being typed; nil when the menu is closed.
func (m *model) menuItems() []command {
	v := m.input.Value()
	if items := m.modelMenuItems(v); items != nil && m.gen == nil {
		return items
	}
	if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, " \n") || v == m.menuClosedOn || m.gen != nil || (m.ag != nil && m.ag.dialog != nil) {
		return nil
	}
	var out []command
	for _, c := range commands {
		if strings.HasPrefix(c.name, v) {
			out = append(out, c)
		}
	}
	if len(out) == 1 && out[0].name == v {
		return nil // typed whole: nothing to choose
	}
	return out
}

// menuRows is how many rows the menu takes: its items, at most
// menuMaxRows and at most half the chat area.
func (m *model) menuRows(chatH int) int {
	n := len(m.menuItems())
	if n == 0 || chatH < 2 {
		return 0 // no room: Tab still completes
	}
	return min(n, menuMaxRows, chatH/2)
}

// menuKey handles a key while the menu is open; ok is false for keys the
// menu leaves to the input.
func (m *model) menuKey(ks string) (cmd tea.Cmd, ok bool) {
	items := m.menuItems()
	if len(items) == 0 {
		return nil, false
	}
	m.menuSel, m.menuFor = m.menuChosen(items), m.input.Value()
	sel := items[m.menuSel]
	switch ks {
	case "up":
		m.menuSel = (m.menuSel + len(items) - 1) % len(items)
	case "down":
		m.menuSel = (m.menuSel + 1) % len(items)
	case "tab":
		m.setInput(sel.name + " ")
		m.input.MoveToEnd()
		m.menuSel = 0
	case "enter":
		m.menuSel = 0
		if sel.args != "" && !strings.HasPrefix(sel.args, "[") {
			// It needs an argument: complete and let the user type it.
			m.setInput(sel.name + " ")
			m.input.MoveToEnd()
			return nil, true
		}
		m.input.Reset()
		m.pushHistory(sel.name)
		return m.submit(sel.name), true
	case "esc":
		m.menuClosedOn = m.input.Value()
	default:
		return nil, false
	}
	return nil, true
}

// menuChosen is the chosen row: the first again whenever the text changed.
func (m *model) menuChosen(items []command) int {
	if m.menuFor != m.input.Value() {
		return 0
	}
	return min(max(m.menuSel, 0), len(items)-1)
}

// menuView renders the menu's rows, the chosen one marked.
func (m *model) menuView(rows int) []string {
	items := m.menuItems()
	if rows <= 0 || len(items) == 0 {
		return nil
	}
	sel := m.menuChosen(items)
	first := max(0, min(sel-rows+1, len(items)-rows)) // keep the chosen row in view
	if sel < first {
		first = sel
	}
	nameW := 0
	for _, c := range items {
		nameW = max(nameW, ansi.StringWidth(c.name+" "+c.args))
	}
	out := make([]string, 0, rows)
	for i := first; i < len(items) && len(out) < rows; i++ {
		c := items[i]
		line := fmt.Sprintf("%-*s  %s", nameW, c.name+" "+c.args, c.help)
		line = ansi.Truncate(line, max(m.width-4, 1), "…")
		if i == sel {
			out = append(out, m.st.user.Render("› "+line))
		} else {
			out = append(out, "  "+m.st.dim.Render(line))
		}
	}
	if more := len(items) - rows; more > 0 && len(out) > 0 {
		out[len(out)-1] = "  " + m.st.dim.Render(fmt.Sprintf("… %d more (↑/↓)", more))
	}
	return out
}
