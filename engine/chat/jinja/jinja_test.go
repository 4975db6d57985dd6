package jinja

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

type oracleCase struct {
	Name     string         `json:"name"`
	Template string         `json:"template"`
	Vars     map[string]any `json:"vars"`
	Out      *string        `json:"out"`
	Error    string         `json:"error"`
}

// loadVars decodes vars keeping JSON key order (the Python oracle saw dicts
// in that order) and integer/float distinction.
func loadCases(t *testing.T) []oracleCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatalf("read oracle cases (generate with scripts/chat_jinja_cases.py): %v", err)
	}
	var cases []struct {
		oracleCase
		RawVars json.RawMessage `json:"vars"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	out := make([]oracleCase, len(cases))
	for i, c := range cases {
		out[i] = c.oracleCase
		v, err := DecodeJSON(c.RawVars)
		if err != nil {
			t.Fatalf("%s: vars: %v", c.Name, err)
		}
		d := v.(*Dict)
		out[i].Vars = map[string]any{}
		for _, k := range d.keys {
			out[i].Vars[k.(string)] = d.m[k]
		}
	}
	return out
}

// TestOracleCases renders every case jinja2 (configured as transformers
// configures it) rendered, and requires byte-identical output, or an error
// where jinja2 raised one.
func TestOracleCases(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			tmpl, err := Parse(c.Template)
			parseErr := err != nil
			var got string
			if err == nil {
				got, err = tmpl.Render(c.Vars)
			}
			if c.Out == nil {
				if err == nil {
					t.Fatalf("template %q: want an error like jinja2's %q, rendered %q", c.Template, c.Error, got)
				}
				// jinja2 fails when compiling exactly where Parse must fail
				compileErr := strings.HasPrefix(c.Error, "TemplateSyntaxError") || strings.HasPrefix(c.Error, "TemplateAssertionError")
				if compileErr != parseErr {
					t.Fatalf("template %q: jinja2 failed compiling: %v, Parse failed: %v (%v)", c.Template, compileErr, parseErr, err)
				}
				t.Logf("jinja2: %s\nours:   %v", c.Error, err)
				return
			}
			if err != nil {
				t.Fatalf("template %q: unexpected error: %v", c.Template, err)
			}
			if got != *c.Out {
				t.Fatalf("template %q:\n got %q\nwant %q", c.Template, got, *c.Out)
			}
		})
	}
}

func render(t *testing.T, src string, vars map[string]any) (string, error) {
	t.Helper()
	tmpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	return tmpl.Render(vars)
}

// TestErrorMessages checks that failures name the line and the problem.
func TestErrorMessages(t *testing.T) {
	cases := []struct {
		name, src string
		vars      map[string]any
		want      []string // substrings of the one error message
	}{
		{"unclosed if", "a\n{% if x %}\nb", nil, []string{"expected {% elif %} or {% else %} or {% endif %}", "opened on line 2"}},
		{"unclosed for", "{% for m in messages %}{{ m }}", nil, []string{"{% endfor %}", "line 1"}},
		{"unknown filter", "x\n\n{{ y | frobnicate }}", nil, []string{"line 3", "no filter named 'frobnicate'"}},
		{"unknown test", "{{ y is frob }}", nil, []string{"no test named 'frob'"}},
		{"unknown filter reached", "x\n{% if true %}\n{{ y | from_jsonx }}{% endif %}", nil, []string{"line 3", "no filter named 'from_jsonx'"}},
		{"recursive loop unbounded", "{% for x in [1] recursive %}\n{{ loop([x]) }}{% endfor %}", nil, []string{"line 1", "recursive loop deeper than 200 levels"}},
		{"loop not recursive", "{% for x in [1] %}{{ loop([x]) }}{% endfor %}", nil, []string{"line 1", "'recursive' marker"}},
		{"unknown test reached", "{{ 1 if y is frob }}", nil, []string{"line 1", "no test named 'frob'"}},
		{"raise_exception", "ok\n{{ raise_exception('Conversation roles must alternate user/assistant') }}", nil,
			[]string{"line 2", "template raised an exception: Conversation roles must alternate user/assistant"}},
		{"undefined attribute", "{{ msg.content.x }}", map[string]any{"msg": map[string]any{}}, []string{"line 1", "no attribute 'content'"}},
		{"type error", "{{\n'a' + 1 }}", nil, []string{"line 2", `can only concatenate str (not "int") to str`}},
		{"stray end", "{% endfor %}", nil, []string{"unexpected {% endfor %}"}},
		{"unsupported statement", "{% include 'x' %}", nil, []string{"unsupported statement {% include %}"}},
		{"unclosed output", "{{ x", nil, []string{"never closed with }}"}},
		{"bad token", "{{ x $ y }}", nil, []string{"unexpected character '$'"}},
		{"not callable", "{{ 'a'() }}", nil, []string{"'str' object is not callable"}},
		{"break outside loop", "{% break %}", nil, []string{"outside a loop"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := render(t, c.src, c.vars)
			if err == nil {
				t.Fatalf("no error for %q", c.src)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Count(err.Error(), "jinja:") != 1 {
				t.Errorf("error should be one message, got %q", err)
			}
		})
	}
}

func TestRaiseExceptionType(t *testing.T) {
	_, err := render(t, "{{ raise_exception('boom') }}", nil)
	var ee *ExceptionError
	if !errors.As(err, &ee) || ee.Msg != "boom" || ee.Line != 1 {
		t.Fatalf("want *ExceptionError{Line:1, Msg:boom}, got %#v", err)
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl, err := Parse(`{{ strftime_now("%d %b %Y") }}|{{ strftime_now("%Y-%m-%d %H:%M:%S %A %B %-d %j %p %I %%") }}`)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Now = func() time.Time { return time.Date(2024, 7, 5, 15, 4, 9, 0, time.UTC) }
	got, err := tmpl.Render(nil)
	if err != nil {
		t.Fatal(err)
	}
	// expected strings computed with Python's datetime(2024,7,5,15,4,9).strftime
	want := "05 Jul 2024|2024-07-05 15:04:09 Friday July 5 187 PM 03 %"
	if got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestFromGoSortsMapKeys(t *testing.T) {
	// Go maps are unordered: renders must not depend on iteration order.
	vars := map[string]any{"d": map[string]any{"b": 1, "a": 2, "c": []string{"x"}}}
	for i := 0; i < 20; i++ {
		got, err := render(t, "{{ d|tojson }}{% for k in d %}{{ k }}{% endfor %}", vars)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"a": 2, "b": 1, "c": ["x"]}abc`; got != want {
			t.Fatalf("got %q want %q", got, want)
		}
	}
}

