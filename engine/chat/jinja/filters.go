package jinja

import (
	"fmt"
	"html"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(r *renderer, v any, args []any, kw map[string]any) (any, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"length":     fLength,
		"count":      fLength,
		"tojson":     fToJSON,
		"from_json":  fFromJSON,
		"fromjson":   fFromJSON,
		"batch":      fBatch,
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
		"string":     func(r *renderer, v any, _ []any, _ map[string]any) (any, error) { return r.str(v, "string") },
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
		"wordcount": func(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
			s, err := r.str(v, "wordcount")
			return int64(fieldCount(s)), err
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
		err = r.err // a filter may have hit a limit and returned a partial value
	}
	if err != nil {
		if le, ok := err.(*LimitError); ok {
			return nil, at(fe.line, le, nil)
		}
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
	return func(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
		s, err := r.str(v, "a string filter")
		if err != nil {
			return nil, err
		}
		// case mapping grows UTF-8 by at most half; runes take 4 bytes
		if err := r.growN(int64(len(s)), 5, "a string filter on %d bytes", len(s)); err != nil {
			return nil, err
		}
		return fn(s), nil
	}
}

func fLength(_ *renderer, v any, _ []any, _ map[string]any) (any, error) {
	n, err := length(v)
	return int64(n), err
}

func fToJSON(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	o.ensureASCII = truthy(param(args, kw, 0, "ensure_ascii", false))
	ind := param(args, kw, 1, "indent", nil)
	switch x := ind.(type) {
	case nil:
	case int64:
		if err := r.grow(max(x, 0), "tojson indent %d", x); err != nil {
			return nil, err
		}
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
	// built within what is left of the budget: indent * depth * items
	// and nested repetitions stop at the budget, not at out-of-memory
	return r.build(func(b *sink) error { return writeJSON(r, b, v, o, 0) }, "tojson of a %s", typeName(v))
}

func fTrim(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	chars := param(args, kw, 0, "chars", nil)
	s, err := r.str(v, "trim")
	if err != nil {
		return nil, err
	}
	return pyStrip(s, chars, true, true)
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
	sep, err := r.str(param(args, kw, 0, "d", ""), "join")
	if err != nil {
		return nil, err
	}
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if err := r.growN(int64(len(items)), elemSize, "join of %d items", len(items)); err != nil {
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
		if parts[i], err = r.str(it, "join"); err != nil {
			return nil, err
		}
	}
	return r.join(parts, sep)
}

func fFirst(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "first of an empty sequence"}, nil
	}
	return items[0], nil
}

func fLast(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "last of an empty sequence"}, nil
	}
	return items[len(items)-1], nil
}

func fItems(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	switch x := v.(type) {
	case Undefined:
		return []any{}, nil
	case *Dict:
		return r.items(x)
	}
	return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
}

