package ui

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"

	"github.com/ftchat/ftchat/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// stripFrame removes escape codes and trailing spaces so frames compare
// independently of the color profile.
func stripFrame(s string) string {
	lines := strings.Split(ansi.Strip(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./ui -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("frame differs from %s (run with -update to accept):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// goldenConversation plays a fixed conversation into a driver.
func goldenConversation(t *testing.T, w, h int) *driver {
	d := newDriver(t, func(c *Config) { c.Width, c.Height = w, h })
	d.sess.push(
		think("The user wants a loop. Go has only for loops, so show the three-clause form."),
		text("Go has a single loop keyword, `for`:\n\n```go\nfor i := 0; i < 3; i++ {\n\tfmt.Println(i)\n}\n```\n\n"),
		text("- it prints **0**, **1** and **2**\n- `range` iterates over slices and maps\n"),
		done(engine.StopEOS),
	)
	d.submit("How do I write a loop in Go?")
	d.settle()
	d.typeText("and a while loop?")
	return d
}

func TestGoldenFrames(t *testing.T) {
	tests := []struct {
		name string
		w, h int
		mut  func(d *driver)
	}{
		{"conversation_80x24", 80, 24, nil},
		{"conversation_120x40", 120, 40, nil},
		{"thinking_120x40", 120, 40, func(d *driver) { d.key(keyCtrlT) }},
		{"streaming_80x24", 80, 24, func(d *driver) {
			d.m.input.Reset()
			d.sess.push(
				engine.Event{Kind: engine.EventProgress, Done: 12, Total: 12},
				text("Go has no `while` keyword; a `for` with only a condition is one:\n\n```go\nn := 10\nfor n > 0 {\n"),
				engine.Event{Kind: waitCancel},
			)
			d.enter() // the input is empty: nothing happens
			d.submit("and a while loop?")
			d.send(tickMsg{})
		}},
		{"kvdtype_progress_80x24", 80, 24, func(d *driver) {
			d.m.reconf = &reconfState{dtype: "fp8_e4m3"}
			d.send(reconfProgMsg{done: 12000, total: 16000})
		}},
		// Issue 15 item 3: a long single line grows the input (4 rows
		// here), not only hard newlines.
		{"long_line_input_80x24", 80, 24, func(d *driver) {
			d.m.input.Reset()
			d.typeText(strings.Repeat("a long single line that wraps in the input ", 6) + "end")
		}},
		{"scrolled_80x16", 80, 16, func(d *driver) { d.m.input.Reset(); d.key(keyPgUp) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := goldenConversation(t, tc.w, tc.h)
			if tc.mut != nil {
				tc.mut(d)
			}
			got := d.frame()
			if n := strings.Count(got, "\n") + 1; n != tc.h {
				t.Errorf("frame has %d lines, want %d", n, tc.h)
			}
			for i, l := range strings.Split(got, "\n") {
				if strings.HasPrefix(l, "─") && ansi.StringWidth(l) != tc.w-1 {
					t.Errorf("rule line %d is %d columns wide, want %d", i, ansi.StringWidth(l), tc.w-1)
				}
				if w := ansi.StringWidth(l); w > tc.w {
					t.Errorf("line %d is %d columns wide (> %d): %q", i, w, tc.w, l)
				}
			}
			checkGolden(t, tc.name, got)
			if d.m.gen != nil {
				d.key(keyEsc)
				d.settle()
			}
		})
	}
}

// Code blocks are highlighted (several colors on one line) and thinking is
// dimmed; the goldens strip colors, so check them here.
func TestHighlightAndDim(t *testing.T) {
	r := newRenderer(80, "dark")
	e := &entry{kind: entryAssistant, text: "```go\nfor i := 0; i < 3; i++ {}\n```", think: "pondering"}
	lines := r.render(e, true)
	var code, thinking string
	for _, l := range lines {
		switch s := ansi.Strip(l); {
		case strings.Contains(s, "for i := 0"):
			code = l
		case strings.Contains(s, "pondering"):
			thinking = l
		}
	}
	colors := map[string]bool{}
	for _, m := range sgrColor.FindAllString(code, -1) {
		colors[m] = true
	}
	if len(colors) < 3 {
		t.Errorf("code line has %d distinct colors, want syntax highlighting: %q", len(colors), code)
	}
	if !dimSGR.MatchString(thinking) {
		t.Errorf("thinking is not dimmed: %q", thinking)
	}
}

// dimSGR matches a bright-black (ANSI 8) foreground, the dim gray.
var dimSGR = regexp.MustCompile(`\x1b\[(?:[0-9;]*;)?90(?:;[0-9;]*)?m`)

var sgrColor = regexp.MustCompile(`\x1b\[[0-9;]*38;5;[0-9]+m|\x1b\[38;5;[0-9]+m`)