func TestRunawayOutputIsAnError(t *testing.T) {
	_, err := render(t, "{% for i in range(1000) %}{{ 'x' * 1000000 }}{% endfor %}", nil)
	if err == nil || !strings.Contains(err.Error(), "output exceeds") {
		t.Fatalf("want output limit error, got %v", err)
	}
	defer func(old int) { maxSteps = old }(maxSteps)
	maxSteps = 10000
	_, err = render(t, "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", nil)
	if err == nil || !strings.Contains(err.Error(), "more than 10000 loop iterations") {
		t.Fatalf("want step limit error, got %v", err)
	}
	_, err = render(t, "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", nil)
	if err == nil || !strings.Contains(err.Error(), "recursion") {
		t.Fatalf("want recursion error, got %v", err)
	}
}

func TestPyFloatRepr(t *testing.T) {
	// expected values are Python's repr() of the same floats
	cases := map[float64]string{
		0: "0.0", 1: "1.0", -2.5: "-2.5", 0.1: "0.1", 1e16: "1e+16", 1e15: "1000000000000000.0",
		1.5e-7: "1.5e-07", 0.0001: "0.0001", 0.00001: "1e-05", 123456789.123: "123456789.123",
		1.7976931348623157e308: "1.7976931348623157e+308", 5e-324: "5e-324", 2.5e20: "2.5e+20",
	}
	for f, want := range cases {
		if got := pyFloatRepr(f); got != want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}
