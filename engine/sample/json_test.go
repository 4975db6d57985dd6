package sample

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// jsonPrefixOK is encoding/json's verdict on b as the start of a
// document: followed by a control byte, which no document may hold, the
// first error is at that byte exactly when b is a prefix of a document
// (or a whole one).
func jsonPrefixOK(b []byte) bool {
	var v any
	err := json.Unmarshal(append(append([]byte(nil), b...), 0x01), &v)
	var se *json.SyntaxError
	return errors.As(err, &se) && se.Offset == int64(len(b))+1
}

// checkAgainstEncodingJSON: the machine accepts exactly the prefixes that
// encoding/json accepts, and calls complete exactly what json.Valid does.
func checkAgainstEncodingJSON(t *testing.T, b []byte) {
	t.Helper()
	n, complete := MatchJSON(AnyJSON(), b)
	if complete != json.Valid(b) {
		t.Fatalf("%q: complete %v, json.Valid %v", b, complete, json.Valid(b))
	}
	for l := 0; l <= len(b); l++ {
		if got, want := l <= n, jsonPrefixOK(b[:l]); got != want {
			t.Fatalf("%q[:%d]: machine accepts %v (first %d bytes), encoding/json %v", b, l, got, n, want)
		}
	}
}

var jsonAlphabet = []byte(`{}[]:,"\ -+.0123456789eEtrufalsnbx` + "\t\n\x01\xff")

func randomJSONValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(7); {
	case k == 0 && depth < 4:
		m := map[string]any{}
		for range r.IntN(4) {
			m[randomString(r)] = randomJSONValue(r, depth+1)
		}
		return m
	case k == 1 && depth < 4:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = randomJSONValue(r, depth+1)
		}
		return a
	case k == 2:
		return randomString(r)
	case k == 3:
		return math.Round(r.NormFloat64()*1e6) / []float64{1, 1000, 1e9}[r.IntN(3)]
	case k == 4:
		return r.IntN(2) == 0
	case k == 5:
		return nil
	}
	return r.Int64N(1000) - 500
}

func randomString(r *rand.Rand) string {
	const chars = "ab\"\\/\n\t\u00e9\u2028 {}"
	var b strings.Builder
	for range r.IntN(6) {
		c := []rune(chars)
		b.WriteRune(c[r.IntN(len(c))])
	}
	return b.String()
}

// spaced re-indents a document at random (whitespace between tokens).
func spaced(r *rand.Rand, b []byte) []byte {
	var out []byte
	in := false
	esc := false
	for _, c := range b {
		out = append(out, c)
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && strings.IndexByte("{}[],:", c) >= 0 && r.IntN(3) == 0:
			out = append(out, " \n\t\r"[r.IntN(4)])
		}
	}
	return out
}

func TestJSONMachineAgainstEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		// Random bytes from JSON's alphabet (mostly invalid)...
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = jsonAlphabet[r.IntN(len(jsonAlphabet))]
		}
		checkAgainstEncodingJSON(t, b)
		// ...valid documents, and valid documents with one byte changed.
		doc, _ := json.Marshal(randomJSONValue(r, 0))
		doc = spaced(r, doc)
		checkAgainstEncodingJSON(t, doc)
		if len(doc) > 0 {
			doc[r.IntN(len(doc))] = jsonAlphabet[r.IntN(len(jsonAlphabet))]
			checkAgainstEncodingJSON(t, doc)
		}
	}
	for _, s := range []string{"", " ", "0", "-0", "01", "1.", "1.5e", "1e+5", "-", "tru", "true ", "nul", `"\u12"`, `"\u12ab"`, `{"a":1,}`, `[1,]`, `[]`, `{}`, `{"a" : [ ] }`, "\"\x1f\""} {
		checkAgainstEncodingJSON(t, []byte(s))
	}
}

func FuzzJSONMachine(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,"x\u00e9"],"b":null}`, `[true,false]`, `-0.1`, `"\n"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 256 {
			return
		}
		checkAgainstEncodingJSON(t, b)
	})
}

