// Package jinja is a Jinja2 interpreter for Hugging Face chat templates. It
// renders templates the way transformers' apply_chat_template does: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension, transformers' tojson, raise_exception and
// strftime_now, and Python semantics for values, operators, string and dict
// methods.
//
// Not supported (an error names them): template inheritance and includes
// ({% extends %}, {% include %}, {% import %}, {% block %}), {% call %},
// and autoescaping. Filters some engines add for chat templates
// (from_json/fromjson) are there too.
//
// Templates come with model files and are untrusted: every Render is bounded
// by Template.Limits (a memory budget charged before each allocation, a step
// count and a deadline) and fails with a *LimitError past them.
package jinja

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Template is a parsed template; it is safe for concurrent Render calls.
type Template struct {
	body []node
	// Now is the clock strftime_now reads (time.Now when nil).
	Now func() time.Time
	// Limits bound the memory and time of each Render (zero: defaults).
	Limits Limits
}

// Parse compiles template source.
func Parse(src string) (*Template, error) {
	pieces, err := lex(src)
	if err != nil {
		return nil, err
	}
	body, err := parse(pieces)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// maxDepth bounds macro recursion so a template cannot overflow the stack.
const maxDepth = 200

// maxSteps is the default Limits.MaxSteps: loops over large ranges, huge
// sorts and comparisons fail instead of running for hours (a var so tests
// can lower it).
var maxSteps = 1 << 24

type frame struct {
	vars   map[string]any
	parent *frame
}

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type renderer struct {
	t     *Template
	depth int

	// budget (limits.go): bytes charged so far, steps taken, the first
	// limit error (sticky)
	maxBytes, used  int64
	maxSteps, steps int
	timeout         time.Duration
	deadline        time.Time
	err             error
}

// step counts one loop iteration or macro call; it charges the scope it
// gets and checks the deadline every time, as one iteration can be slow.
func (r *renderer) step(line int) error {
	if err := r.work(1); err != nil {
		return at(line, err, nil)
	}
	if err := r.grow(frameSize, "a loop iteration or macro call"); err != nil {
		return at(line, err, nil)
	}
	return at(line, r.checkDeadline(), nil)
}

// frameSize is what a loop iteration or macro call is charged: its scope
// map and loop object.
const frameSize = 128

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// ExceptionError is what raise_exception(msg) produces.
type ExceptionError struct {
	Line int
	Msg  string
}

func (e *ExceptionError) Error() string {
	return fmt.Sprintf("jinja: line %d: template raised an exception: %s", e.Line, e.Msg)
}

// Render evaluates the template with vars (converted with FromGo) on top of
// the globals: namespace, dict, range, raise_exception, strftime_now.
func (t *Template) Render(vars map[string]any) (string, error) {
	r := &renderer{t: t}
	r.setLimits(t.Limits)
	globals := &frame{vars: r.globals()}
	root := &frame{vars: map[string]any{}, parent: globals}
	for k, v := range vars {
		root.vars[k] = FromGo(v)
	}
	var b strings.Builder
	err := r.exec(t.body, root, &b)
	if r.err != nil {
		// a limit was hit; whatever error surfaced, that is the cause
		err = r.err
	}
	if err == errBreak || err == errContinue {
		err = &Error{Msg: "{% break %} or {% continue %} outside a loop"}
	}
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

func (r *renderer) write(b *strings.Builder, s string, line int) error {
	if err := r.grow(int64(len(s)), "writing %d bytes of output", len(s)); err != nil {
		return at(line, err, nil)
	}
	b.WriteString(s)
	return nil
}

func (r *renderer) exec(nodes []node, f *frame, b *strings.Builder) error {
	for _, n := range nodes {
		if err := r.execNode(n, f, b); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) execNode(n node, f *frame, b *strings.Builder) error {
	switch n := n.(type) {
	case *textNode:
		return r.write(b, n.s, 0)
	case *outputNode:
		v, err := r.eval(n.x, f)
		if err != nil {
			return err
		}
		s, err := r.str(v, "printing")
		if err != nil {
			return at(n.line, err, nil)
		}
		return r.write(b, s, n.line)
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, f)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.exec(n.bodies[i], f, b)
			}
		}
		return r.exec(n.els, f, b)
	case *forNode:
		return r.execFor(n, f, b)
	case *setNode:
		v, err := r.eval(n.x, f)
		if err != nil {
			return err
		}
		if n.nsObj != "" {
			obj, ok := f.lookup(n.nsObj)
			ns, isNS := obj.(*Namespace)
			if !ok || !isNS {
				return errorf(n.line, "cannot assign attribute on '%s': it is not a namespace() object", n.nsObj)
			}
			if strings.HasPrefix(n.nsAttr, "_") {
				return errorf(n.line, "cannot store underscore-prefixed attribute %q on a namespace", n.nsAttr)
			}
			ns.d.set(n.nsAttr, v)
			return nil
		}
		if len(n.targets) == 1 {
			f.vars[n.targets[0]] = v
			return nil
		}
		items, err := r.iter(v)
		if err != nil {
			return at(n.line, err, func() error { return errorf(n.line, "cannot unpack: %v", err) })
		}
		if len(items) != len(n.targets) {
			return errorf(n.line, "cannot unpack %d values into %d names", len(items), len(n.targets))
		}
		for i, t := range n.targets {
			f.vars[t] = items[i]
		}
		return nil
	case *setBlockNode:
		var sb strings.Builder
		if err := r.exec(n.body, f, &sb); err != nil {
			return err
		}
		var v any = sb.String()
		for _, fl := range n.filters {
			var err error
			if v, err = r.applyFilter(fl, v, f); err != nil {
				return err
			}
		}
		f.vars[n.name] = v
		return nil
	case *macroNode:
		f.vars[n.name] = r.makeMacro(n, f)
		return nil
	case *filterBlockNode:
		var sb strings.Builder
		if err := r.exec(n.body, f, &sb); err != nil {
			return err
		}
		var v any = sb.String()
		for _, fl := range n.filters {
			var err error
			if v, err = r.applyFilter(fl, v, f); err != nil {
				return err
			}
		}
		s, err := r.str(v, "printing")
		if err != nil {
			return at(n.line, err, nil)
		}
		return r.write(b, s, n.line)
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("jinja: internal error: unknown node %T", n)
}

// loopObj is the loop variable: one per run of a loop, its index moved
// each iteration as jinja2's LoopContext is (so loop.changed remembers
// across iterations).
type loopObj struct {
	items  []any
	index  int
	length int
	depth  int // 0 at the top; one more in each loop(...) call of a recursive loop

	last    []any // the arguments of the last loop.changed call
	changed bool  // whether there was one

	r *renderer
	// of a recursive loop: what loop(items) runs again, and in which scope
	n     *forNode
	outer *frame
}

func (r *renderer) execFor(n *forNode, f *frame, b *strings.Builder) error {
	it, err := r.eval(n.iter, f)
	if err != nil {
		return err
	}
	return r.runLoop(n, it, f, b, 0)
}

// runLoop runs the loop n over it in the scope f; depth is the recursion
// depth of a recursive loop.
func (r *renderer) runLoop(n *forNode, it any, f *frame, b *strings.Builder, depth int) error {
	items, err := r.iter(it)
	if err != nil {
		return at(n.line, err, func() error { return errorf(n.line, "{%% for %%}: %v", err) })
	}
	bind := func(fr *frame, item any) error {
		if len(n.targets) == 1 {
			fr.vars[n.targets[0]] = item
			return nil
		}
		parts, err := r.iter(item)
		if err != nil {
			return at(n.line, err, func() error { return errorf(n.line, "cannot unpack loop item: %v", err) })
		}
		if len(parts) != len(n.targets) {
			return errorf(n.line, "cannot unpack %d values into %d loop variables", len(parts), len(n.targets))
		}
		for i, t := range n.targets {
			fr.vars[t] = parts[i]
		}
		return nil
	}
	if n.cond != nil {
		// the "if" filter decides which items the loop (and loop.length) sees
		var kept []any
		for _, item := range items {
			if err := r.step(n.line); err != nil {
				return err
			}
			fr := &frame{vars: map[string]any{}, parent: f}
			if err := bind(fr, item); err != nil {
				return err
			}
			v, err := r.eval(n.cond, fr)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.exec(n.els, f, b)
	}
	lo := &loopObj{items: items, length: len(items), depth: depth, r: r}
	if n.recursive {
		lo.n, lo.outer = n, f
	}
	for i, item := range items {
		if err := r.step(n.line); err != nil {
			return err
		}
		lo.index = i
		// every iteration gets a fresh scope, as in jinja2: assignments in
		// the body neither leak out nor survive to the next iteration
		fr := &frame{vars: map[string]any{"loop": lo}, parent: f}
		if err := bind(fr, item); err != nil {
			return err
		}
		err := r.exec(n.body, fr, b)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (r *renderer) makeMacro(n *macroNode, def *frame) Func {
	return func(args []any, kwargs map[string]any) (any, error) {
		if len(args) > len(n.params) {
			return nil, errorf(n.line, "macro %s takes %d arguments, got %d", n.name, len(n.params), len(args))
		}
		if err := r.step(n.line); err != nil {
			return nil, err
		}
		// a call builds more than a loop iteration: its output builder
		if err := r.grow(3*frameSize, "a call of macro %s", n.name); err != nil {
			return nil, at(n.line, err, nil)
		}
		if r.depth >= maxDepth {
			return nil, errorf(n.line, "macro %s: recursion deeper than %d", n.name, maxDepth)
		}
		fr := &frame{vars: map[string]any{}, parent: def}
		for i, p := range n.params {
			switch {
			case i < len(args):
				fr.vars[p] = args[i]
			default:
				if v, ok := kwargs[p]; ok {
					fr.vars[p] = v
				} else if n.defaults[i] != nil {
					v, err := r.eval(n.defaults[i], fr)
					if err != nil {
						return nil, err
					}
					fr.vars[p] = v
				} else {
					fr.vars[p] = Undefined{hint: fmt.Sprintf("parameter '%s' of macro %s was not given", p, n.name)}
				}
			}
		}
		for k := range kwargs {
			found := false
			for _, p := range n.params {
				found = found || p == k
			}
			if !found {
				return nil, errorf(n.line, "macro %s has no parameter named '%s'", n.name, k)
			}
		}
		r.depth++
		defer func() { r.depth-- }()
		var sb strings.Builder
		if err := r.exec(n.body, fr, &sb); err != nil {
			if err == errBreak || err == errContinue {
				return nil, errorf(n.line, "{%% break %%} or {%% continue %%} outside a loop in macro %s", n.name)
			}
			return nil, err
		}
		return sb.String(), nil
	}
}

func lineOf(x expr) int {
	switch e := x.(type) {
	case *nameExpr:
		return e.line
	case *attrExpr:
		return e.line
	case *itemExpr:
		return e.line
	case *sliceExpr:
		return e.line
	case *callExpr:
		return e.line
	case *filterExpr:
		return e.line
	case *testExpr:
		return e.line
	case *unaryExpr:
		return e.line
	case *binExpr:
		return e.line
	case *compareExpr:
		return e.line
	case *condExpr:
		return e.line
	}
	return 0
}

func undefErr(line int, u Undefined) error {
	return errorf(line, "%s", u.msg())
}

func (r *renderer) eval(x expr, f *frame) (any, error) {
	switch e := x.(type) {
	case *literal:
		return e.v, nil
	case *nameExpr:
		if v, ok := f.lookup(e.name); ok {
			return v, nil
		}
		return Undefined{hint: fmt.Sprintf("'%s' is undefined", e.name)}, nil
	case *listExpr:
		if err := r.growN(int64(len(e.items)), elemSize, "a list literal"); err != nil {
			return nil, err
		}
		out := make([]any, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it, f)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		if e.tuple {
			return Tuple(out), nil
		}
		return out, nil
	case *dictExpr:
		if err := r.growN(int64(len(e.keys)), 2*elemSize, "a dict literal"); err != nil {
			return nil, err
		}
		d := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], f)
			if err != nil {
				return nil, err
			}
			if !hashable(k) {
				return nil, errorf(lineOf(e.keys[i]), "unhashable dict key of type '%s'", typeName(k))
			}
			v, err := r.eval(e.vals[i], f)
			if err != nil {
				return nil, err
			}
			d.set(normKey(k), v)
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		return r.getAttr(obj, e.name, e.line)
	case *itemExpr:
		obj, err := r.eval(e.obj, f)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(e.key, f)
		if err != nil {
			return nil, err
		}
		return r.getItem(obj, key, e.line)
	case *sliceExpr:
		return r.evalSlice(e, f)
	case *callExpr:
		return r.evalCall(e, f)
	case *filterExpr:
		v, err := r.eval(e.x, f)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, v, f)
	case *testExpr:
		return r.evalTest(e, f)
	case *unaryExpr:
		v, err := r.eval(e.x, f)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-", "+":
			i, fl, isF, ok := asNumber(v)
			if !ok {
				if u, isU := v.(Undefined); isU {
					return nil, undefErr(e.line, u)
				}
				return nil, errorf(e.line, "bad operand type for unary %s: '%s'", e.op, typeName(v))
			}
			if e.op == "+" {
				if isF {
					return fl, nil
				}
				return i, nil
			}
			if isF {
				return -fl, nil
			}
			return -i, nil
		}
	case *binExpr:
		l, err := r.eval(e.l, f)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(e.r, f)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(e.r, f)
		}
		rv, err := r.eval(e.r, f)
		if err != nil {
			return nil, err
		}
		v, err := r.binOp(e.op, l, rv)
		if err != nil {
			return nil, at(e.line, err, func() error { return errorf(e.line, "%v", err) })
		}
		return v, nil
	case *compareExpr:
		l, err := r.eval(e.first, f)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			rv, err := r.eval(e.rest[i], f)
			if err != nil {
				return nil, err
			}
			ok, err := r.compare(op, l, rv)
			if err != nil {
				return nil, at(e.line, err, func() error { return errorf(e.line, "%v", err) })
			}
			if !ok {
				return false, nil
			}
			l = rv
		}
		return true, nil
	case *condExpr:
		c, err := r.eval(e.cond, f)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.a, f)
		}
		if e.b == nil {
			return Undefined{hint: "the conditional expression had no else branch"}, nil
		}
		return r.eval(e.b, f)
	}
	return nil, fmt.Errorf("jinja: internal error: unknown expression %T", x)
}

