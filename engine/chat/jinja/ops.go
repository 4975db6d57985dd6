package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func opTypeError(op string, l, r any) error {
	if u, ok := l.(Undefined); ok {
		return fmt.Errorf("%s", u.msg())
	}
	if u, ok := r.(Undefined); ok {
		return fmt.Errorf("%s", u.msg())
	}
	if _, ok := l.(string); ok && op == "+" {
		return fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(r))
	}
	return fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

// binOp applies a binary operator; what it builds (concatenations,
// repetitions) is charged to the budget before it is allocated.
func (rd *renderer) binOp(op string, l, r any) (any, error) {
	if op == "~" {
		ls, err := rd.str(l, "'~'")
		if err != nil {
			return nil, err
		}
		rs, err := rd.str(r, "'~'")
		if err != nil {
			return nil, err
		}
		if err := rd.grow(int64(len(ls))+int64(len(rs)), "'~' of %d and %d bytes", len(ls), len(rs)); err != nil {
			return nil, err
		}
		return ls + rs, nil
	}
	if s, ok := l.(string); ok && op == "%" {
		return rd.pyPercent(s, r)
	}
	li, lf, lfl, lok := asNumber(l)
	ri, rf, rfl, rok := asNumber(r)
	if lok && rok {
		isF := lfl || rfl
		switch op {
		case "+":
			if isF {
				return lf + rf, nil
			}
			return li + ri, nil
		case "-":
			if isF {
				return lf - rf, nil
			}
			return li - ri, nil
		case "*":
			if isF {
				return lf * rf, nil
			}
			return li * ri, nil
		case "/":
			if rf == 0 {
				return nil, fmt.Errorf("division by zero")
			}
			return lf / rf, nil
		case "//":
			if rf == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			if isF {
				return math.Floor(lf / rf), nil
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case "%":
			if rf == 0 {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			if isF {
				m := math.Mod(lf, rf)
				if m != 0 && (m < 0) != (rf < 0) {
					m += rf
				}
				return m, nil
			}
			m := li % ri
			if m != 0 && (m < 0) != (ri < 0) {
				m += ri
			}
			return m, nil
		case "**":
			if isF || ri < 0 {
				return math.Pow(lf, rf), nil
			}
			res := int64(1)
			base := li
			for e := ri; e > 0; e >>= 1 {
				if e&1 == 1 {
					if res != 0 && absI(res) > math.MaxInt64/maxI(absI(base), 1) {
						return nil, fmt.Errorf("integer result of ** is too large")
					}
					res *= base
				}
				if e > 1 {
					if absI(base) > 3037000499 {
						return nil, fmt.Errorf("integer result of ** is too large")
					}
					base *= base
				}
			}
			return res, nil
		}
	}
	l, r = unTuple(l), unTuple(r)
	switch op {
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				if err := rd.grow(int64(len(x))+int64(len(y)), "'+' of %d and %d bytes", len(x), len(y)); err != nil {
					return nil, err
				}
				return x + y, nil
			}
		case []any:
			if y, ok := r.([]any); ok {
				n := int64(len(x)) + int64(len(y))
				if err := rd.growN(n, elemSize, "'+' of lists of %d and %d items", len(x), len(y)); err != nil {
					return nil, err
				}
				out := make([]any, 0, n)
				return append(append(out, x...), y...), nil
			}
		}
	case "*":
		if s, ok := l.(string); ok && rok && !rfl {
			if ri <= 0 || s == "" {
				return "", nil
			}
			if err := rd.growN(ri, int64(len(s)), "a string of %d bytes * %d", len(s), ri); err != nil {
				return nil, err
			}
			return strings.Repeat(s, int(ri)), nil
		}
		if s, ok := r.(string); ok && lok && !lfl {
			return rd.binOp(op, s, l)
		}
		if xs, ok := l.([]any); ok && rok && !rfl {
			if ri <= 0 || len(xs) == 0 {
				return []any{}, nil
			}
			if ri > math.MaxInt64/int64(len(xs)) {
				return nil, rd.grow(-1, "a list of %d items * %d", len(xs), ri)
			}
			if err := rd.growN(int64(len(xs))*ri, elemSize, "a list of %d items * %d", len(xs), ri); err != nil {
				return nil, err
			}
			out := make([]any, 0, int64(len(xs))*ri)
			for k := int64(0); k < ri; k++ {
				out = append(out, xs...)
			}
			return out, nil
		}
		if xs, ok := r.([]any); ok && lok && !lfl {
			return rd.binOp(op, xs, l)
		}
	}
	return nil, opTypeError(op, l, r)
}

