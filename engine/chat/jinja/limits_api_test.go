package jinja

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLimitsAreConfigurable: Template.Limits sets the budget, step count
// and deadline of each Render, and a limit error is a *LimitError with the
// line where it surfaced.
func TestLimitsAreConfigurable(t *testing.T) {
	cases := []struct {
		name   string
		src    string
		limits Limits
		want   string // "" renders
	}{
		{"default budget fits", `{{ "x" * 1000000 }}`, Limits{}, ""},
		{"small budget", `{{ "x" * 1000000 }}`, Limits{MaxBytes: 1 << 20}, "exceeds the 1 MiB budget"},
		{"output counts", strings.Repeat(`{{ "x" }}`, 100), Limits{MaxBytes: 50}, "exceeds the 50 bytes budget for what a render may build (writing 1 bytes of output)"},
		{"steps", `{% for i in range(100) %}{% endfor %}`, Limits{MaxSteps: 10}, "more than 10 loop iterations"},
		{"from_json budget", `{{ ("[" ~ "[]," * 100000 ~ "[]]")|from_json|length }}`, Limits{MaxBytes: 1 << 20}, "exceeds the 1 MiB budget for what a render may build (from_json of a string of 300004 bytes)"},
		{"from_json steps", `{{ "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]"|from_json }}`, Limits{MaxSteps: 10}, "more than 10 loop iterations"},
		{"from_json fits", `{{ ("[" ~ "[]," * 1000 ~ "[]]")|from_json|length }}`, Limits{MaxBytes: 1 << 20}, ""},
		{"batch padding", `{{ [1]|batch(10000000000, 0) }}`, Limits{}, "exceeds the 64 MiB budget for what a render may build (batch(10000000000) of 1 items)"},
		{"recursive loop steps", `{% for x in [1, 2] recursive %}{{ loop([x, x]) if loop.depth < 30 }}{% endfor %}`, Limits{MaxSteps: 1000}, "more than 1000 loop iterations"},
		{"deadline", "{% set s = 'x' * 10000000 %}{% for i in range(1000000) %}{{ s.count('y') }}{% endfor %}", Limits{Timeout: 20 * time.Millisecond}, "takes longer than 20ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := Parse(c.src)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.Limits = c.limits
			_, err = tmpl.Render(nil)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var le *LimitError
			if !errors.As(err, &le) || le.Line != 1 {
				t.Fatalf("want a *LimitError on line 1, got %#v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}
