package ui

import (
	"strings"
	"testing"
)

// Issue 15 item 17: typing "/" opens a filtered menu of the commands.
func TestCommandMenu(t *testing.T) {
	tests := []struct {
		name, typed string
		keys        []string // after typing: up, down, tab, enter, esc
		input       string   // the input afterwards
		entry       string   // a prefix of the last chat entry, when a command ran
		open        bool     // the menu is still open
	}{
		{"opens on slash", "/", nil, "/", "", true},
		{"filters", "/s", nil, "/s", "", true},
		{"tab completes the first", "/s", []string{"tab"}, "/system ", "", false},
		{"down then tab", "/s", []string{"down", "tab"}, "/set ", "", false},
		{"up wraps to the last", "/s", []string{"up", "tab"}, "/stats ", "", false},
		{"enter runs a command without arguments", "/cl", []string{"enter"}, "", "conversation cleared", false},
		{"enter completes one that needs an argument", "/kv", []string{"enter"}, "/kvdtype ", "", false},
		{"esc closes it", "/s", []string{"esc"}, "/s", "", false},
		{"typing again reopens it", "/s", []string{"esc", "t"}, "/st", "", true},
		{"no match, no menu", "/zz", nil, "/zz", "", false},
		{"a space closes it", "/set ", nil, "/set ", "", false},
	}
	keys := map[string]func(d *driver){
		"up": func(d *driver) { d.key(keyUp) }, "down": func(d *driver) { d.key(keyDown) },
		"tab": func(d *driver) { d.key(keyTab) }, "enter": func(d *driver) { d.enter() },
		"esc": func(d *driver) { d.key(keyEsc) }, "t": func(d *driver) { d.typeText("t") },
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, nil)
			d.typeText(tc.typed)
			for _, k := range tc.keys {
				keys[k](d)
			}
			if got := d.m.input.Value(); got != tc.input {
				t.Errorf("input %q, want %q", got, tc.input)
			}
			if open := len(d.m.menuItems()) > 0; open != tc.open {
				t.Errorf("menu open = %v, want %v", open, tc.open)
			}
			if tc.entry != "" && (len(d.m.entries) == 0 || !strings.HasPrefix(d.lastEntry().text, tc.entry)) {
				t.Errorf("last entry does not start with %q", tc.entry)
			}
		})
	}
}

func TestGoldenCommandMenu(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typed string
		down  int
	}{
		{"command_menu_80x24", "/", 2},
		{"command_menu_filtered_80x24", "/s", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := goldenConversation(t, 80, 24)
			d.m.input.Reset()
			d.typeText(tc.typed)
			for range tc.down {
				d.key(keyDown)
			}
			got := d.frame()
			if n := strings.Count(got, "\n") + 1; n != 24 {
				t.Errorf("frame has %d lines, want 24", n)
			}
			checkGolden(t, tc.name, got)
		})
	}
}

// On a tiny screen the menu takes at most half the chat rows, none when
// there is no chat row to spare; the frame keeps its height.
func TestCommandMenuSmallScreens(t *testing.T) {
	for _, h := range []int{4, 6, 8, 10} {
		d := newDriver(t, func(c *Config) { c.Width, c.Height = 40, h })
		d.typeText("/")
		if got := strings.Count(d.frame(), "\n") + 1; got != h {
			t.Errorf("height %d: frame has %d lines", h, got)
		}
		if ch := d.m.chatHeight(); ch < 0 {
			t.Errorf("height %d: chat height %d", h, ch)
		}
	}
}
