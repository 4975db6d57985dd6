package sample

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Constrained decoding for JSON answers (OpenAI's response_format): a
// byte-level recognizer of JSON, optionally restricted by a JSON schema
// subset, drives a token mask. At each step the tokens whose bytes keep
// the text a prefix of an accepted document stay; the others get -Inf.
// The recognizer is a pushdown machine whose stack is an immutable linked
// list, so a state is a small value that is copied, never mutated: the
// mask walks the vocabulary in byte order and reuses the state of each
// shared prefix.

// Schema is a compiled JSON schema node (or "any JSON value").
type Schema struct {
	kind     schemaKind
	props    []schemaProp // kindObject: in declaration order
	anyProps bool         // kindObject: any keys, any values (json_object)
	required uint64       // kindObject: bits of props
	items    *Schema      // kindArray
	lits     []string     // literal kinds: the accepted JSON texts, sorted
}

type schemaProp struct {
	key string // the name as a JSON string, quotes included
	s   *Schema
}

type schemaKind uint8

const (
	kindAny schemaKind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindInteger
	kindLiteral // boolean, null, enum
)

var (
	anyValue  = &Schema{kind: kindAny}
	anyObject = &Schema{kind: kindObject, anyProps: true}
	anyArray  = &Schema{kind: kindArray, items: anyValue}
	anyNumber = &Schema{kind: kindNumber}
	wordLits  = []string{"false", "null", "true"}
)

// AnyJSON accepts any JSON document.
func AnyJSON() *Schema { return anyValue }

// AnyJSONObject accepts any JSON object (response_format json_object).
func AnyJSONObject() *Schema { return anyObject }

// maxSchemaProps bounds an object's properties (a bit set per object).
const maxSchemaProps = 64

// maxSchemaDepth bounds nesting while compiling.
const maxSchemaDepth = 32

// schemaIgnored are annotations that do not change what is valid.
var schemaIgnored = map[string]bool{"title": true, "description": true, "$schema": true, "$id": true,
	"default": true, "examples": true, "$comment": true, "strict": true}

// UnsupportedSchemaError names the schema keywords the constraint cannot
// enforce.
type UnsupportedSchemaError struct {
	Path     string   // where, as a JSON pointer ("" for the root)
	Keywords []string // sorted
	Reason   string
}

func (e *UnsupportedSchemaError) Error() string {
	at := e.Path
	if at == "" {
		at = "the root"
	}
	if len(e.Keywords) > 0 {
		return fmt.Sprintf("json_schema: unsupported keyword %s at %s (supported: type object/array/string/number/integer/boolean/null, properties, required, additionalProperties: false, items, enum)",
			strings.Join(e.Keywords, ", "), at)
	}
	return fmt.Sprintf("json_schema: %s at %s", e.Reason, at)
}

// CompileJSONSchema compiles the supported subset of JSON Schema: type
// object (properties, required, additionalProperties false), array
// (items), string, number, integer, boolean, null, and enum. Properties
// not listed are never generated. Anything else is an
// *UnsupportedSchemaError naming the keywords.
func CompileJSONSchema(schema map[string]any) (*Schema, error) {
	return compileSchema(schema, "", 0)
}

func compileSchema(m map[string]any, path string, depth int) (*Schema, error) {
	if depth > maxSchemaDepth {
		return nil, &UnsupportedSchemaError{Path: path, Reason: fmt.Sprintf("nested deeper than %d levels", maxSchemaDepth)}
	}
	var bad []string
	for k := range m {
		switch k {
		case "type", "properties", "required", "items", "enum", "additionalProperties":
		default:
			if !schemaIgnored[k] {
				bad = append(bad, k)
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, &UnsupportedSchemaError{Path: path, Keywords: bad}
	}
	if e, ok := m["enum"]; ok {
		vals, ok := e.([]any)
		if !ok || len(vals) == 0 {
			return nil, &UnsupportedSchemaError{Path: path + "/enum", Reason: "enum must be a non-empty array"}
		}
		s := &Schema{kind: kindLiteral}
		for _, v := range vals {
			switch v.(type) {
			case string, float64, bool, nil, json.Number:
			default:
				return nil, &UnsupportedSchemaError{Path: path + "/enum", Reason: "enum values must be strings, numbers, booleans or null"}
			}
			b, err := json.Marshal(v)
			if err != nil {
				return nil, &UnsupportedSchemaError{Path: path + "/enum", Reason: err.Error()}
			}
			s.lits = append(s.lits, string(b))
		}
		slices.Sort(s.lits)
		s.lits = slices.Compact(s.lits)
		return s, nil
	}
	t, ok := m["type"].(string)
	if !ok {
		if _, has := m["type"]; has {
			return nil, &UnsupportedSchemaError{Path: path + "/type", Reason: "type must be one string (type lists are not supported)"}
		}
		return nil, &UnsupportedSchemaError{Path: path, Reason: "a type or an enum is required"}
	}
	only := func(kind string, allowed ...string) error {
		for _, k := range []string{"properties", "required", "items", "additionalProperties"} {
			if _, has := m[k]; has && !slices.Contains(allowed, k) {
				return &UnsupportedSchemaError{Path: path + "/" + k, Reason: k + " is not allowed with type " + kind}
			}
		}
		return nil
	}
	switch t {
	case "object":
		if err := only(t, "properties", "required", "additionalProperties"); err != nil {
			return nil, err
		}
		if ap, has := m["additionalProperties"]; has && ap != false {
			return nil, &UnsupportedSchemaError{Path: path + "/additionalProperties", Keywords: []string{"additionalProperties (other than false)"}}
		}
		props, _ := m["properties"].(map[string]any)
		if _, has := m["properties"]; has && props == nil {
			return nil, &UnsupportedSchemaError{Path: path + "/properties", Reason: "properties must be an object"}
		}
		if len(props) > maxSchemaProps {
			return nil, &UnsupportedSchemaError{Path: path + "/properties", Reason: fmt.Sprintf("%d properties; at most %d", len(props), maxSchemaProps)}
		}
		s := &Schema{kind: kindObject}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			pm, ok := props[k].(map[string]any)
			if !ok {
				return nil, &UnsupportedSchemaError{Path: path + "/properties/" + k, Reason: "a property's schema must be an object"}
			}
			ps, err := compileSchema(pm, path+"/properties/"+k, depth+1)
			if err != nil {
				return nil, err
			}
			key, _ := json.Marshal(k)
			s.props = append(s.props, schemaProp{key: string(key), s: ps})
		}
		if r, has := m["required"]; has {
			list, ok := r.([]any)
			if !ok {
				return nil, &UnsupportedSchemaError{Path: path + "/required", Reason: "required must be an array of property names"}
			}
			for _, v := range list {
				name, _ := v.(string)
				i := slices.Index(names, name)
				if i < 0 {
					return nil, &UnsupportedSchemaError{Path: path + "/required", Reason: fmt.Sprintf("required property %q is not in properties", name)}
				}
				s.required |= 1 << i
			}
		}
		return s, nil
	case "array":
		if err := only(t, "items"); err != nil {
			return nil, err
		}
		im, ok := m["items"].(map[string]any)
		if !ok {
			return nil, &UnsupportedSchemaError{Path: path + "/items", Reason: "an array needs an items schema (an object)"}
		}
		is, err := compileSchema(im, path+"/items", depth+1)
		if err != nil {
			return nil, err
		}
		return &Schema{kind: kindArray, items: is}, nil
	}
	if err := only(t); err != nil {
		return nil, err
	}
	switch t {
	case "string":
		return &Schema{kind: kindString}, nil
	case "number":
		return &Schema{kind: kindNumber}, nil
	case "integer":
		return &Schema{kind: kindInteger}, nil
	case "boolean":
		return &Schema{kind: kindLiteral, lits: []string{"false", "true"}}, nil
	case "null":
		return &Schema{kind: kindLiteral, lits: []string{"null"}}, nil
	}
	return nil, &UnsupportedSchemaError{Path: path + "/type", Reason: fmt.Sprintf("type %q is not a JSON Schema type", t)}
}

// --- the recognizer ---

type jsonMode uint8

const (
	modeValue    jsonMode = iota // before a value of want
	modeString                   // inside a string (aux: escape state)
	modeNumber                   // inside a number (aux: phase)
	modeLiteral                  // matching lits[lo:hi] at pos
	modeAfter                    // a value ended
	modeObjStart                 // after '{'
	modeObjKey                   // after ',' in an object
	modeColon                    // after a key
	modeArrStart                 // after '['
)

// frame is an open object or array; frames are never modified.
type frame struct {
	parent *frame
	s      *Schema
	used   uint64  // object: properties written
	cur    *Schema // object: the schema of the value after the key
}

// jsonState is the recognizer after some bytes; the zero value is not
// valid (see newJSONState).
type jsonState struct {
	top    *frame
	want   *Schema // modeValue; modeNumber: integer or not
	lits   []string
	lo, hi int
	pos    int
	aux    int8
	mode   jsonMode
	isKey  bool
	ws     int // consecutive structural whitespace bytes; in a number, its length
}

func newJSONState(root *Schema) jsonState { return jsonState{mode: modeValue, want: root} }

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// step consumes byte c; false when no accepted document has the bytes so
// far followed by c. maxWS > 0 sets generation limits that JSON does not
// have: runs of whitespace between tokens of the document at most maxWS
// bytes, numbers at most maxNumberLen (a model cannot spend its tokens on
// indentation or digits forever).
func (st jsonState) step(c byte, maxWS int) (jsonState, bool) {
	for {
		switch st.mode {
		case modeValue, modeAfter, modeObjStart, modeObjKey, modeColon, modeArrStart:
			if isWS(c) {
				st.ws++
				return st, maxWS <= 0 || st.ws <= maxWS
			}
			st.ws = 0
		}
		switch st.mode {
		case modeValue:
			return st.startValue(c)
		case modeString:
			switch {
			case st.aux == 0:
				switch {
				case c == '"':
					return st.valueDone(), true
				case c == '\\':
					st.aux = 1
				case c < 0x20:
					return st, false
				}
			case st.aux == 1:
				switch c {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					st.aux = 0
				case 'u':
					st.aux = 2
				default:
					return st, false
				}
			default: // 2..5: hex digits of \uXXXX
				if !isHex(c) {
					return st, false
				}
				if st.aux++; st.aux == 6 {
					st.aux = 0
				}
			}
			return st, true
		case modeNumber:
			if next, ok := numberStep(st.aux, c, st.want.kind == kindInteger); ok && (maxWS <= 0 || st.ws < maxNumberLen) {
				st.aux = next
				st.ws++
				return st, true
			}
			if !numberDone(st.aux) {
				return st, false
			}
			st.ws = 0
			st = st.valueDone()
			continue // c follows the number
		case modeLiteral:
			lo, hi := st.lo, st.hi
			for lo < hi && (len(st.lits[lo]) <= st.pos || st.lits[lo][st.pos] < c) {
				lo++
			}
			h := lo
			for h < hi && len(st.lits[h]) > st.pos && st.lits[h][st.pos] == c {
				h++
			}
			if lo < h {
				st.lo, st.hi = lo, h
				st.pos++
				if h-lo == 1 && len(st.lits[lo]) == st.pos {
					return st.valueDone(), true
				}
				return st, true
			}
			if len(st.lits[st.lo]) != st.pos { // sorted: a complete one comes first
				return st, false
			}
			st = st.valueDone()
			continue
		case modeAfter:
			f := st.top
			switch {
			case f == nil:
				return st, false // the document is complete: only whitespace
			case c == ',' && f.s.kind == kindArray:
				st.mode, st.want = modeValue, f.s.items
				return st, true
			case c == ']' && f.s.kind == kindArray:
				return st.pop(), true
			case c == ',' && f.s.kind == kindObject && (f.s.anyProps || f.used != 1<<len(f.s.props)-1):
				st.mode = modeObjKey
				return st, true
			case c == '}' && f.s.kind == kindObject && f.used&f.s.required == f.s.required:
				return st.pop(), true
			}
			return st, false
		case modeObjStart, modeObjKey:
			f := st.top
			switch {
			case c == '"':
				return st.startKey()
			case c == '}' && st.mode == modeObjStart && f.s.required == 0:
				return st.pop(), true
			}
			return st, false
		case modeColon:
			if c != ':' {
				return st, false
			}
			st.mode, st.want = modeValue, st.top.cur
			return st, true
		case modeArrStart:
			if c == ']' {
				return st.pop(), true
			}
			st.mode, st.want = modeValue, st.top.s.items
			continue
		}
		return st, false
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Number phases: 1 after '-', 2 after a leading 0, 3 in the integer
// digits, 4 after '.', 5 in the fraction, 6 after e/E, 7 after its sign,
// 8 in the exponent. 2, 3, 5 and 8 end a number.
func numberStep(ph int8, c byte, integer bool) (int8, bool) {
	digit := c >= '0' && c <= '9'
	switch ph {
	case 0:
		switch {
		case c == '-':
			return 1, true
		case c == '0':
			return 2, true
		case digit:
			return 3, true
		}
	case 1:
		switch {
		case c == '0':
			return 2, true
		case digit:
			return 3, true
		}
	case 2, 3:
		switch {
		case digit && ph == 3:
			return 3, true
		case c == '.' && !integer:
			return 4, true
		case (c == 'e' || c == 'E') && !integer:
			return 6, true
		}
	case 4, 5:
		switch {
		case digit:
			return 5, true
		case (c == 'e' || c == 'E') && ph == 5:
			return 6, true
		}
	case 6:
		switch {
		case c == '+' || c == '-':
			return 7, true
		case digit:
			return 8, true
		}
	case 7, 8:
		if digit {
			return 8, true
		}
	}
	return ph, false
}

func numberDone(ph int8) bool { return ph == 2 || ph == 3 || ph == 5 || ph == 8 }

// startValue begins a value of st.want with its first byte c.
func (st jsonState) startValue(c byte) (jsonState, bool) {
	w := st.want
	st.isKey = false
	switch {
	case c == '{' && (w.kind == kindObject || w.kind == kindAny):
		s := w
		if w.kind == kindAny {
			s = anyObject
		}
		st.top = &frame{parent: st.top, s: s}
		st.mode = modeObjStart
		return st, true
	case c == '[' && (w.kind == kindArray || w.kind == kindAny):
		s := w
		if w.kind == kindAny {
			s = anyArray
		}
		st.top = &frame{parent: st.top, s: s}
		st.mode = modeArrStart
		return st, true
	case c == '"' && (w.kind == kindString || w.kind == kindAny):
		st.mode, st.aux = modeString, 0
		return st, true
	case (c == '-' || c >= '0' && c <= '9') && (w.kind == kindNumber || w.kind == kindInteger || w.kind == kindAny):
		if w.kind == kindAny {
			st.want = anyNumber
		}
		st.mode, st.aux = modeNumber, 0
		ph, _ := numberStep(0, c, st.want.kind == kindInteger)
		st.aux, st.ws = ph, 1
		return st, true
	case w.kind == kindLiteral || w.kind == kindAny && (c == 't' || c == 'f' || c == 'n'):
		lits := w.lits
		if w.kind == kindAny {
			lits = wordLits
		}
		st.mode, st.lits, st.lo, st.hi, st.pos = modeLiteral, lits, 0, len(lits), 0
		return st.step(c, 0)
	}
	return st, false
}

// startKey begins an object key (its opening quote).
func (st jsonState) startKey() (jsonState, bool) {
	f := st.top
	st.isKey = true
	if f.s.anyProps {
		st.mode, st.aux = modeString, 0
		return st, true
	}
	var keys []string
	for i, p := range f.s.props {
		if f.used&(1<<i) == 0 {
			keys = append(keys, p.key)
		}
	}
	if len(keys) == 0 {
		return st, false
	}
	slices.Sort(keys)
	st.mode, st.lits, st.lo, st.hi, st.pos = modeLiteral, keys, 0, len(keys), 0
	return st.step('"', 0)
}

// valueDone ends a string, number or literal: a key goes on to its colon.
func (st jsonState) valueDone() jsonState {
	if !st.isKey {
		st.mode = modeAfter
		return st
	}
	st.isKey = false
	f := *st.top
	f.cur = anyValue
	if !f.s.anyProps {
		key := st.lits[st.lo]
		for i, p := range f.s.props {
			if p.key == key {
				f.used |= 1 << i
				f.cur = p.s
				break
			}
		}
	}
	st.top = &f
	st.mode = modeColon
	return st
}

// pop closes the open container, which is a value that ended.
func (st jsonState) pop() jsonState {
	st.top = st.top.parent
	st.mode = modeAfter
	return st
}

// complete reports whether the bytes so far are a whole document.
func (st jsonState) complete() bool {
	if st.top != nil {
		return false
	}
	switch st.mode {
	case modeAfter:
		return true
	case modeNumber:
		return numberDone(st.aux)
	case modeLiteral:
		return len(st.lits[st.lo]) == st.pos
	}
	return false
}

// ended reports whether the document is complete and nothing but
// whitespace may follow (a number or literal at the top could go on).
func (st jsonState) ended() bool { return st.top == nil && st.mode == modeAfter }

// MatchJSON feeds b to a recognizer for s: it returns how many bytes are
// accepted (len(b) when all are) and whether b is a complete document.
func MatchJSON(s *Schema, b []byte) (accepted int, complete bool) { return matchJSON(s, b, 0) }

func matchJSON(s *Schema, b []byte, maxWS int) (accepted int, complete bool) {
	st := newJSONState(s)
	for i, c := range b {
		var ok bool
		if st, ok = st.step(c, maxWS); !ok {
			return i, false
		}
	}
	return len(b), st.complete()
}

// --- the token mask ---

// Vocab is a tokenizer's vocabulary prepared for masking: the byte
// strings of the tokens that may appear in a JSON answer, sorted, with
// the length each shares with the one before it.
type Vocab struct {
	order  []int32
	lcp    []int
	bytes  [][]byte
	plain  []bool // by id: no quote, backslash or control byte (string content as it is)
	noTag  []bool // by id: no '<' (cannot start or go on with a tag)
	eog    []int32
	maxLen int
}

// NewVocab prepares n tokens: bytesOf gives a token's text and text
// tells which tokens are text (control and other special tokens are never
// allowed); eog are the end-of-generation tokens, allowed once the
// document is complete.
func NewVocab(n int, bytesOf func(id int32) []byte, text func(id int32) bool, eog []int32) *Vocab {
	v := &Vocab{bytes: make([][]byte, n), plain: make([]bool, n), noTag: make([]bool, n), eog: slices.Clone(eog)}
	for id := range int32(n) {
		if b := bytesOf(id); len(b) > 0 && text(id) && !slices.Contains(eog, id) {
			v.bytes[id] = b
			v.plain[id] = !slices.ContainsFunc(b, func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 })
			v.noTag[id] = bytes.IndexByte(b, '<') < 0
			v.order = append(v.order, id)
			v.maxLen = max(v.maxLen, len(b))
		}
	}
	slices.SortFunc(v.order, func(a, b int32) int { return bytes.Compare(v.bytes[a], v.bytes[b]) })
	v.lcp = make([]int, len(v.order))
	for i := 1; i < len(v.order); i++ {
		a, b := v.bytes[v.order[i-1]], v.bytes[v.order[i]]
		k := 0
		for k < len(a) && k < len(b) && a[k] == b[k] {
			k++
		}
		v.lcp[i] = k
	}
	return v
}

// maxJSONWhitespace bounds runs of whitespace in a generated document, so
// a model cannot spend its tokens on indentation forever.
const maxJSONWhitespace = 32

// maxNumberLen bounds a generated number's bytes (see step).
const maxNumberLen = 20

// JSONConstraint masks logits so that the sampled text is a document of
// its schema, then allows only end-of-generation tokens.
type JSONConstraint struct {
	v      *Vocab
	st     jsonState
	states []jsonState
	done   bool // an end-of-generation token was accepted
}

// NewJSONConstraint starts a constraint for one answer.
func NewJSONConstraint(v *Vocab, s *Schema) *JSONConstraint {
	return &JSONConstraint{v: v, st: newJSONState(s), states: make([]jsonState, v.maxLen+1)}
}

// Complete reports whether the text so far is a whole document.
func (c *JSONConstraint) Complete() bool { return c.st.complete() }

// Mask sets every token that cannot continue the document to -Inf in lg
// (len(lg) is the vocabulary size). Once the document has ended only the
// end-of-generation tokens remain; when no text token fits they remain
// too, so that the answer ends rather than breaks the JSON.
func (c *JSONConstraint) Mask(lg []float32) {
	allowed := make([]bool, len(lg))
	fits := false
	if !c.st.ended() {
		// Inside a string, a token of plain bytes is content as it is:
		// allowed without stepping (most of a vocabulary).
		inString := c.st.mode == modeString && c.st.aux == 0
		fits = maskWalk(c.v, allowed, c.st, c.states, func(st jsonState, b byte) (jsonState, bool) { return st.step(b, maxJSONWhitespace) },
			func(id int32) bool { return inString && c.v.plain[id] })
	}
	c.v.finishMask(lg, allowed, c.st.complete() || !fits)
}

// maskWalk marks in allowed the tokens whose bytes the recognizer accepts
// from start, walking the vocabulary in byte order so that a token reuses
// the states of the prefix it shares with the one before it (states has
// room for the longest token). A token for which pass is true is allowed
// without stepping. It reports whether any token fits.
func maskWalk[S any](v *Vocab, allowed []bool, start S, states []S, step func(S, byte) (S, bool), pass func(int32) bool) bool {
	fits := false
	states[0] = start
	valid, dead := 0, -1 // states[:valid+1] hold the last stepped token's prefixes
	carry := math.MaxInt // common prefix with the last stepped token, over skipped ones
	for i, id := range v.order {
		l := min(v.lcp[i], carry)
		if int(id) >= len(allowed) {
			carry = l
			continue
		}
		if pass(id) {
			allowed[id], fits, carry = true, true, l
			continue
		}
		b := v.bytes[id]
		if dead >= 0 && l > dead {
			carry = l
			continue // shares the rejected prefix
		}
		carry = math.MaxInt
		dead = -1
		d := min(valid, l)
		for d < len(b) {
			s, ok := step(states[d], b[d])
			if !ok {
				dead = d
				break
			}
			states[d+1] = s
			d++
		}
		valid = d
		if dead < 0 {
			allowed[id] = true
			fits = true
		}
	}
	return fits
}

// finishMask allows the end-of-generation tokens when eog is set and
// sets every token not allowed to -Inf.
func (v *Vocab) finishMask(lg []float32, allowed []bool, eog bool) {
	if eog {
		for _, id := range v.eog {
			if int(id) < len(lg) {
				allowed[id] = true
			}
		}
	}
	for i, ok := range allowed {
		if !ok {
			lg[i] = float32(math.Inf(-1))
		}
	}
}

// Accept advances the constraint by the sampled token.
func (c *JSONConstraint) Accept(id int32) error {
	if slices.Contains(c.v.eog, id) {
		c.done = true
		return nil
	}
	if id < 0 || int(id) >= len(c.v.bytes) || c.v.bytes[id] == nil {
		return fmt.Errorf("json constraint: token %d is not text", id)
	}
	st := c.st
	for _, b := range c.v.bytes[id] {
		var ok bool
		if st, ok = st.step(b, maxJSONWhitespace); !ok {
			return fmt.Errorf("json constraint: token %d (%q) breaks the document", id, c.v.bytes[id])
		}
	}
	c.st = st
	return nil
}
