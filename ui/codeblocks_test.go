package ui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

func TestCodeBlocks(t *testing.T) {
	tests := []struct {
		name, md string
		want     []codeBlock
	}{
		{"none", "just text with `inline` code", nil},
		{"two", "a\n```go\nfmt.Println(1)\n```\nb\n~~~sh\nls -l\necho\n~~~\n", []codeBlock{{"go", "fmt.Println(1)"}, {"sh", "ls -l\necho"}}},
		{"longer fence holds a shorter one", "````md\n```go\nx\n```\n````", []codeBlock{{"md", "```go\nx\n```"}}},
		{"unclosed runs to the end", "```\nhalf\nway", []codeBlock{{"", "half\nway"}}},
		{"indented four is not a fence", "    ```\n    code", nil},
		{"inline triple backticks", "use ```x``` here", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := codeBlocks(tc.md)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("codeBlocks = %q, want %q", got, tc.want)
			}
		})
	}
}

// Issue 15 item 17: /copy N copies code block N of the last answer.
func TestCopyCodeBlock(t *testing.T) {
	answer := "Two ways:\n\n```go\nfor {\n}\n```\n\nor\n\n```sh\nwhile true; do :; done\n```\n"
	tests := []struct {
		arg, copied, notice, err string
	}{
		{"", answer, "copied the last answer to the clipboard (OSC 52 + fakeclip)", ""},
		{"1", "for {\n}", "copied code block 1 of 2 (go (2 lines)) to the clipboard (OSC 52 + fakeclip)", ""},
		{"code", "while true; do :; done", "copied code block 2 of 2 (sh (1 line)) to the clipboard (OSC 52 + fakeclip)", ""},
		{"3", "", "", "/copy 3: the last answer has 2 code blocks: 1 go (2 lines), 2 sh (1 line); /copy N copies one, /copy code the last"},
		// Issue 15 item 17: a chosen answer, counted from the end.
		{"-1 1", "for {\n}", "copied code block 1 of 2 (go (2 lines)) to the clipboard (OSC 52 + fakeclip)", ""},
		{"-2", "First answer.", "copied answer -2 to the clipboard (OSC 52 + fakeclip)", ""},
		{"-2 code", "", "", "/copy code: answer -2 has no code block; /copy copies the whole answer"},
		{"-3", "", "", "/copy -3: -K picks the K-th answer from the end, -1 to -2 here"},
	}
	for _, tc := range tests {
		t.Run("/copy "+tc.arg, func(t *testing.T) {
			d := newDriver(t, nil)
			var copied string
			d.m.clip = func(s string) (string, error) { copied = s; return "fakeclip", nil }
			d.sess.push(text("First answer."), done(engine.StopEOS))
			d.submit("q0")
			d.settle()
			d.sess.push(text(answer), done(engine.StopEOS))
			d.submit("q")
			d.settle()
			d.submit(strings.TrimSpace("/copy " + tc.arg))
			d.settle()
			if tc.err != "" {
				if e := d.lastEntry(); e.kind != entryError || e.text != tc.err {
					t.Fatalf("entry %+v, want error %q", e, tc.err)
				}
				return
			}
			if copied != tc.copied {
				t.Errorf("copied %q, want %q", copied, tc.copied)
			}
			if d.m.notice != tc.notice {
				t.Errorf("notice %q, want %q", d.m.notice, tc.notice)
			}
		})
	}
}