func (r *renderer) compare(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return r.equal(a, b), r.err
	case "!=":
		return !r.equal(a, b), r.err
	case "in":
		return r.contains(b, a)
	case "notin":
		ok, err := r.contains(b, a)
		return !ok, err
	}
	c, err := r.order(a, b)
	if err != nil {
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, fmt.Errorf("unknown comparison %s", op)
}

func (r *renderer) getAttr(obj any, name string, line int) (any, error) {
	switch x := unTuple(obj).(type) {
	case Undefined:
		return nil, undefErr(line, x)
	case *Dict:
		if m := r.dictMethod(x, name); m != nil {
			return m, nil
		}
		if v, ok := x.m[name]; ok {
			return v, nil
		}
		return Undefined{hint: fmt.Sprintf("'dict object' has no attribute '%s'", name)}, nil
	case *Namespace:
		if v, ok := x.d.m[name]; ok {
			return v, nil
		}
	case string:
		if m := r.strMethod(x, name); m != nil {
			return m, nil
		}
	case []any:
		if m := r.listMethod(x, name); m != nil {
			return m, nil
		}
	case *loopObj:
		if v, ok := x.attr(name); ok {
			return v, nil
		}
	case *cycler:
		if v, ok := x.attr(name); ok {
			return v, nil
		}
	}
	return Undefined{hint: fmt.Sprintf("'%s object' has no attribute '%s'", typeName(obj), name)}, nil
}

