package jinja

import (
	"fmt"
	"html"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

type filterFunc func(r *renderer, v any, args []any, kw map[string]any) (any, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"length":     fLength,
		"count":      fLength,
		"tojson":     fToJSON,
		"trim":       fTrim,
		"upper":      strFilter(strings.ToUpper),
		"lower":      strFilter(strings.ToLower),
		"capitalize": strFilter(pyCapitalize),
		"title":      strFilter(jinjaTitle),
		"default":    fDefault,
		"d":          fDefault,
		"join":       fJoin,
		"first":      fFirst,
		"last":       fLast,
		"items":      fItems,
		"list":       fList,
		"string":     func(_ *renderer, v any, _ []any, _ map[string]any) (any, error) { return toStr(v), nil },
		"safe":       func(_ *renderer, v any, _ []any, _ map[string]any) (any, error) { return v, nil },
		"e":          fEscape,
		"escape":     fEscape,
		"replace":    fReplace,
		"map":        fMap,
		"selectattr": fSelectAttr(true),
		"rejectattr": fSelectAttr(false),
		"select":     fSelect(true),
		"reject":     fSelect(false),
		"int":        fInt,
		"float":      fFloat,
		"abs":        fAbs,
		"round":      fRound,
		"reverse":    fReverse,
		"unique":     fUnique,
		"sort":       fSort,
		"dictsort":   fDictSort,
		"sum":        fSum,
		"min":        fMinMax(-1),
		"max":        fMinMax(1),
		"indent":     fIndent,
		"wordcount": func(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
			return int64(len(strings.Fields(toStr(v)))), nil
		},
		"center": fCenter,
		"attr":   fAttr,
		"format": fFormat,
	}
}

func knownFilter(name string) bool { _, ok := filters[name]; return ok }

func (r *renderer) applyFilter(fe *filterExpr, v any, f *frame) (any, error) {
	fn, ok := filters[fe.name]
	if !ok {
		return nil, errorf(fe.line, "no filter named '%s'", fe.name)
	}
	args, kw, err := r.evalArgs(fe.args, fe.kwName, fe.kwVal, f)
	if err != nil {
		return nil, err
	}
	out, err := fn(r, v, args, kw)
	if err == nil {
		err = r.charge(out, fe.line)
	}
	if err != nil {
		if je, ok := err.(*Error); ok {
			return nil, je
		}
		return nil, errorf(fe.line, "filter '%s': %v", fe.name, err)
	}
	return out, nil
}

// param returns positional argument i, else keyword name, else def.
func param(args []any, kw map[string]any, i int, name string, def any) any {
	if i < len(args) {
		return args[i]
	}
	if v, ok := kw[name]; ok {
		return v
	}
	return def
}

func strFilter(fn func(string) string) filterFunc {
	return func(_ *renderer, v any, _ []any, _ map[string]any) (any, error) { return fn(toStr(v)), nil }
}

func fLength(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	n, err := length(v)
	return int64(n), err
}

func fToJSON(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	o.ensureASCII = truthy(param(args, kw, 0, "ensure_ascii", false))
	ind := param(args, kw, 1, "indent", nil)
	switch x := ind.(type) {
	case nil:
	case int64:
		o.indent = strings.Repeat(" ", int(max(x, 0)))
		o.hasIndent = true
		o.itemSep = ","
	case string:
		o.indent = x
		o.hasIndent = true
		o.itemSep = ","
	default:
		return nil, fmt.Errorf("indent must be an integer or string, not %s", typeName(ind))
	}
	if sep := param(args, kw, 2, "separators", nil); sep != nil {
		l, ok := unTuple(sep).([]any)
		if !ok || len(l) != 2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		a, ok1 := l[0].(string)
		b, ok2 := l[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		o.itemSep, o.keySep = a, b
	}
	o.sortKeys = truthy(param(args, kw, 3, "sort_keys", false))
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func fTrim(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	chars := param(args, kw, 0, "chars", nil)
	return pyStrip(toStr(v), chars, true, true)
}

func fDefault(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	def := param(args, kw, 0, "default_value", "")
	boolean := truthy(param(args, kw, 1, "boolean", false))
	if _, u := v.(Undefined); u || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func fJoin(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	sep := toStr(param(args, kw, 0, "d", ""))
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := param(args, kw, 1, "attribute", nil)
	parts := make([]string, len(items))
	for i, it := range items {
		if attr != nil {
			if it, err = r.getItemPath(it, attr); err != nil {
				return nil, err
			}
		}
		parts[i] = toStr(it)
	}
	return strings.Join(parts, sep), nil
}

func fFirst(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "first of an empty sequence"}, nil
	}
	return items[0], nil
}

func fLast(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "last of an empty sequence"}, nil
	}
	return items[len(items)-1], nil
}

