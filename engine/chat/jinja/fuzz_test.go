package jinja

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParseRender: any source either fails with an error or renders; it
// never panics and never hangs (loops, output and nesting are bounded).
func FuzzParseRender(f *testing.F) {
	for _, c := range []string{
		"{% for m in messages %}{{ m.role }}{% endfor %}",
		"{%- if x is defined and x.y -%}{{ x.y|tojson(indent=2) }}{% else %}{{ raise_exception('no') }}{% endif %}",
		"{% set ns = namespace(a=[]) %}{% set ns.a = ns.a + [1] %}{{ ns.a[::-1]|join(',') }}",
		"{% macro f(a, b=1) %}{{ a ~ b }}{% endmacro %}{{ f('x', b=2) }}",
		"{{ 'a b'.split()|map('upper')|list }}{# c #}{% raw %}{{{% endraw %}",
		"{{ {'a': (1, 2)}|items|list }}{{ 1 if 2 else 3 }}{{ -x ** 2 // 3 % 4 }}",
		"{% for a, b in [[1, 2]] if a %}{{ loop.cycle('x') }}{% else %}e{% endfor %}",
		"{{ ((((((1)))))) }}{{ [[[[]]]] }}{{ s[1:2:3] }}",
		"{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}",
		"{% for x in t recursive %}{{ loop.depth }}{{ loop(x) if x is iterable }}{{ loop.changed(x) }}{% endfor %}",
		"{% set c = cycler(1, 2) %}{% set j = joiner('|') %}{{ j() }}{{ c.next() }}{{ '[[1], {\"a\": 2}]'|from_json|batch(2, 0)|list }}",
		"{% if false %}{{ x|nosuch }}{% endif %}{{ y if x is nosuch }}",
	} {
		f.Add(c)
	}
	if m, _ := filepath.Glob("../testdata/templates/*.jinja"); len(m) > 0 {
		for _, p := range m {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(string(b))
			}
		}
	}
	vars := map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "<think>x</think>y"}},
		"x":        map[string]any{"y": []any{1, "a", nil}},
		"s":        "héllo",
		"tools":    nil,
	}
	defer func(old int) { maxSteps = old }(maxSteps)
	maxSteps = 100000 // keep each input fast; the limit itself is tested elsewhere
	f.Fuzz(func(t *testing.T, src string) {
		start := time.Now()
		tmpl, err := Parse(src)
		if err == nil {
			_, _ = tmpl.Render(vars)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}