func (r *renderer) getItem(obj, key any, line int) (any, error) {
	obj = unTuple(obj)
	switch x := obj.(type) {
	case Undefined:
		return nil, undefErr(line, x)
	case *Dict:
		if v, ok := x.get(key); ok {
			return v, nil
		}
		if s, ok := key.(string); ok {
			if m := r.dictMethod(x, s); m != nil {
				return m, nil
			}
		}
		return Undefined{hint: fmt.Sprintf("'dict object' has no attribute %s", repr(key))}, nil
	case []any, string:
		i, _, isF, ok := asNumber(key)
		if !ok || isF {
			if s, isS := key.(string); isS {
				return r.getAttr(obj, s, line)
			}
			return Undefined{hint: fmt.Sprintf("'%s object' has no attribute %s", typeName(obj), repr(key))}, nil
		}
		if l, ok := x.([]any); ok {
			n := int64(len(l))
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return Undefined{hint: fmt.Sprintf("list index %d out of range", i)}, nil
			}
			return l[i], nil
		}
		// walk to the i-th character rather than convert the string to
		// runes: content[0] on a long message allocates nothing
		str := x.(string)
		n := int64(utf8.RuneCountInString(str))
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			return Undefined{hint: fmt.Sprintf("string index %d out of range", i)}, nil
		}
		for k := range str {
			if i == 0 {
				c, _ := utf8.DecodeRuneInString(str[k:])
				return string(c), nil
			}
			i--
		}
	case *Namespace, *loopObj, *cycler:
		if s, ok := key.(string); ok {
			return r.getAttr(obj, s, line)
		}
	}
	return Undefined{hint: fmt.Sprintf("'%s object' has no attribute %s", typeName(obj), repr(key))}, nil
}