func mustSchema(t testing.TB, src string) *Schema {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(src), &m); err != nil {
		t.Fatal(err)
	}
	s, err := CompileJSONSchema(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const personSchema = `{"type":"object","properties":{
	"name":{"type":"string"},"age":{"type":"integer"},"height":{"type":"number"},
	"admin":{"type":"boolean"},"role":{"enum":["dev","ops",3]},
	"tags":{"type":"array","items":{"type":"string"}},
	"home":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},
	"none":{"type":"null"}},
	"required":["name","age"],"additionalProperties":false}`

func TestJSONSchemaMatch(t *testing.T) {
	s := mustSchema(t, personSchema)
	cases := []struct {
		doc      string
		complete bool
	}{
		{`{"name":"Ann","age":30}`, true},
		{`{ "age" : -3 , "name" : "B\"" , "tags" : [ "x" , "y" ] }`, true},
		{`{"name":"A","age":1,"height":1.5e2,"admin":true,"role":3,"home":{"city":"Oslo"},"none":null}`, true},
		{`{"name":"A","age":1,"role":"ops"}`, true},
		{`{"name":"A"}`, false},                   // age is required
		{`{"name":"A","age":1.5}`, false},         // age is an integer
		{`{"name":"A","age":1,"extra":1}`, false}, // not a property
		{`{"name":"A","age":1,"name":"B"}`, false},
		{`{"name":"A","age":1,"role":"qa"}`, false},
		{`{"name":"A","age":1,"home":{}}`, false},
		{`{"name":1,"age":1}`, false},
		{`{"name":"A","age":1,"tags":[1]}`, false},
		{`[]`, false},
	}
	for _, tc := range cases {
		n, complete := MatchJSON(s, []byte(tc.doc))
		if complete != tc.complete {
			t.Errorf("%s: complete %v (accepted %d bytes), want %v", tc.doc, complete, n, tc.complete)
		}
		if tc.complete && !json.Valid([]byte(tc.doc)) {
			t.Errorf("%s: accepted but not JSON", tc.doc)
		}
	}
	// The prefix property: every prefix of an accepted document is accepted.
	for _, tc := range cases[:4] {
		for l := range len(tc.doc) {
			if n, _ := MatchJSON(s, []byte(tc.doc[:l])); n != l {
				t.Errorf("%s: prefix %q refused at %d", tc.doc, tc.doc[:l], n)
			}
		}
	}
}

func TestJSONSchemaUnsupported(t *testing.T) {
	cases := []struct{ schema, want string }{
		{`{"type":"string","pattern":"^a","minLength":2}`, "unsupported keyword minLength, pattern at the root"},
		{`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}}`, "unsupported keyword anyOf at /properties/a"},
		{`{"$ref":"#/defs/x"}`, "unsupported keyword $ref"},
		{`{"type":["string","null"]}`, "type lists are not supported"},
		{`{"type":"object","additionalProperties":true}`, "additionalProperties (other than false)"},
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}`, `required property "b" is not in properties`},
		{`{"type":"array"}`, "an array needs an items schema"},
		{`{"type":"text"}`, `type "text" is not a JSON Schema type`},
		{`{"enum":[]}`, "enum must be a non-empty array"},
	}
	for _, tc := range cases {
		var m map[string]any
		json.Unmarshal([]byte(tc.schema), &m)
		_, err := CompileJSONSchema(m)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.schema, err, tc.want)
		}
	}
}

// TestJSONConstraintMask: over a small vocabulary, the mask allows exactly
// the tokens whose bytes keep the document valid (checked token by token
// with MatchJSON), and end-of-generation only once it is complete; random
// walks through the mask always end in a document of the schema.
func TestJSONConstraintMask(t *testing.T) {
	pieces := []string{"{", "}", "[", "]", `"`, `"name`, `":`, `":"`, "name", "age", `"age":`, ",", ":", " ", "\n  ", "1", "12", "-", ".5", "a", "Ann", `\"`, "true", "tr", "ue", "null", `"}`, "0", "\x01", "<eos>", `"role":"`, "dev", "ops"}
	const eos = 29
	v := NewVocab(len(pieces), func(id int32) []byte { return []byte(pieces[id]) }, func(id int32) bool { return id != eos }, []int32{eos})
	s := mustSchema(t, `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"role":{"enum":["dev","ops"]}},"required":["name"]}`)
	r := rand.New(rand.NewPCG(3, 4))
	for walk := range 300 {
		c := NewJSONConstraint(v, s)
		var text []byte
		for step := 0; ; step++ {
			lg := make([]float32, len(pieces))
			c.Mask(lg)
			var allowed []int32
			want := make([]bool, len(pieces))
			anyText := false
			for id := range int32(len(pieces)) {
				if id != eos {
					cand := append(append([]byte(nil), text...), pieces[id]...)
					n, _ := matchJSON(s, cand, maxJSONWhitespace)
					want[id] = n == len(cand) && !c.st.ended()
					anyText = anyText || want[id]
				}
			}
			_, complete := MatchJSON(s, text)
			want[eos] = complete || !anyText // nothing fits: the answer may end
			for id := range int32(len(pieces)) {
				ok := !math.IsInf(float64(lg[id]), -1)
				want := want[id]
				if ok != want {
					t.Fatalf("walk %d after %q: token %q allowed %v, want %v", walk, text, pieces[id], ok, want)
				}
				if ok {
					allowed = append(allowed, id)
				}
			}
			if len(allowed) == 0 {
				t.Fatalf("walk %d: nothing allowed after %q", walk, text)
			}
			id := allowed[r.IntN(len(allowed))]
			if step > 40 && c.Complete() {
				id = eos
			}
			if err := c.Accept(id); err != nil {
				t.Fatal(err)
			}
			if id == eos {
				break
			}
			text = append(text, pieces[id]...)
			if step > 200 {
				t.Fatalf("walk %d: no end after %q", walk, text)
			}
		}
		if !c.Complete() {
			continue // the vocabulary ran out of ways to go on (a key it cannot spell)
		}
		var m map[string]any
		if err := json.Unmarshal(text, &m); err != nil || m["name"] == nil {
			t.Fatalf("walk %d: %q is not a document of the schema: %v", walk, text, err)
		}
	}
}

// BenchmarkJSONMask masks a 150K-token vocabulary of random byte strings
// (a Qwen-sized vocabulary) inside a JSON string value, the common state.
func BenchmarkJSONMask(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 150000
	pieces := make([][]byte, n)
	for i := range pieces {
		p := make([]byte, 1+r.IntN(8))
		for j := range p {
			p[j] = byte(' ' + r.IntN(95))
		}
		pieces[i] = p
	}
	v := NewVocab(n, func(id int32) []byte { return pieces[id] }, func(int32) bool { return true }, []int32{0})
	c := NewJSONConstraint(v, mustSchema(b, `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`))
	for _, ch := range []byte(`{"answer": "some text`) {
		st, ok := c.st.step(ch, maxJSONWhitespace)
		if !ok {
			b.Fatal("prefix refused")
		}
		c.st = st
	}
	lg := make([]float32, n)
	b.ResetTimer()
	for range b.N {
		c.Mask(lg)
	}
}
