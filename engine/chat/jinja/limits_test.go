package jinja

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHostileTemplatesFailFast guards issue 10 item 3: a chat template comes
// with the model file, and templates that ask for gigabytes (huge widths,
// doubling, nested repetitions printed or serialized) or for minutes of CPU
// (huge sorts, quadratic filters, exponential macros) must fail quickly
// with one clear error, allocating little, instead of aborting the process
// out of memory or hanging the prompt.
func TestHostileTemplatesFailFast(t *testing.T) {
	const (
		budget  = "exceeds the 64 MiB budget"
		steps   = "more than 16777216 loop iterations"
		cpu     = "jinja: line 1: template " // runs more than ... steps, or takes longer than 2s on a loaded machine
		nested  = "{% set a = ['xxxxxxxxxx'] * 1000 %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}"
		longStr = "{% set s = 'x' * 30000000 %}"
	)
	cases := []struct {
		name, src string
		want      []string // substrings of the error
	}{
		// memory: strings
		{"center", `{{ "x"|center(10000000000) }}`, []string{budget, "center width 10000000000"}},
		{"indent width", `{{ "a\nb"|indent(10000000000) }}`, []string{budget, "indent width 10000000000"}},
		{"indent string pad", `{{ ("\n" * 1000000)|indent("x" * 1000, blank=true) }}`, []string{budget, "indent of 1000001 lines"}},
		{"tojson indent", `{{ [[1]]|tojson(indent=1000000000) }}`, []string{budget, "tojson indent 1000000000"}},
		{"tojson indent deep", `{{ [[[[[[[[1]]]]]]]]|tojson(indent=30000000) }}`, []string{budget, "tojson"}},
		{"string repeat", `{{ "x" * 10000000000 }}`, []string{budget, "* 10000000000"}},
		{"string repeat overflow", `{{ ("x" * 1000) * 9223372036854775807 }}`, []string{budget}},
		{"string doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", []string{budget, "'~'"}},
		{"string concat doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", []string{budget, "'+'"}},
		{"replace", `{{ ("x" * 1000000)|replace("x", "y" * 1000) }}`, []string{budget, "replace() of 1000000 occurrences"}},
		{"str.replace", `{{ ("x" * 1000000).replace("x", "y" * 1000) }}`, []string{budget, "replace()"}},
		{"replace empty", `{{ ("x" * 1000000)|replace("", "y" * 1000) }}`, []string{budget, "replace()"}},
		{"join", `{{ (["x" * 1000000] * 1000)|join }}`, []string{budget, "join of 1000 items"}},
		{"str.join", `{{ "".join(["x" * 1000000] * 1000) }}`, []string{budget, "join of 1000 items"}},
		{"upper", `{{ ("x" * 30000000)|upper }}`, []string{budget, "string filter"}},
		{"format width", `{{ "%1000000000s"|format("x") }}`, []string{budget, "format"}},
		{"format precision", `{{ "%.1000000000f"|format(1.5) }}`, []string{budget, "format"}},
		{"percent of nested", nested + `{{ "%s" % c }}`, []string{budget}},
		{"escape", `{{ ("&" * 30000000)|e }}`, []string{budget, "escape"}},
		// memory: lists and dicts
		{"list doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}", []string{budget, "'+' of lists"}},
		{"list repeat", `{{ [1] * 10000000000 }}`, []string{budget, "a list of 1 items * 10000000000"}},
		{"list repeat nested", `{{ ([1] * 1000000) * 1000000 }}`, []string{budget}},
		{"list repeat overflow", `{{ ([1, 2] * 1000) * 9223372036854775807 }}`, []string{budget}},
		{"nested printed", nested + "{{ c }}", []string{budget, "printing of a list"}},
		{"nested tojson", nested + "{{ c|tojson }}", []string{budget, "tojson of a list"}},
		{"nested string", nested + "{{ c|string }}", []string{budget}},
		{"nested concat", nested + "{{ 'x' ~ c }}", []string{budget}},
		{"nested join", nested + "{{ c|join(',') }}", []string{budget}},
		{"nested in set block", nested + "{% set x %}{{ c }}{% endset %}", []string{budget}},
		{"attribute path", `{{ [1]|map(attribute="." * 30000000)|list }}`, []string{budget, "attribute path"}},
		{"iterate long string", longStr + "{% for ch in s %}{% endfor %}", []string{budget, "iterating a string"}},
		{"list of long string", longStr + "{{ s|list|length }}", []string{budget}},
		{"split", `{{ ("a " * 30000000).split()|length }}`, []string{budget, "split()"}},
		{"slice long string", longStr + "{{ (s ~ s)[::-1]|length }}", []string{budget}},
		{"range too long", `{{ range(10000000000)|length }}`, []string{"range() too long"}},
		{"range overflow", `{{ range(-9223372036854775807, 9223372036854775807)|length }}`, []string{"range() too long"}},
		// CPU
		{"sort a big list many times", "{% set l = range(1000000)|list %}{% for i in range(15) %}{% set s = l|sort %}{% endfor %}", []string{steps}},
		{"unique quadratic", `{{ range(1000000)|unique|length }}`, []string{cpu}},
		{"compare nested", nested + "{{ c == c }}", []string{cpu}},
		{"nested loops", "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", []string{cpu}},
		{"exponential macro", "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}", []string{cpu}},
		{"infinite macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", []string{"recursion deeper than"}},
		{"slow loop body", longStr + "{% for i in range(1000000) %}{% if s.count('y') %}{% endif %}{% endfor %}", []string{"takes longer than 2s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err = tmpl.Render(nil)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("%s: rendered; want an error", c.src)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "jinja:"); n != 1 {
				t.Errorf("want one message, got %q", err)
			}
			if took > 5*time.Second {
				t.Errorf("took %v", took)
			}
			if a := after.TotalAlloc - before.TotalAlloc; a > 200<<20 {
				t.Errorf("allocated %d MiB", a>>20)
			}
		})
	}
}

// TestRealisticTemplatesStayWithinLimits: the budget is cumulative, so it
// must leave room for what chat templates really do with a long chat.
func TestRealisticTemplatesStayWithinLimits(t *testing.T) {
	msgs := make([]any, 2000)
	for i := range msgs {
		msgs[i] = map[string]any{"role": []string{"user", "assistant"}[i%2], "content": strings.Repeat("word ", 200)}
	}
	src := `{%- for m in messages -%}{%- set c = m.content|trim -%}
<|im_start|>{{ m.role }}
{{ c.split('</think>')[-1].lstrip('\n') }}{{ '<|im_end|>\n' }}{%- endfor -%}{{ messages|tojson|length }}`
	out, err := render(t, src, map[string]any{"messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 2000*1000 {
		t.Fatalf("short output: %d bytes", len(out))
	}
}

// TestTitleAllocatesLittle: the title filter on many short words allocates
// about its output, not a regexp match per word (20x the string).
func TestTitleAllocatesLittle(t *testing.T) {
	tmpl, err := Parse(`{{ ("a " * 5000000)|title|length }}`)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := tmpl.Render(nil)
	runtime.ReadMemStats(&after)
	if err != nil || out != "10000000" {
		t.Fatalf("got %q, %v", out, err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 100<<20 {
		t.Errorf("allocated %d MiB", a>>20)
	}
}