func absI(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func maxI(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// ---- tests ----

var testNames = map[string]bool{
	"defined": true, "undefined": true, "none": true, "boolean": true, "false": true, "true": true,
	"integer": true, "float": true, "number": true, "string": true, "mapping": true, "iterable": true,
	"sequence": true, "callable": true, "sameas": true, "lower": true, "upper": true, "even": true,
	"odd": true, "divisibleby": true, "eq": true, "equalto": true, "==": true, "ne": true, "!=": true,
	"lt": true, "lessthan": true, "le": true, "gt": true, "greaterthan": true, "ge": true, "in": true,
	"escaped": true,
}

func knownTest(name string) bool { return testNames[name] }

func (r *renderer) evalTest(e *testExpr, f *frame) (any, error) {
	if !knownTest(e.name) { // only in an if: reported when reached
		return nil, errorf(e.line, "no test named '%s'", e.name)
	}
	v, err := r.eval(e.x, f)
	if err != nil {
		return nil, err
	}
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if args[i], err = r.eval(a, f); err != nil {
			return nil, err
		}
	}
	ok, err := r.runTest(e.name, v, args)
	if err != nil {
		return nil, at(e.line, err, func() error { return errorf(e.line, "test '%s': %v", e.name, err) })
	}
	return ok != e.negate, nil
}

func (r *renderer) runTest(name string, v any, args []any) (bool, error) {
	arg := func() (any, error) {
		if len(args) != 1 {
			return nil, fmt.Errorf("needs one argument")
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		_, u := v.(Undefined)
		return !u, nil
	case "undefined":
		_, u := v.(Undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "number":
		_, _, _, ok := asNumber(v)
		return ok, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case string, []any, Tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.(type) {
		case string, []any, Tuple, *Dict:
			return true, nil
		}
		return false, nil
	case "callable":
		_, ok := v.(Func)
		return ok, nil
	case "escaped":
		return false, nil
	case "lower":
		s, ok := v.(string)
		return ok && s == strings.ToLower(s), nil
	case "upper":
		s, ok := v.(string)
		return ok && s == strings.ToUpper(s), nil
	case "even", "odd":
		i, _, isF, ok := asNumber(v)
		if !ok || isF {
			return false, fmt.Errorf("needs an integer, got %s", typeName(v))
		}
		return (i%2 == 0) == (name == "even"), nil
	case "divisibleby":
		a, err := arg()
		if err != nil {
			return false, err
		}
		m, err := r.binOp("%", v, a)
		if err != nil {
			return false, err
		}
		return r.equal(m, int64(0)), nil
	case "sameas":
		a, err := arg()
		if err != nil {
			return false, err
		}
		switch a.(type) {
		case nil, bool:
			return v == a, nil
		}
		return r.equal(v, a), nil
	case "eq", "equalto", "==":
		a, err := arg()
		if err != nil {
			return false, err
		}
		return r.equal(v, a), nil
	case "ne", "!=":
		a, err := arg()
		if err != nil {
			return false, err
		}
		return !r.equal(v, a), nil
	case "lt", "lessthan", "le", "gt", "greaterthan", "ge":
		a, err := arg()
		if err != nil {
			return false, err
		}
		op := map[string]string{"lt": "<", "lessthan": "<", "le": "<=", "gt": ">", "greaterthan": ">", "ge": ">="}[name]
		return r.compare(op, v, a)
	case "in":
		a, err := arg()
		if err != nil {
			return false, err
		}
		return r.contains(a, v)
	}
	return false, fmt.Errorf("no test named '%s'", name)
}

// pyPercent is Python's printf-style str % args (and jinja2's format
// filter): conversions s r d i f F e E g G x X o c and %, with flags, width
// and precision. A *Dict argument fills %(name)s.
func (r *renderer) pyPercent(format string, arg any) (string, error) {
	var args []any
	var named *Dict
	switch x := arg.(type) {
	case Tuple:
		args = x
	case *Dict:
		named = x
		args = []any{x}
	default:
		args = []any{arg}
	}
	// the result is built within what is left of the budget; a width or
	// precision larger than that ("%1000000000s") is refused before fmt
	// pads or expands to it
	b := &sink{left: r.maxBytes - r.used}
	over := func() (string, error) {
		return "", r.grow(-1, "format %q", truncate(format, 40))
	}
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.putByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", fmt.Errorf("incomplete format")
		}
		var key *string
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 {
				return "", fmt.Errorf("incomplete format key")
			}
			k := format[i+1 : i+end]
			key = &k
			i += end + 1
		}
		start := i
		for i < len(format) && strings.IndexByte("-+ 0#", format[i]) >= 0 {
			i++
		}
		for i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '.') {
			i++
		}
		if i >= len(format) {
			return "", fmt.Errorf("incomplete format")
		}
		spec, verb := format[start:i], format[i]
		if verb == '%' {
			b.putByte('%')
			continue
		}
		for _, num := range strings.Split(strings.TrimLeft(spec, "-+ 0#"), ".") {
			if n, err := strconv.ParseInt(num, 10, 64); num != "" && (err != nil || n > b.left) {
				return over()
			}
		}
		var v any
		if key != nil {
			if named == nil {
				return "", fmt.Errorf("format requires a mapping")
			}
			var ok bool
			if v, ok = named.get(*key); !ok {
				return "", fmt.Errorf("no key %q in the format mapping", *key)
			}
		} else {
			if next >= len(args) {
				return "", fmt.Errorf("not enough arguments for format string")
			}
			v = args[next]
			next++
		}
		switch verb {
		case 's', 'r':
			s, err := r.str(v, "format %s")
			if verb == 'r' {
				s, err = r.reprStr(v, "format %r")
			}
			if err != nil {
				return "", err
			}
			if j := strings.IndexByte(spec, '.'); j >= 0 {
				if n, err := strconv.Atoi(spec[j+1:]); err == nil && n < len([]rune(s)) {
					s = string([]rune(s)[:n])
				}
				spec = spec[:j]
			}
			b.put(fmt.Sprintf("%"+spec+"s", s))
		case 'd', 'i', 'x', 'X', 'o', 'c':
			n, f, isF, ok := asNumber(v)
			if !ok {
				return "", fmt.Errorf("%%%c format: a number is required, not %s", verb, typeName(v))
			}
			if isF {
				n = int64(f)
			}
			gv := map[byte]string{'d': "d", 'i': "d", 'x': "x", 'X': "X", 'o': "o", 'c': "c"}[verb]
			b.put(fmt.Sprintf("%"+spec+gv, n))
		case 'f', 'F', 'e', 'E', 'g', 'G':
			_, f, _, ok := asNumber(v)
			if !ok {
				return "", fmt.Errorf("%%%c format: a number is required, not %s", verb, typeName(v))
			}
			if !strings.Contains(spec, ".") && verb != 'g' && verb != 'G' {
				spec += ".6"
			}
			b.put(fmt.Sprintf("%"+spec+string(verb), f))
		default:
			return "", fmt.Errorf("unsupported format character '%c'", verb)
		}
	}
	if named == nil && next < len(args) {
		return "", fmt.Errorf("not all arguments converted during string formatting")
	}
	if b.over {
		return over()
	}
	r.used += b.Len()
	return b.String(), nil
}
