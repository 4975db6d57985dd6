package sample

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// callPieces is a small vocabulary that can spell Hermes and XML calls of
// two tools, thinking, and some distractions.
var callPieces = []string{"<eos>", "<tool_call>", "\n", "<", "tool", "_call", ">", `{"name": "`, `{"`, "name", `": "`,
	"get_weather", "get", "_weather", "read_file", `", "arguments": `, `"`, "city", `":`, " ", "Paris", "}", "{", "</tool_call>",
	"}\n</tool_call>", "hello", "</think>", "</", "think", "<function=", "get_weather>\n", "read_file>\n", "path", "x", ",", "42", "Hi"}

func callVocab() *Vocab {
	return NewVocab(len(callPieces), func(id int32) []byte { return []byte(callPieces[id]) }, func(id int32) bool { return id != 0 }, []int32{0})
}

func hermesChoice(name, schema string, t *testing.T) CallChoice {
	var s *Schema = AnyJSONObject()
	if schema != "" {
		s = mustSchema(t, schema)
	}
	return CallChoice{Prefix: `<tool_call>` + "\n" + `{"name": "` + name + `", "arguments": `, Args: s, Suffix: "}\n</tool_call>"}
}

// TestCallConstraintWalks samples random allowed tokens under the mask and
// checks that every finished answer is a well-formed call of an offered
// tool whose arguments match its schema; with thinking, free text first.
func TestCallConstraintWalks(t *testing.T) {
	weather := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	cases := []struct {
		name     string
		choices  []CallChoice
		thinking bool
		check    func(t *testing.T, answer string)
	}{
		{"hermes named", []CallChoice{hermesChoice("get_weather", weather, t)}, false, func(t *testing.T, a string) {
			checkHermes(t, a, map[string]bool{"get_weather": true})
		}},
		{"hermes any", []CallChoice{hermesChoice("get_weather", weather, t), hermesChoice("read_file", "", t)}, false, func(t *testing.T, a string) {
			checkHermes(t, a, map[string]bool{"get_weather": true, "read_file": true})
		}},
		{"hermes after thinking", []CallChoice{hermesChoice("get_weather", weather, t)}, true, func(t *testing.T, a string) {
			i := strings.Index(a, "</think>")
			if i < 0 {
				t.Fatalf("%q: no </think>", a)
			}
			checkHermes(t, strings.TrimLeft(a[i+len("</think>"):], " \n"), map[string]bool{"get_weather": true})
		}},
		{"xml named", []CallChoice{{Prefix: "<tool_call>\n<function=get_weather>\n"}}, false, func(t *testing.T, a string) {
			if !strings.HasPrefix(a, "<tool_call>\n<function=get_weather>\n") {
				t.Fatalf("%q does not begin with the call", a)
			}
		}},
	}
	v := callVocab()
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ended := 0
			for walk := range 200 {
				c, err := NewCallConstraint(v, tc.choices, tc.thinking)
				if err != nil {
					t.Fatal(err)
				}
				var text strings.Builder
				for step := 0; step < 80; step++ {
					lg := make([]float32, len(callPieces))
					c.Mask(lg)
					var allowed []int32
					for id, l := range lg {
						if !math.IsInf(float64(l), -1) {
							allowed = append(allowed, int32(id))
						}
					}
					if len(allowed) == 0 {
						t.Fatalf("walk %d: nothing allowed after %q", walk, text.String())
					}
					id := allowed[r.IntN(len(allowed))]
					if step > 30 && c.Complete() {
						id = 0
					}
					if err := c.Accept(id); err != nil {
						t.Fatal(err)
					}
					if id == 0 {
						break
					}
					text.WriteString(callPieces[id])
				}
				if c.Complete() {
					ended++
					tc.check(t, text.String())
				}
			}
			if ended < 20 {
				t.Errorf("only %d of 200 walks completed a call", ended)
			}
		})
	}
}

func checkHermes(t *testing.T, a string, names map[string]bool) {
	t.Helper()
	body, ok := strings.CutPrefix(a, "<tool_call>\n")
	body, ok2 := strings.CutSuffix(body, "\n</tool_call>")
	var call struct {
		Name      string
		Arguments map[string]any
	}
	if !ok || !ok2 || json.Unmarshal([]byte(body), &call) != nil || !names[call.Name] || call.Arguments == nil {
		t.Fatalf("%q is not a Hermes call of %v", a, names)
	}
	if call.Name == "get_weather" {
		if _, ok := call.Arguments["city"].(string); !ok || len(call.Arguments) != 1 {
			t.Fatalf("%q: arguments do not match the schema", a)
		}
	}
}

func TestCallConstraintRejects(t *testing.T) {
	v := callVocab()
	for _, tc := range []struct {
		name    string
		choices []CallChoice
	}{
		{"none", nil},
		{"empty prefix", []CallChoice{{Prefix: ""}}},
		{"prefix of another", []CallChoice{{Prefix: "<function=read>"}, {Prefix: "<function=read>x"}}},
	} {
		if _, err := NewCallConstraint(v, tc.choices, false); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	hello := int32(-1)
	for id, p := range callPieces {
		if p == "hello" {
			hello = int32(id)
		}
	}
	c, _ := NewCallConstraint(v, []CallChoice{{Prefix: "<tool_call>"}}, false)
	if err := c.Accept(hello); err == nil {
		t.Error("text before the call was accepted")
	}
}
