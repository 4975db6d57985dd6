package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Values inside the interpreter follow Python's data model, as chat
// templates are written for jinja2:
//
//	nil        None
//	Undefined  jinja2's default Undefined
//	bool, int64, float64, string
//	[]any      list (tuples too)
//	*Dict      dict, insertion-ordered
//	*Namespace namespace()
//	Func       callable (globals, macros, bound methods)
//
// FromGo converts Go data (maps, slices, numbers, json.Number) into these.

// Undefined is a missing variable, attribute or item. It renders as "",
// is falsy, iterates as empty, and fails on attribute access, calls and
// arithmetic, as jinja2's default Undefined does.
type Undefined struct {
	hint string // what was missing, for error messages
}

func (u Undefined) msg() string {
	if u.hint == "" {
		return "value is undefined"
	}
	return u.hint
}

// Func is a callable value: globals, macros and bound methods.
type Func func(args []any, kwargs map[string]any) (any, error)

// Dict is an insertion-ordered dictionary (Python dict semantics).
type Dict struct {
	keys []any
	m    map[any]any
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{m: map[any]any{}} }

// Set stores v (converted with FromGo) under k, keeping first-insertion order.
func (d *Dict) Set(k string, v any) { d.set(k, FromGo(v)) }

func (d *Dict) set(k, v any) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

func (d *Dict) get(k any) (any, bool) {
	if !hashable(k) {
		return nil, false
	}
	v, ok := d.m[normKey(k)]
	return v, ok
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// normKey maps keys that compare equal in Python onto one Go key
// (True == 1, 2.0 == 2).
func normKey(k any) any {
	switch x := k.(type) {
	case bool:
		if x {
			return int64(1)
		}
		return int64(0)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int64(x)
		}
	}
	return k
}

func hashable(k any) bool {
	switch k.(type) {
	case nil, bool, int64, float64, string:
		return true
	}
	return false
}

// Tuple is a Python tuple: a list that renders with parentheses.
type Tuple []any

// unTuple lets list operations accept tuples.
func unTuple(v any) any {
	if t, ok := v.(Tuple); ok {
		return []any(t)
	}
	return v
}

// Namespace is the mutable object namespace() returns.
type Namespace struct{ d *Dict }

// FromGo converts Go data into interpreter values. Maps with string keys
// become dicts with keys in sorted order (Go maps have no order; sorting
// makes renders deterministic); structs are not supported and are rendered
// through their JSON encoding.
func FromGo(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case Undefined, bool, int64, float64, string, *Dict, *Namespace, Func, Tuple:
		return x
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = FromGo(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			d.set(k, FromGo(x[k]))
		}
		return d
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case uint:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float32:
		return float64(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case func(args []any, kwargs map[string]any) (any, error):
		return Func(x)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = FromGo(rv.Index(i).Interface())
		}
		return out
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			m := map[string]any{}
			it := rv.MapRange()
			for it.Next() {
				m[it.Key().String()] = it.Value().Interface()
			}
			return FromGo(m)
		}
	case reflect.Pointer:
		if rv.IsNil() {
			return nil
		}
		return FromGo(rv.Elem().Interface())
	case reflect.String:
		return rv.String()
	case reflect.Bool:
		return rv.Bool()
	}
	// last resort: round-trip through JSON
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var out any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if dec.Decode(&out) != nil {
		return string(b)
	}
	return FromGo(out)
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case Undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case Func:
		return "function"
	case *loopObj:
		return "LoopContext"
	case *cycler:
		return "Cycler"
	}
	return fmt.Sprintf("%T", v)
}

func truthy(v any) bool {
	switch x := unTuple(v).(type) {
	case nil, Undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	}
	return true
}

// toStr is Python's str() with jinja2's Undefined rendering as "".
func toStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case Undefined:
		return ""
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return pyFloatRepr(x)
	case string:
		return x
	case *Namespace:
		return repr(x)
	case Func:
		return "<function>"
	case *loopObj:
		return "<LoopContext " + strconv.Itoa(x.index+1) + "/" + strconv.Itoa(x.length) + ">"
	case *cycler:
		return "<Cycler>"
	}
	return repr(v)
}

// repr is Python's repr() for error messages and hints: values are cut
// after maxHintBytes so a huge list cannot blow up an error message.
func repr(v any) string {
	s := &sink{left: maxHintBytes}
	s.cur.Grow(maxHintBytes)
	writeRepr(s, v, 0)
	if s.over {
		return s.String() + "..."
	}
	return s.String()
}

const maxHintBytes = 200

// maxReprDepth stops runaway recursion (a namespace can contain itself).
const maxReprDepth = 100

// writeRepr writes Python's repr() of v into s, stopping once s is over
// its limit (the caller reports that).
func writeRepr(s *sink, v any, depth int) {
	if s.over {
		return
	}
	if depth > maxReprDepth {
		s.put("...")
		return
	}
	switch x := v.(type) {
	case *Namespace:
		s.put("<Namespace ")
		writeRepr(s, x.d, depth+1)
		s.putByte('>')
	case Tuple:
		s.putByte('(')
		for i, e := range x {
			if i > 0 {
				s.put(", ")
			}
			writeRepr(s, e, depth+1)
		}
		if len(x) == 1 {
			s.putByte(',')
		}
		s.putByte(')')
	case string:
		writePyStr(s, x)
	case []any:
		s.putByte('[')
		for i, e := range x {
			if i > 0 {
				s.put(", ")
			}
			writeRepr(s, e, depth+1)
		}
		s.putByte(']')
	case *Dict:
		s.putByte('{')
		for i, k := range x.keys {
			if i > 0 {
				s.put(", ")
			}
			writeRepr(s, k, depth+1)
			s.put(": ")
			writeRepr(s, x.m[k], depth+1)
		}
		s.putByte('}')
	case Undefined:
		s.put("Undefined")
	default:
		s.put(toStr(v))
	}
}