func fList(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if err := r.growN(int64(len(items)), elemSize, "list of %d items", len(items)); err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func fEscape(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	s, err := r.str(v, "escape")
	if err != nil {
		return nil, err
	}
	// each of & < > " ' becomes at most 5 bytes
	special := int64(strings.Count(s, "&") + strings.Count(s, "<") + strings.Count(s, ">") + strings.Count(s, `"`) + strings.Count(s, "'"))
	if err := r.grow(int64(len(s))+4*special, "escape of %d bytes", len(s)); err != nil {
		return nil, err
	}
	return html.EscapeString(s), nil // & < > " '  (jinja2 uses &#34; &#39; too)
}

func fReplace(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	s, err := r.str(v, "replace")
	if err != nil {
		return nil, err
	}
	oldV := param(args, kw, 0, "old", nil)
	newV := param(args, kw, 1, "new", nil)
	if oldV == nil || newV == nil {
		return nil, fmt.Errorf("replace needs old and new strings")
	}
	n := int64(-1)
	if c := param(args, kw, 2, "count", nil); c != nil {
		i, _, isF, ok := asNumber(c)
		if !ok || isF {
			return nil, fmt.Errorf("count must be an integer")
		}
		n = i
	}
	o, err := r.str(oldV, "replace")
	if err != nil {
		return nil, err
	}
	nw, err := r.str(newV, "replace")
	if err != nil {
		return nil, err
	}
	return r.replace(s, o, nw, n)
}

// getItemPath looks up "a.b" paths (and integer indices) like jinja2's
// attribute= arguments do.
func (r *renderer) getItemPath(v any, attr any) (any, error) {
	s, ok := attr.(string)
	if !ok {
		return r.getItem(v, attr, 0)
	}
	if err := r.growN(int64(strings.Count(s, "."))+1, elemSize, "an attribute path of %d bytes", len(s)); err != nil {
		return nil, err
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
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if err := r.growN(int64(len(items)), elemSize, "map of %d items", len(items)); err != nil {
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
		if err := r.work(1); err != nil {
			return nil, err
		}
		if out[i], err = fn(r, it, args[1:], kw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func fSelectAttr(keep bool) filterFunc {
	return func(r *renderer, v any, args []any, _ map[string]any) (any, error) {
		items, err := r.iter(v)
		if err != nil {
			return nil, err
		}
		if err := r.growN(int64(len(items)), elemSize, "selectattr of %d items", len(items)); err != nil {
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
				if ok, err = r.runTest(toStr(args[1]), x, args[2:]); err != nil {
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
	return func(r *renderer, v any, args []any, _ map[string]any) (any, error) {
		items, err := r.iter(v)
		if err != nil {
			return nil, err
		}
		if err := r.growN(int64(len(items)), elemSize, "select of %d items", len(items)); err != nil {
			return nil, err
		}
		out := []any{}
		for _, it := range items {
			var ok bool
			if len(args) == 0 {
				ok = truthy(it)
			} else if ok, err = r.runTest(toStr(args[0]), it, args[1:]); err != nil {
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

func fReverse(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	if s, ok := v.(string); ok {
		if err := r.growN(int64(len(s)), 5, "reverse of %d bytes", len(s)); err != nil {
			return nil, err
		}
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if err := r.growN(int64(len(items)), elemSize, "reverse of %d items", len(items)); err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return out, nil
}

func fUnique(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if err := r.growN(int64(len(items)), elemSize, "unique of %d items", len(items)); err != nil {
		return nil, err
	}
	out := []any{}
	for _, it := range items {
		dup := false
		if r.err != nil {
			return nil, r.err
		}
		for _, o := range out {
			if r.equal(o, it) {
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

// sortValues sorts items stably by key. Keys are computed once, and the
// comparisons a sort needs (n log n) are charged up front, so sorting a
// huge list fails at once instead of after minutes.
func (r *renderer) sortValues(items []any, reverse bool, key func(any) (any, error)) error {
	n := len(items)
	if err := r.work(n * bits.Len(uint(n))); err != nil {
		return err
	}
	if err := r.growN(int64(n), 2*elemSize, "sort of %d items", n); err != nil {
		return err
	}
	keys := make([]any, n)
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	var serr error
	sort.Stable(&keyed{items, keys, func(a, b any) bool {
		c, err := r.order(a, b)
		if err != nil && serr == nil {
			serr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	}})
	return serr
}

type keyed struct {
	items, keys []any
	less        func(a, b any) bool
}

func (k *keyed) Len() int           { return len(k.items) }
func (k *keyed) Less(i, j int) bool { return k.less(k.keys[i], k.keys[j]) }
func (k *keyed) Swap(i, j int) {
	k.items[i], k.items[j] = k.items[j], k.items[i]
	k.keys[i], k.keys[j] = k.keys[j], k.keys[i]
}

// foldKey lower-cases string sort keys unless case-sensitive (charged).
func (r *renderer) foldKey(x any, caseSens bool) (any, error) {
	if s, ok := x.(string); ok && !caseSens {
		if err := r.growN(int64(len(s)), 2, "a sort key of %d bytes", len(s)); err != nil {
			return nil, err
		}
		return strings.ToLower(s), nil
	}
	return x, nil
}

func fSort(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	items, err := r.iter(v)
	if err != nil {
		return nil, err
	}
	if err := r.growN(int64(len(items)), elemSize, "sort of %d items", len(items)); err != nil {
		return nil, err
	}
	items = append([]any(nil), items...)
	reverse := truthy(param(args, kw, 0, "reverse", false))
	caseSens := truthy(param(args, kw, 1, "case_sensitive", false))
	attr := param(args, kw, 2, "attribute", nil)
	key := func(x any) (any, error) {
		if attr != nil {
			y, err := r.getItemPath(x, attr)
			if err != nil {
				return nil, err
			}
			x = y
		}
		return r.foldKey(x, caseSens)
	}
	if err := r.sortValues(items, reverse, key); err != nil {
		return nil, err
	}
	return items, nil
}

func fDictSort(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("dictsort needs a mapping, got %s", typeName(v))
	}
	caseSens := truthy(param(args, kw, 0, "case_sensitive", false))
	by := toStr(param(args, kw, 1, "by", "key"))
	reverse := truthy(param(args, kw, 2, "reverse", false))
	pairs, err := r.items(d)
	if err != nil {
		return nil, err
	}
	idx := 0
	if by == "value" {
		idx = 1
	}
	err = r.sortValues(pairs, reverse, func(x any) (any, error) {
		return r.foldKey(x.(Tuple)[idx], caseSens)
	})
	return pairs, err
}

func fSum(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	items, err := r.iter(v)
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
		if acc, err = r.binOp("+", acc, it); err != nil {
			return nil, err
		}
	}
	return acc, nil
}

func fMinMax(sign int) filterFunc {
	return func(r *renderer, v any, _ []any, _ map[string]any) (any, error) {
		items, err := r.iter(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{hint: "min/max of an empty sequence"}, nil
		}
		best := items[0]
		for _, it := range items[1:] {
			c, err := r.order(it, best)
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

func fIndent(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	s, err := r.str(v, "indent")
	if err != nil {
		return nil, err
	}
	width := param(args, kw, 0, "width", int64(4))
	// every line may get the pad: charge that before building anything
	lines64 := int64(strings.Count(s, "\n")) + 1
	var pad string
	switch w := width.(type) {
	case string:
		if err := r.growN(lines64, int64(len(w)), "indent of %d lines by %d bytes", lines64, len(w)); err != nil {
			return nil, err
		}
		pad = w
	default:
		n, _, _, ok := asNumber(w)
		if !ok {
			return nil, fmt.Errorf("width must be an integer or string")
		}
		n = max(n, 0)
		if err := r.growN(lines64+1, n, "indent width %d", n); err != nil {
			return nil, err
		}
		pad = strings.Repeat(" ", int(n))
	}
	if err := r.growN(lines64, 2*elemSize, "indent of %d lines", lines64); err != nil {
		return nil, err
	}
	if err := r.grow(int64(len(s)), "indent of %d bytes", len(s)); err != nil {
		return nil, err
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

func fCenter(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	s, err := r.str(v, "center")
	if err != nil {
		return nil, err
	}
	w, _, _, _ := asNumber(param(args, kw, 0, "width", int64(80)))
	runes := int64(utf8.RuneCountInString(s))
	if w <= runes {
		return s, nil
	}
	// the padding is w - runes bytes: charge it before strings.Repeat
	if err := r.growN(2, max(w-runes, int64(len(s))), "center width %d", w); err != nil {
		return nil, err
	}
	n := int(w - runes)
	left := n / 2
	if n%2 == 1 && int(w)%2 == 1 { // Python's str.center puts the odd space on the left for odd widths
		left++
	}
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", n-left), nil
}

func fFormat(r *renderer, v any, args []any, kw map[string]any) (any, error) {
	f, err := r.str(v, "format")
	if err != nil {
		return nil, err
	}
	if len(kw) > 0 {
		d := NewDict()
		for _, k := range sortedKeys(kw) {
			d.set(k, kw[k])
		}
		return r.pyPercent(f, d)
	}
	return r.pyPercent(f, Tuple(args))
}

func fAttr(r *renderer, v any, args []any, _ map[string]any) (any, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("attr needs one name")
	}
	return r.getAttr(v, toStr(args[0]), 0)
}

// jinjaTitle is jinja2's title filter: upper-case the first letter of each
// word (words start after whitespace, '-', or an opening bracket: jinja2's
// regex [-\s({\[<]+). It scans instead of collecting regexp matches, which
// would allocate far more than the string for "a a a ...".
func jinjaTitle(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	word := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '-', ' ', '\t', '\n', '\f', '\r', '(', '{', '[', '<': // RE2's \s is ASCII-only
			b.WriteString(pyCapitalize(s[word:i]))
			b.WriteByte(s[i])
			word = i + 1
		}
	}
	b.WriteString(pyCapitalize(s[word:]))
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
