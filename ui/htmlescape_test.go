package ui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

// TestMarkdownKeepsHTMLLikeText guards issue 15 item 5: glamour's HTML
// sanitizer dropped tags from answers ("I'll use the <div>tag" showed as
// "I'll use the tag"). Model text is shown literally, inline and as a
// block, while code spans, code blocks and markdown keep rendering.
func TestMarkdownKeepsHTMLLikeText(t *testing.T) {
	tests := []struct {
		name, md string
		want     []string // substrings of the stripped render
		not      []string
	}{
		{"inline tag", "I'll use the <div>tag here.", []string{"I'll use the <div>tag here."}, nil},
		{"tool call block", "<tool_call>\n{\"name\": \"ls\"}\n</tool_call>", []string{"<tool_call>", `{"name": "ls"}`, "</tool_call>"}, nil},
		{"closing and comment", "a </b> b <!-- c --> d", []string{"a </b> b <!-- c --> d"}, nil},
		{"html block paragraph", "<div class=\"x\">\nhello <b>bold</b>\n</div>", []string{`<div class="x">`, "hello <b>bold</b>", "</div>"}, nil},
		{"code span untouched", "use `<div>` or `a\\<b`", []string{"<div>", `a\<b`}, []string{`\<div>`}},
		{"code block untouched", "```html\n<p>hi</p>\n```", []string{"<p>hi</p>"}, []string{`\<p>`}},
		{"less-than comparison", "if a < b and 3<4", []string{"if a < b and 3<4"}, []string{`\<`}},
		{"markdown still renders", "**bold** <x>", []string{"bold <x>"}, []string{"**"}},
		{"autolink kept", "see <https://go.dev>", []string{"https://go.dev"}, []string{`\<`}},
	}
	r := newRenderer(80, "dark")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			for _, l := range r.markdown(tt.md) {
				b.WriteString(strings.TrimSpace(ansi.Strip(l)) + "\n")
			}
			got := b.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("render of %q lacks %q:\n%s", tt.md, w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("render of %q has %q:\n%s", tt.md, n, got)
				}
			}
		})
	}
}