func writePyStr(b *sink, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.putByte(q)
	if plainASCII(s, q) { // the common case, in one write
		b.put(s)
		b.putByte(q)
		return
	}
	const hex = "0123456789abcdef"
	for _, r := range s {
		if b.over {
			return
		}
		switch {
		case r == rune(q) || r == '\\':
			b.putByte('\\')
			b.putByte(byte(r))
		case r == '\n':
			b.put(`\n`)
		case r == '\r':
			b.put(`\r`)
		case r == '\t':
			b.put(`\t`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			b.put(`\x`)
			b.putByte(hex[r>>4])
			b.putByte(hex[r&0xf])
		default:
			b.putRune(r)
		}
	}
	b.putByte(q)
}

// pyFloatRepr formats like Python's float.__repr__: the shortest digits that
// round-trip, positional for 1e-4 <= |x| < 1e16, otherwise scientific.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.2345e+06"
	neg := strings.HasPrefix(e, "-")
	if neg {
		e = e[1:]
	}
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	digits := strings.Replace(mant, ".", "", 1)
	var s string
	if exp >= -4 && exp < 16 {
		// positional
		if exp >= 0 {
			if len(digits) <= exp+1 {
				s = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			} else {
				s = digits[:exp+1] + "." + digits[exp+1:]
			}
		} else {
			s = "0." + strings.Repeat("0", -exp-1) + digits
		}
	} else {
		s = digits[:1]
		if len(digits) > 1 {
			s += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		s += "e" + sign + es
	}
	if neg {
		s = "-" + s
	}
	return s
}

// number returns v as a float or int; ok is false for non-numbers.
func asNumber(v any) (i int64, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 1, false, true
		}
		return 0, 0, false, true
	case int64:
		return x, float64(x), false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

// equal is Python's ==; every element compared counts as a step, so
// comparing huge shared structures fails instead of running for hours.
func (r *renderer) equal(a, b any) bool {
	if r.work(1) != nil {
		return false
	}
	a, b = unTuple(a), unTuple(b)
	if ai, af, afl, ok := asNumber(a); ok {
		if bi, bf, bfl, ok := asNumber(b); ok {
			if afl || bfl {
				return af == bf
			}
			return ai == bi
		}
		return false
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !r.equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			yv, ok := y.m[k]
			if !ok || !r.equal(x.m[k], yv) {
				return false
			}
		}
		return true
	}
	return a == b
}

// compareOrder returns -1, 0, 1 for a <op> b ordering, or an error when
// Python would raise TypeError.
func (r *renderer) order(a, b any) (int, error) {
	if err := r.work(1); err != nil {
		return 0, err
	}
	a, b = unTuple(a), unTuple(b)
	if ai, af, afl, ok := asNumber(a); ok {
		if bi, bf, bfl, ok := asNumber(b); ok {
			if afl || bfl {
				switch {
				case af < bf:
					return -1, nil
				case af > bf:
					return 1, nil
				}
				return 0, nil
			}
			switch {
			case ai < bi:
				return -1, nil
			case ai > bi:
				return 1, nil
			}
			return 0, nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			for i := 0; i < len(x) && i < len(y); i++ {
				if !r.equal(x[i], y[i]) {
					return r.order(x[i], y[i])
				}
			}
			switch {
			case len(x) < len(y):
				return -1, nil
			case len(x) > len(y):
				return 1, nil
			}
			return 0, nil
		}
	case Undefined:
		return 0, fmt.Errorf("%s", x.msg())
	}
	if u, ok := b.(Undefined); ok {
		return 0, fmt.Errorf("%s", u.msg())
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

// iterate returns the items a for loop sees: list items, dict keys, string
// characters; Undefined iterates as empty.
func iterate(v any) ([]any, error) {
	switch x := unTuple(v).(type) {
	case []any:
		return x, nil
	case *Dict:
		return append([]any(nil), x.keys...), nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *Namespace:
		return nil, fmt.Errorf("'Namespace' object is not iterable")
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func (r *renderer) contains(container, item any) (bool, error) {
	switch x := unTuple(container).(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, isU := item.(Undefined); isU {
				return false, fmt.Errorf("%s", u.msg())
			}
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(x, s), nil
	case []any:
		for _, e := range x {
			if r.equal(e, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		_, ok := x.get(item)
		return ok, nil
	case Undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

func length(v any) (int, error) {
	switch x := unTuple(v).(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case *Dict:
		return x.Len(), nil
	case Undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// plainASCII reports whether s is printable ASCII without q or a backslash,
// which repr copies unchanged.
func plainASCII(s string, q byte) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == q || c == '\\' {
			return false
		}
	}
	return true
}
