package chat

import (
	"strings"
	"testing"
	"time"
)

// TestHostileTemplateErrorNamesModel guards issue 10 item 3 at the chat
// layer: a model's template that asks for gigabytes or loops for minutes
// fails fast with one error naming the model file and the limit, and the
// budget grows with the conversation so a long chat still renders.
func TestHostileTemplateErrorNamesModel(t *testing.T) {
	long := []Message{{Role: "user", Content: strings.Repeat("x", 8<<20)}}
	cases := []struct {
		name, src string
		msgs      []Message
		want      string // "" renders
	}{
		{"center", `{{ "x"|center(10000000000) }}`, nil, "exceeds the 64 MiB budget for what a render may build (center width 10000000000)"},
		{"tojson indent", `{{ messages|tojson(indent=1000000000) }}`, []Message{{Role: "user", Content: "hi"}}, "tojson indent 1000000000"},
		{"doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", nil, "'+' of lists"},
		{"sort", "{% set l = range(1000000)|list %}{% for i in range(15) %}{% set s = l|sort %}{% endfor %}", nil, "loop iterations, macro calls and comparisons"},
		// 8 MiB of content walked 8 times is 64 MiB: within the scaled budget
		{"long chat", "{% for i in range(8) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}", long, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := New(c.src)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.Origin = "/models/evil.gguf"
			start := time.Now()
			_, err = tmpl.Render(c.msgs, nil, RenderOptions{})
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v", took)
			}
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			for _, w := range []string{"chat template of /models/evil.gguf: jinja: line 1: ", c.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