func fItems(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	switch x := v.(type) {
	case Undefined:
		return []any{}, nil
	case *Dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = Tuple{k, x.m[k]}
		}
		return out, nil
	}
	return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
}

func fList(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func fEscape(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	s := html.EscapeString(toStr(v)) // & < > " '  (jinja2 uses &#34; &#39; too)
	return s, nil
}

func fReplace(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	s := toStr(v)
	oldV := param(args, kw, 0, "old", nil)
	newV := param(args, kw, 1, "new", nil)
	if oldV == nil || newV == nil {
		return nil, fmt.Errorf("replace needs old and new strings")
	}
	n := -1
	if c := param(args, kw, 2, "count", nil); c != nil {
		i, _, isF, ok := asNumber(c)
		if !ok || isF {
			return nil, fmt.Errorf("count must be an integer")
		}
		n = int(i)
	}
	return strings.Replace(s, toStr(oldV), toStr(newV), n), nil
}

// getItemPath looks up "a.b" paths (and integer indices) like jinja2's
// attribute= arguments do.
func (r *renderer) getItemPath(v any, attr any) (any, error) {
	s, ok := attr.(string)
	if !ok {
		return r.getItem(v, attr, 0)
	}
	for _, part := range strings.Split(s, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = r.getItem(v, key, 0); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func fMap(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	if attr, ok := kw["attribute"]; ok {
		def, hasDef := kw["default"]
		for i, it := range items {
			x, err := r.getItemPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, u := x.(Undefined); u && hasDef {
				x = def
			}
			out[i] = x
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("map needs a filter name or attribute=")
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("map: filter name must be a string")
	}
	fn, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("no filter named '%s'", name)
	}
	for i, it := range items {
		if out[i], err = fn(r, it, args[1:], kw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fSelectAttr(keep bool) filterFunc {
	return func(r *renderer, v any, args []any, _ map[string]any) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("needs an attribute name")
		}
		out := []any{}
		for _, it := range items {
			x, err := r.getItemPath(it, args[0])
			if err != nil {
				return nil, err
			}
			var ok bool
			if len(args) == 1 {
				ok = truthy(x)
			} else {
				if ok, err = runTest(toStr(args[1]), x, args[2:]); err != nil {
					return nil, err
				}
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func fSelect(keep bool) filterFunc {
	return func(_ *renderer, v any, args []any, _ map[string]any) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out := []any{}
		for _, it := range items {
			var ok bool
			if len(args) == 0 {
				ok = truthy(it)
			} else if ok, err = runTest(toStr(args[0]), it, args[1:]); err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func fInt(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	def := param(args, kw, 0, "default", int64(0))
	switch x := v.(type) {
	case bool:
		if x {
			return int64(1), nil
		}
		return int64(0), nil
	case int64:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.TrimSpace(strings.ReplaceAll(x, "_", ""))
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return int64(f), nil
		}
	}
	return def, nil
}

func fFloat(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	def := param(args, kw, 0, "default", 0.0)
	switch x := v.(type) {
	case bool, int64, float64:
		_, f, _, _ := asNumber(x)
		return f, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func fAbs(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	i, f, isF, ok := asNumber(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if isF {
		return math.Abs(f), nil
	}
	return absI(i), nil
}

func fRound(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	_, f, _, ok := asNumber(v)
	if !ok {
		return nil, fmt.Errorf("round needs a number, got %s", typeName(v))
	}
	prec, _, _, _ := asNumber(param(args, kw, 0, "precision", int64(0)))
	method := toStr(param(args, kw, 1, "method", "common"))
	p := math.Pow(10, float64(prec))
	switch method {
	case "common":
		return math.RoundToEven(f*p) / p, nil // Python's round() rounds half to even
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	return nil, fmt.Errorf("method must be common, ceil or floor")
}

func fReverse(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return out, nil
}

func fUnique(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for _, it := range items {
		dup := false
		for _, o := range out {
			if valuesEqual(o, it) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, it)
		}
	}
	return out, nil
}

func sortValues(items []any, reverse bool, key func(any) any) error {
	var serr error
	sort.SliceStable(items, func(i, j int) bool {
		a, b := key(items[i]), key(items[j])
		c, err := compareOrder(a, b)
		if err != nil && serr == nil {
			serr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	return serr
}

func fSort(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]any(nil), items...)
	reverse := truthy(param(args, kw, 0, "reverse", false))
	caseSens := truthy(param(args, kw, 1, "case_sensitive", false))
	attr := param(args, kw, 2, "attribute", nil)
	var kerr error
	key := func(x any) any {
		if attr != nil {
			y, err := r.getItemPath(x, attr)
			if err != nil && kerr == nil {
				kerr = err
			}
			x = y
		}
		if s, ok := x.(string); ok && !caseSens {
			return strings.ToLower(s)
		}
		return x
	}
	if err := sortValues(items, reverse, key); err != nil {
		return nil, err
	}
	return items, kerr
}

func fDictSort(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("dictsort needs a mapping, got %s", typeName(v))
	}
	caseSens := truthy(param(args, kw, 0, "case_sensitive", false))
	by := toStr(param(args, kw, 1, "by", "key"))
	reverse := truthy(param(args, kw, 2, "reverse", false))
	pairs := make([]any, len(d.keys))
	for i, k := range d.keys {
		pairs[i] = Tuple{k, d.m[k]}
	}
	idx := 0
	if by == "value" {
		idx = 1
	}
	err := sortValues(pairs, reverse, func(x any) any {
		y := x.(Tuple)[idx]
		if s, ok := y.(string); ok && !caseSens {
			return strings.ToLower(s)
		}
		return y
	})
	return pairs, err
}

func fSum(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	attr := param(args, kw, 0, "attribute", nil)
	acc := param(args, kw, 1, "start", int64(0))
	for _, it := range items {
		if attr != nil {
			if it, err = r.getItemPath(it, attr); err != nil {
				return nil, err
			}
		}
		if acc, err = binOp("+", acc, it); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

func fMinMax(sign int) filterFunc {
	return func(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{hint: "min/max of an empty sequence"}, nil
		}
		best := items[0]
		for _, it := range items[1:] {
			c, err := compareOrder(it, best)
			if err != nil {
				return nil, err
			}
			if c*sign > 0 {
				best = it
			}
		}
		return best, nil
	}
}

func fIndent(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	s := toStr(v)
	width := param(args, kw, 0, "width", int64(4))
	var pad string
	switch w := width.(type) {
	case string:
		pad = w
	default:
		n, _, _, ok := asNumber(w)
		if !ok {
			return nil, fmt.Errorf("width must be an integer or string")
		}
		pad = strings.Repeat(" ", int(max(n, 0)))
	}
	first := truthy(param(args, kw, 1, "first", false))
	blank := truthy(param(args, kw, 2, "blank", false))
	lines := strings.Split(s, "\n")
	for i := range lines {
		if i == 0 && !first {
			continue
		}
		if lines[i] == "" && !blank {
			continue
		}
		lines[i] = pad + lines[i]
	}
	return strings.Join(lines, "\n"), nil
}

func fCenter(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	s := toStr(v)
	w, _, _, _ := asNumber(param(args, kw, 0, "width", int64(80)))
	n := int(w) - len([]rune(s))
	if n <= 0 {
		return s, nil
	}
	left := n / 2
	if n%2 == 1 && int(w)%2 == 1 { // Python's str.center puts the odd space on the left for odd widths
		left++
	}
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", n-left), nil
}

func fFormat(_ *renderer, v any, args []any, kw map[string]any) (any, error) {
	if len(kw) > 0 {
		d := NewDict()
		for _, k := range sortedKeys(kw) {
			d.set(k, kw[k])
		}
		return pyPercent(toStr(v), d)
	}
	return pyPercent(toStr(v), Tuple(args))
}

func fAttr(r *renderer, v any, args []any, _ map[string]any) (any, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("attr needs one name")
	}
	return r.getAttr(v, toStr(args[0]), 0)
}

var titleSplit = regexp.MustCompile(`[-\s({\[<]+`)

// jinjaTitle is jinja2's title filter: upper-case the first letter of each
// word (words start after whitespace, '-', or an opening bracket).
func jinjaTitle(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range titleSplit.FindAllStringIndex(s, -1) {
		b.WriteString(pyCapitalize(s[last:m[0]]))
		b.WriteString(s[m[0]:m[1]])
		last = m[1]
	}
	b.WriteString(pyCapitalize(s[last:]))
	return b.String()
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	rs := []rune(strings.ToLower(s))
	rs[0] = unicode.ToUpper(rs[0])
	return string(rs)
}