func (r *renderer) evalSlice(e *sliceExpr, f *frame) (any, error) {
	obj, err := r.eval(e.obj, f)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, b := range []expr{e.start, e.stop, e.step} {
		if b == nil {
			continue
		}
		v, err := r.eval(b, f)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, _, isF, ok := asNumber(v)
		if !ok || isF {
			return nil, errorf(e.line, "slice indices must be integers or None, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	var items []any
	var runes []rune
	n, isStr := 0, false
	switch x := unTuple(obj).(type) {
	case Undefined:
		return nil, undefErr(e.line, x)
	case []any:
		items = x
		n = len(x)
	case string:
		if err := r.growN(int64(len(x)), 4, "slicing a string of %d bytes", len(x)); err != nil {
			return nil, at(e.line, err, nil)
		}
		runes, isStr = []rune(x), true
		n = len(runes)
		if err := r.growN(int64(n), 8, "slicing a string of %d bytes", len(x)); err != nil {
			return nil, at(e.line, err, nil)
		}
	default:
		return nil, errorf(e.line, "'%s' object is not subscriptable", typeName(obj))
	}
	if !isStr {
		if err := r.growN(int64(n), 8+elemSize, "slicing a list of %d items", n); err != nil {
			return nil, at(e.line, err, nil)
		}
	}
	idx, err := sliceIndices(n, bounds[0], bounds[1], bounds[2])
	if err != nil {
		return nil, errorf(e.line, "%v", err)
	}
	if isStr {
		out := make([]rune, len(idx))
		for k, i := range idx {
			out[k] = runes[i]
		}
		return string(out), nil
	}
	out := make([]any, len(idx))
	for k, i := range idx {
		out[k] = items[i]
	}
	return out, nil
}

// sliceIndices follows Python's slice.indices.
func sliceIndices(n int, start, stop, step *int64) ([]int, error) {
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	ln := int64(n)
	clamp := func(p *int64, def int64, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += ln
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var out []int
	if st > 0 {
		a := clamp(start, 0, 0, ln)
		b := clamp(stop, ln, 0, ln)
		for i := a; i < b; i += st {
			out = append(out, int(i))
		}
	} else {
		a := clamp(start, ln-1, -1, ln-1)
		b := clamp(stop, -1, -1, ln-1)
		if stop == nil {
			b = -1
		}
		for i := a; i > b; i += st {
			out = append(out, int(i))
		}
	}
	return out, nil
}

func (r *renderer) evalArgs(args []expr, kwName []string, kwVal []expr, f *frame) ([]any, map[string]any, error) {
	av := make([]any, len(args))
	for i, a := range args {
		v, err := r.eval(a, f)
		if err != nil {
			return nil, nil, err
		}
		av[i] = v
	}
	var kw map[string]any
	if len(kwName) > 0 {
		kw = map[string]any{}
		for i, k := range kwName {
			v, err := r.eval(kwVal[i], f)
			if err != nil {
				return nil, nil, err
			}
			kw[k] = v
		}
	}
	return av, kw, nil
}

func (r *renderer) evalCall(e *callExpr, f *frame) (any, error) {
	fn, err := r.eval(e.fn, f)
	if err != nil {
		return nil, err
	}
	args, kw, err := r.evalArgs(e.args, e.kwName, e.kwVal, f)
	if err != nil {
		return nil, err
	}
	if lo, ok := fn.(*loopObj); ok {
		fn = Func(lo.call)
	}
	switch c := fn.(type) {
	case Func:
		v, err := c(args, kw)
		if err == nil {
			err = r.err // a method may have hit a limit and returned a partial value
		}
		if err != nil {
			var le *LimitError
			if errors.As(err, &le) {
				return nil, at(e.line, le, nil)
			}
			var je *Error
			var ee *ExceptionError
			if errors.As(err, &ee) {
				if ee.Line == 0 {
					ee.Line = e.line
				}
				return nil, err
			}
			if errors.As(err, &je) {
				return nil, err
			}
			return nil, errorf(e.line, "%s", err.Error())
		}
		return v, nil
	case Undefined:
		return nil, undefErr(e.line, c)
	}
	return nil, errorf(e.line, "'%s' object is not callable", typeName(fn))
}

// call is loop(items) in the body of a recursive loop: the body run on
// items one level deeper, its output returned. It is bounded like macro
// recursion.
func (lo *loopObj) call(args []any, kw map[string]any) (any, error) {
	if lo.n == nil {
		return nil, fmt.Errorf("the loop must have the 'recursive' marker to be called recursively")
	}
	if len(args) != 1 || len(kw) > 0 {
		return nil, fmt.Errorf("loop() takes one iterable, got %d arguments", len(args)+len(kw))
	}
	r := lo.r
	if err := r.grow(3*frameSize, "a recursive loop() call"); err != nil {
		return nil, at(lo.n.line, err, nil)
	}
	if r.depth >= maxDepth {
		return nil, errorf(lo.n.line, "recursive loop deeper than %d levels", maxDepth)
	}
	r.depth++
	defer func() { r.depth-- }()
	var sb strings.Builder
	if err := r.runLoop(lo.n, args[0], lo.outer, &sb, lo.depth+1); err != nil {
		return nil, err
	}
	return sb.String(), nil
}

func (lo *loopObj) attr(name string) (any, bool) {
	switch name {
	case "index":
		return int64(lo.index + 1), true
	case "index0":
		return int64(lo.index), true
	case "revindex":
		return int64(lo.length - lo.index), true
	case "revindex0":
		return int64(lo.length - lo.index - 1), true
	case "first":
		return lo.index == 0, true
	case "last":
		return lo.index == lo.length-1, true
	case "length":
		return int64(lo.length), true
	case "depth":
		return int64(lo.depth + 1), true
	case "depth0":
		return int64(lo.depth), true
	case "changed":
		// true when the arguments differ from the last call's (or first)
		return Func(func(args []any, _ map[string]any) (any, error) {
			same := lo.changed && len(args) == len(lo.last)
			for i := 0; same && i < len(args); i++ {
				same = lo.r.equal(args[i], lo.last[i])
			}
			lo.last, lo.changed = args, true
			return !same, nil
		}), true
	case "previtem":
		if lo.index > 0 {
			return lo.items[lo.index-1], true
		}
		return Undefined{hint: "there is no previous item"}, true
	case "nextitem":
		if lo.index+1 < lo.length {
			return lo.items[lo.index+1], true
		}
		return Undefined{hint: "there is no next item"}, true
	case "cycle":
		return Func(func(args []any, _ map[string]any) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("loop.cycle() needs at least one argument")
			}
			return args[lo.index%len(args)], nil
		}), true
	}
	return nil, false
}

func (r *renderer) globals() map[string]any {
	now := r.t.Now
	if now == nil {
		now = time.Now
	}
	return map[string]any{
		"raise_exception": Func(func(args []any, _ map[string]any) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = toStr(args[0])
			}
			return nil, &ExceptionError{Msg: msg}
		}),
		"strftime_now": Func(func(args []any, _ map[string]any) (any, error) {
			if len(args) != 1 {
				return nil, fmt.Errorf("strftime_now takes one format string")
			}
			s, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("strftime_now: format must be a string, not %s", typeName(args[0]))
			}
			// a directive expands to at most 9 bytes ("Wednesday" for %A)
			if err := r.growN(int64(len(s)), 5, "strftime_now of a %d-byte format", len(s)); err != nil {
				return nil, err
			}
			return strftime(now(), s), nil
		}),
		"joiner": Func(joiner),
		"cycler": Func(func(args []any, kw map[string]any) (any, error) {
			if err := r.growN(int64(len(args))+2, elemSize, "cycler() of %d items", len(args)); err != nil {
				return nil, err
			}
			return newCycler(args, kw)
		}),
		"namespace": Func(func(args []any, kw map[string]any) (any, error) {
			d := NewDict()
			for _, a := range args {
				src, ok := a.(*Dict)
				if !ok {
					return nil, fmt.Errorf("namespace() takes a dict or keyword arguments, not %s", typeName(a))
				}
				if err := r.growN(int64(src.Len()), 2*elemSize, "namespace() of %d keys", src.Len()); err != nil {
					return nil, err
				}
				for _, k := range src.keys {
					d.set(k, src.m[k])
				}
			}
			for _, k := range sortedKeys(kw) {
				if strings.HasPrefix(k, "_") {
					return nil, fmt.Errorf("cannot store underscore-prefixed attribute %q on a namespace", k)
				}
				d.set(k, kw[k])
			}
			return &Namespace{d: d}, nil
		}),
		"dict": Func(func(args []any, kw map[string]any) (any, error) {
			d := NewDict()
			for _, a := range args {
				src, ok := a.(*Dict)
				if !ok {
					return nil, fmt.Errorf("dict() takes a dict or keyword arguments, not %s", typeName(a))
				}
				if err := r.growN(int64(src.Len()), 2*elemSize, "dict() of %d keys", src.Len()); err != nil {
					return nil, err
				}
				for _, k := range src.keys {
					d.set(k, src.m[k])
				}
			}
			for _, k := range sortedKeys(kw) {
				d.set(k, kw[k])
			}
			return d, nil
		}),
		"range": Func(func(args []any, _ map[string]any) (any, error) {
			var p [3]int64
			p[2] = 1
			for i, a := range args {
				n, _, isF, ok := asNumber(a)
				if !ok || isF || i > 2 {
					return nil, fmt.Errorf("range() takes up to three integers")
				}
				p[i] = n
			}
			start, stop, step := int64(0), p[0], int64(1)
			if len(args) >= 2 {
				start, stop = p[0], p[1]
			}
			if len(args) == 3 {
				step = p[2]
			}
			if step == 0 {
				return nil, fmt.Errorf("range() step must not be zero")
			}
			// the length first (in uint64: stop-start can overflow int64),
			// so range(10**12) is refused before anything is allocated
			var count uint64
			switch {
			case step > 0 && stop > start:
				count = (uint64(stop-start) + uint64(step) - 1) / uint64(step)
			case step < 0 && stop < start:
				count = (uint64(start-stop) + uint64(-step) - 1) / uint64(-step)
			}
			if count > 1<<20 {
				return nil, fmt.Errorf("range() too long: %d items, at most %d", count, 1<<20)
			}
			if err := r.growN(int64(count), elemSize, "range() of %d items", count); err != nil {
				return nil, err
			}
			out := make([]any, 0, count)
			for i := start; uint64(len(out)) < count; i += step {
				out = append(out, i)
			}
			return out, nil
		}),
	}
}
