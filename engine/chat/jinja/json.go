package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
)

// writeJSON is Python's json.dumps as transformers' tojson filter calls it:
// ensure_ascii=False by default, separators (", ", ": ") without indent and
// (",", ": ") with it, keys in insertion order unless sort_keys.

type jsonOpts struct {
	ensureASCII bool
	hasIndent   bool
	indent      string
	itemSep     string
	keySep      string
	sortKeys    bool
}

const maxJSONDepth = 500

// writeJSON writes into b, a sink bounded by the render budget; once it is
// over, the caller reports that.
func writeJSON(r *renderer, b *sink, v any, o jsonOpts, level int) error {
	if b.over {
		return nil
	}
	if level > maxJSONDepth {
		return fmt.Errorf("tojson: nesting deeper than %d", maxJSONDepth)
	}
	newline := func(l int) {
		if o.hasIndent {
			b.putByte('\n')
			for range l {
				b.put(o.indent)
			}
		}
	}
	switch x := unTuple(v).(type) {
	case nil:
		b.put("null")
	case bool:
		if x {
			b.put("true")
		} else {
			b.put("false")
		}
	case int64:
		b.put(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			b.put("NaN")
		case math.IsInf(x, 1):
			b.put("Infinity")
		case math.IsInf(x, -1):
			b.put("-Infinity")
		default:
			b.put(pyFloatRepr(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case []any:
		if len(x) == 0 {
			b.put("[]")
			return nil
		}
		b.putByte('[')
		for i, e := range x {
			if i > 0 {
				b.put(o.itemSep)
			}
			newline(level + 1)
			if err := writeJSON(r, b, e, o, level+1); err != nil {
				return err
			}
		}
		newline(level)
		b.putByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.put("{}")
			return nil
		}
		keys := x.keys
		if o.sortKeys {
			keys = append([]any(nil), keys...)
			var serr error
			sort.SliceStable(keys, func(i, j int) bool {
				c, err := r.order(keys[i], keys[j])
				if err != nil {
					serr = err
				}
				return c < 0
			})
			if serr != nil {
				return fmt.Errorf("tojson: sort_keys: %v", serr)
			}
		}
		b.putByte('{')
		for i, k := range keys {
			if i > 0 {
				b.put(o.itemSep)
			}
			newline(level + 1)
			var ks string
			switch kk := k.(type) {
			case string:
				ks = kk
			case nil:
				ks = "null"
			case bool:
				ks = map[bool]string{true: "true", false: "false"}[kk]
			case int64:
				ks = strconv.FormatInt(kk, 10)
			case float64:
				ks = pyFloatRepr(kk)
			default:
				return fmt.Errorf("tojson: keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			writeJSONString(b, ks, o.ensureASCII)
			b.put(o.keySep)
			if err := writeJSON(r, b, x.m[k], o, level+1); err != nil {
				return err
			}
		}
		newline(level)
		b.putByte('}')
	case *Namespace:
		return fmt.Errorf("object of type Namespace is not JSON serializable")
	case Undefined:
		return fmt.Errorf("object of type Undefined is not JSON serializable (%s)", x.msg())
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONString(b *sink, s string, ascii bool) {
	const hex = "0123456789abcdef"
	b.putByte('"')
	if plainASCII(s, '"') { // the common case, in one write
		b.put(s)
		b.putByte('"')
		return
	}
	for _, r := range s {
		if b.over {
			return
		}
		switch r {
		case '"':
			b.put(`\"`)
		case '\\':
			b.put(`\\`)
		case '\n':
			b.put(`\n`)
		case '\r':
			b.put(`\r`)
		case '\t':
			b.put(`\t`)
		case '\b':
			b.put(`\b`)
		case '\f':
			b.put(`\f`)
		default:
			switch {
			case r < 0x20 || (ascii && r == 0x7f):
				b.put(`\u00`)
				b.putByte(hex[r>>4])
				b.putByte(hex[r&0xf])
			case ascii && r > 0x7f:
				if r > 0xffff {
					r1, r2 := utf16.EncodeRune(r)
					b.put(fmt.Sprintf(`\u%04x\u%04x`, r1, r2))
				} else {
					b.put(fmt.Sprintf(`\u%04x`, r))
				}
			default:
				b.putRune(r)
			}
		}
	}
	b.putByte('"')
}

// strftime implements the C/Python strftime directives templates use.
// Unknown directives are copied through, as glibc does.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		d := f[i]
		pad := true
		if d == '-' && i+1 < len(f) { // glibc: %-d drops the padding
			pad = false
			i++
			d = f[i]
		}
		num := func(v, w int) {
			s := strconv.Itoa(v)
			if pad {
				for len(s) < w {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch d {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if pad && len(s) < 2 {
				s = " " + s
			}
			b.WriteString(s)
		case 'm':
			num(int(t.Month()), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'j':
			num(t.YearDay(), 3)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'Z', 'z':
			// datetime.now() is naive: empty
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(d)
		}
	}
	return b.String()
}

// DecodeJSON parses JSON into interpreter values, keeping object key order
// and the integer/float distinction (as Python's json.loads does).
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return decodeAll(dec, nil)
}

func decodeAll(dec *json.Decoder, charge func(n int64) error) (any, error) {
	v, err := decodeValue(dec, 0, charge)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("json: trailing data after value")
	}
	return v, nil
}

// fFromJSON is the from_json/fromjson filter (json.loads) some chat
// templates use on tool-call arguments given as a string. Every value it
// builds is charged to the render's budget and steps: a short string
// like "[[],[],…]" builds far more than its bytes.
func fFromJSON(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("the JSON object must be str, not %s", typeName(v))
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	return decodeAll(dec, func(n int64) error {
		if err := r.work(1); err != nil {
			return err
		}
		return r.grow(n, "from_json of a string of %d bytes", len(s))
	})
}

// decodeValue decodes one value; charge (if not nil) is told the bytes of
// each value before it is built.
func decodeValue(dec *json.Decoder, depth int, charge func(n int64) error) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("json: nesting deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if charge != nil {
		n := int64(elemSize)
		switch x := tok.(type) {
		case string:
			n += int64(len(x))
		case json.Delim:
			n += 3 * elemSize // slice header or dict header
		}
		if err := charge(n); err != nil {
			return nil, err
		}
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("json: object key is not a string")
				}
				if charge != nil { // the key and the map entry
					if err := charge(elemSize + int64(len(k))); err != nil {
						return nil, err
					}
				}
				v, err := decodeValue(dec, depth+1, charge)
				if err != nil {
					return nil, err
				}
				d.set(k, v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			out := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1, charge)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		}
		return nil, fmt.Errorf("json: unexpected %v", x)
	case json.Number:
		return FromGo(x), nil
	case string, bool, nil:
		return x, nil
	}
	return nil, fmt.Errorf("json: unexpected token %v", tok)
}
