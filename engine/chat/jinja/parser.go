package jinja

import (
	"strings"
)

// ---- AST ----

type node interface{}

type textNode struct{ s string }

type outputNode struct {
	x    expr
	line int
}

type ifNode struct {
	conds  []expr
	bodies [][]node
	els    []node
}

type forNode struct {
	targets []string
	iter    expr
	cond    expr // optional "if" filter
	body    []node
	els     []node
	line    int
	// recursive: the body may call loop(items) to run itself on items
	recursive bool
}

type setNode struct {
	targets []string // one or more names (tuple unpacking)
	nsObj   string   // "ns" in {% set ns.attr = ... %}
	nsAttr  string
	x       expr
	line    int
}

type setBlockNode struct {
	name    string
	body    []node
	filters []*filterExpr // applied to the captured text; x is nil
	line    int
}

type macroNode struct {
	name     string
	params   []string
	defaults []expr // nil where no default
	body     []node
	line     int
}

type filterBlockNode struct {
	filters []*filterExpr
	body    []node
	line    int
}

type breakNode struct{ line int }
type continueNode struct{ line int }

type expr interface{}

type literal struct{ v any }

type nameExpr struct {
	name string
	line int
}

type listExpr struct {
	items []expr
	tuple bool
}

type dictExpr struct{ keys, vals []expr }

type attrExpr struct {
	obj  expr
	name string
	line int
}

type itemExpr struct {
	obj, key expr
	line     int
}

type sliceExpr struct {
	obj               expr
	start, stop, step expr // nil when omitted
	line              int
}

type callExpr struct {
	fn     expr
	args   []expr
	kwName []string
	kwVal  []expr
	line   int
}

type filterExpr struct {
	x      expr // nil inside a filter block / set block
	name   string
	args   []expr
	kwName []string
	kwVal  []expr
	line   int
}

type testExpr struct {
	x      expr
	name   string
	args   []expr
	negate bool
	line   int
}

type unaryExpr struct {
	op   string // "not", "-", "+"
	x    expr
	line int
}

type binExpr struct {
	op   string // + - * / // % ** ~ and or
	l, r expr
	line int
}

type compareExpr struct {
	first expr
	ops   []string // == != < <= > >= in notin
	rest  []expr
	line  int
}

type condExpr struct {
	cond, a, b expr // b nil: undefined when cond is false
	line       int
}

// ---- statement parser ----

type parser struct {
	pieces []piece
	i      int
	used   []usedName // filters and tests, checked after parsing
	nest   int        // open blocks, bounded like expression nesting
	// soft is set directly inside an {% if %} (not in a loop, macro or
	// block nested in it): like jinja2's soft frames, unknown filters and
	// tests there are reported only when reached.
	soft bool
}

// setSoft sets p.soft and returns what restores it.
func (p *parser) setSoft(v bool) func() {
	old := p.soft
	p.soft = v
	return func() { p.soft = old }
}

const maxBlockDepth = 200

type usedName struct {
	filter bool
	name   string
	line   int
	soft   bool // checked only when evaluated
}

// blockEnd reports a statement tag that ends the current body.
type blockEnd struct {
	name string
	ts   *tokStream
	line int
}

func parse(pieces []piece) ([]node, error) {
	p := &parser{pieces: pieces}
	body, end, err := p.parseBody(nil)
	if err != nil {
		return nil, err
	}
	if end != nil {
		return nil, errorf(end.line, "unexpected {%% %s %%}: no block is open", end.name)
	}
	// jinja2 rejects unknown filters and tests when compiling, except in
	// an if or conditional expression, where they fail only when reached
	for _, u := range p.used {
		if u.soft {
			continue
		}
		if u.filter && !knownFilter(u.name) {
			return nil, errorf(u.line, "no filter named '%s'", u.name)
		}
		if !u.filter && !knownTest(u.name) {
			return nil, errorf(u.line, "no test named '%s'", u.name)
		}
	}
	return body, nil
}

// parseBody parses nodes until one of the names in stops (returned as end)
// or the end of the template (end nil; an error if stops is non-empty).
func (p *parser) parseBody(stops []string) ([]node, *blockEnd, error) {
	p.nest++
	defer func() { p.nest-- }()
	if p.nest > maxBlockDepth {
		line := 0
		if p.i > 0 {
			line = p.pieces[p.i-1].line
		}
		return nil, nil, errorf(line, "blocks nested deeper than %d levels", maxBlockDepth)
	}
	var out []node
	for p.i < len(p.pieces) {
		pc := p.pieces[p.i]
		p.i++
		switch pc.kind {
		case pText:
			out = append(out, &textNode{pc.text})
		case pOutput:
			ts := &tokStream{toks: pc.toks, line: pc.line, used: &p.used, soft: p.soft}
			if len(pc.toks) == 0 {
				return nil, nil, errorf(pc.line, "empty {{ }} expression")
			}
			x, err := ts.parseTuple()
			if err != nil {
				return nil, nil, err
			}
			if err := ts.expectEnd(); err != nil {
				return nil, nil, err
			}
			out = append(out, &outputNode{x: x, line: pc.line})
		case pStmt:
			ts := &tokStream{toks: pc.toks, line: pc.line, used: &p.used, soft: p.soft}
			kw := ts.next()
			if kw.kind != tkName {
				return nil, nil, errorf(pc.line, "expected a statement name after {%%, got %s", kw)
			}
			for _, s := range stops {
				if kw.val == s {
					return out, &blockEnd{name: kw.val, ts: ts, line: pc.line}, nil
				}
			}
			n, err := p.parseStmt(kw.val, ts, pc.line)
			if err != nil {
				return nil, nil, err
			}
			if n != nil {
				out = append(out, n)
			}
		}
	}
	if len(stops) > 0 {
		return nil, nil, &Error{Msg: "unexpected end of template: expected {% " + strings.Join(stops, " %} or {% ") + " %}"}
	}
	return out, nil, nil
}

func isEndTag(name string) bool {
	switch name {
	case "endif", "endfor", "endset", "endmacro", "endfilter", "endgeneration", "endcall", "elif", "else":
		return true
	}
	return false
}

func (p *parser) parseStmt(kw string, ts *tokStream, line int) (node, error) {
	openedAt := func(e *Error, what string) error {
		if e.Line == 0 {
			e.Msg += " (to close the " + what + " opened on line " + itoa(line) + ")"
		}
		return e
	}
	switch kw {
	case "if":
		n := &ifNode{}
		defer p.setSoft(true)()
		ts.soft = true
		cond, err := ts.parseExpr()
		if err != nil {
			return nil, err
		}
		if err := ts.expectEnd(); err != nil {
			return nil, err
		}
		for {
			body, end, err := p.parseBody([]string{"elif", "else", "endif"})
			if err != nil {
				if e, ok := err.(*Error); ok {
					return nil, openedAt(e, "{% if %}")
				}
				return nil, err
			}
			n.conds = append(n.conds, cond)
			n.bodies = append(n.bodies, body)
			switch end.name {
			case "elif":
				if cond, err = end.ts.parseExpr(); err != nil {
					return nil, err
				}
				if err := end.ts.expectEnd(); err != nil {
					return nil, err
				}
				continue
			case "else":
				if err := end.ts.expectEnd(); err != nil {
					return nil, err
				}
				els, end2, err := p.parseBody([]string{"endif"})
				if err != nil {
					if e, ok := err.(*Error); ok {
						return nil, openedAt(e, "{% if %}")
					}
					return nil, err
				}
				n.els = els
				if err := end2.ts.expectEnd(); err != nil {
					return nil, err
				}
				return n, nil
			default:
				if err := end.ts.expectEnd(); err != nil {
					return nil, err
				}
				return n, nil
			}
		}
	case "for":
		n := &forNode{line: line}
		for {
			t := ts.next()
			if t.kind != tkName {
				return nil, errorf(t.line, "expected a loop variable name in {%% for %%}, got %s", t)
			}
			n.targets = append(n.targets, t.val)
			if !ts.skipOp(",") {
				break
			}
		}
		if !ts.skipName("in") {
			return nil, errorf(line, "expected 'in' in {%% for %%}, got %s", ts.peek())
		}
		iter, err := ts.parseTupleNoCond()
		if err != nil {
			return nil, err
		}
		n.iter = iter
		// the loop filter, body and else run in the loop's own frame: hard
		defer p.setSoft(false)()
		if ts.skipName("if") {
			ts.soft = false
			if n.cond, err = ts.parseExpr(); err != nil {
				return nil, err
			}
		}
		n.recursive = ts.skipName("recursive")
		if err := ts.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"else", "endfor"})
		if err != nil {
			if e, ok := err.(*Error); ok {
				return nil, openedAt(e, "{% for %}")
			}
			return nil, err
		}
		n.body = body
		if end.name == "else" {
			els, end2, err := p.parseBody([]string{"endfor"})
			if err != nil {
				if e, ok := err.(*Error); ok {
					return nil, openedAt(e, "{% for %}")
				}
				return nil, err
			}
			n.els = els
			end = end2
		}
		return n, end.ts.expectEnd()
	case "set":
		t := ts.next()
		if t.kind != tkName {
			return nil, errorf(line, "expected a variable name after {%% set, got %s", t)
		}
		if ts.skipOp(".") {
			a := ts.next()
			if a.kind != tkName {
				return nil, errorf(line, "expected an attribute name after '%s.', got %s", t.val, a)
			}
			if !ts.skipOp("=") {
				return nil, errorf(line, "expected '=' in {%% set %s.%s %%}", t.val, a.val)
			}
			x, err := ts.parseTuple()
			if err != nil {
				return nil, err
			}
			return &setNode{nsObj: t.val, nsAttr: a.val, x: x, line: line}, ts.expectEnd()
		}
		targets := []string{t.val}
		for ts.skipOp(",") {
			t := ts.next()
			if t.kind != tkName {
				return nil, errorf(line, "expected a variable name in {%% set %%}, got %s", t)
			}
			targets = append(targets, t.val)
		}
		if ts.skipOp("=") {
			x, err := ts.parseTuple()
			if err != nil {
				return nil, err
			}
			return &setNode{targets: targets, x: x, line: line}, ts.expectEnd()
		}
		if len(targets) != 1 {
			return nil, errorf(line, "a {%% set %%} block assigns one name")
		}
		n := &setBlockNode{name: targets[0], line: line}
		defer p.setSoft(false)()
		ts.soft = false
		for ts.skipOp("|") {
			f, err := ts.parseFilterCall(nil)
			if err != nil {
				return nil, err
			}
			n.filters = append(n.filters, f)
		}
		if err := ts.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"endset"})
		if err != nil {
			if e, ok := err.(*Error); ok {
				return nil, openedAt(e, "{% set %}")
			}
			return nil, err
		}
		n.body = body
		return n, end.ts.expectEnd()
	case "macro":
		t := ts.next()
		if t.kind != tkName {
			return nil, errorf(line, "expected a macro name, got %s", t)
		}
		n := &macroNode{name: t.val, line: line}
		defer p.setSoft(false)()
		ts.soft = false
		if !ts.skipOp("(") {
			return nil, errorf(line, "expected '(' after macro name %s", t.val)
		}
		for !ts.skipOp(")") {
			if len(n.params) > 0 && !ts.skipOp(",") {
				return nil, errorf(line, "expected ',' or ')' in macro %s parameters, got %s", t.val, ts.peek())
			}
			if ts.skipOp(")") {
				break
			}
			a := ts.next()
			if a.kind != tkName {
				return nil, errorf(line, "expected a parameter name in macro %s, got %s", t.val, a)
			}
			var def expr
			if ts.skipOp("=") {
				var err error
				if def, err = ts.parseExpr(); err != nil {
					return nil, err
				}
			}
			n.params = append(n.params, a.val)
			n.defaults = append(n.defaults, def)
		}
		if err := ts.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"endmacro"})
		if err != nil {
			if e, ok := err.(*Error); ok {
				return nil, openedAt(e, "{% macro %}")
			}
			return nil, err
		}
		n.body = body
		return n, end.ts.expectEnd()
	case "filter":
		n := &filterBlockNode{line: line}
		defer p.setSoft(false)()
		ts.soft = false
		for {
			f, err := ts.parseFilterCall(nil)
			if err != nil {
				return nil, err
			}
			n.filters = append(n.filters, f)
			if !ts.skipOp("|") {
				break
			}
		}
		if err := ts.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"endfilter"})
		if err != nil {
			if e, ok := err.(*Error); ok {
				return nil, openedAt(e, "{% filter %}")
			}
			return nil, err
		}
		n.body = body
		return n, end.ts.expectEnd()
	case "generation":
		// transformers' {% generation %} marks assistant text for masks; it
		// renders its body unchanged.
		defer p.setSoft(false)()
		if err := ts.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"endgeneration"})
		if err != nil {
			if e, ok := err.(*Error); ok {
				return nil, openedAt(e, "{% generation %}")
			}
			return nil, err
		}
		return &filterBlockNode{body: body, line: line}, end.ts.expectEnd()
	case "break":
		return &breakNode{line}, ts.expectEnd()
	case "continue":
		return &continueNode{line}, ts.expectEnd()
	}
	if isEndTag(kw) {
		return nil, errorf(line, "unexpected {%% %s %%}: no matching block is open", kw)
	}
	return nil, errorf(line, "unknown or unsupported statement {%% %s %%}", kw)
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b []byte
	for i > 0 {
		b = append([]byte{digits[i%10]}, b...)
		i /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

// ---- expression parser (precedence as in jinja2's parser) ----

type tokStream struct {
	toks  []token
	pos   int
	line  int
	used  *[]usedName
	soft  bool // filters and tests used here are checked when reached (parser.soft)
	depth int  // expression nesting, bounded so deep input cannot exhaust the stack
}

const maxExprDepth = 100

func (ts *tokStream) peek() token {
	if ts.pos < len(ts.toks) {
		return ts.toks[ts.pos]
	}
	return token{kind: tkEOF, line: ts.line}
}

func (ts *tokStream) peekAt(k int) token {
	if ts.pos+k < len(ts.toks) {
		return ts.toks[ts.pos+k]
	}
	return token{kind: tkEOF, line: ts.line}
}

func (ts *tokStream) next() token {
	t := ts.peek()
	if ts.pos < len(ts.toks) {
		ts.pos++
	}
	return t
}

func (ts *tokStream) isOp(op string) bool {
	t := ts.peek()
	return t.kind == tkOp && t.val == op
}

func (ts *tokStream) isName(n string) bool {
	t := ts.peek()
	return t.kind == tkName && t.val == n
}

func (ts *tokStream) skipOp(op string) bool {
	if ts.isOp(op) {
		ts.pos++
		return true
	}
	return false
}

func (ts *tokStream) skipName(n string) bool {
	if ts.isName(n) {
		ts.pos++
		return true
	}
	return false
}

func (ts *tokStream) expectOp(op string) error {
	if !ts.skipOp(op) {
		t := ts.peek()
		return errorf(t.line, "expected '%s', got %s", op, t)
	}
	return nil
}

func (ts *tokStream) expectEnd() error {
	if t := ts.peek(); t.kind != tkEOF {
		return errorf(t.line, "unexpected %s (expected end of tag)", t)
	}
	return nil
}

// parseTuple parses "a, b" as a tuple, or a single expression.
func (ts *tokStream) parseTuple() (expr, error) { return ts.tuple(true) }

func (ts *tokStream) parseTupleNoCond() (expr, error) { return ts.tuple(false) }

func (ts *tokStream) tuple(withCond bool) (expr, error) {
	parse := ts.parseExpr
	if !withCond {
		parse = ts.parseOr
	}
	first, err := parse()
	if err != nil {
		return nil, err
	}
	if !ts.isOp(",") {
		return first, nil
	}
	items := []expr{first}
	for ts.skipOp(",") {
		if t := ts.peek(); t.kind == tkEOF || (t.kind == tkOp && t.val == ")") || (t.kind == tkName && (t.val == "if" || t.val == "recursive")) { // ("a",) is a 1-tuple
			break
		}
		x, err := parse()
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (ts *tokStream) parseExpr() (expr, error) {
	line := ts.peek().line
	ts.depth++
	defer func() { ts.depth-- }()
	if ts.depth > maxExprDepth {
		return nil, errorf(line, "expression nested deeper than %d levels", maxExprDepth)
	}
	start := ts.usedLen()
	x, err := ts.parseOr()
	if err != nil {
		return nil, err
	}
	if ts.isName("if") {
		// all of a conditional expression is soft, in jinja2 as here
		defer ts.soften(start)
	}
	for ts.skipName("if") {
		cond, err := ts.parseOr()
		if err != nil {
			return nil, err
		}
		var b expr
		if ts.skipName("else") {
			if b, err = ts.parseExpr(); err != nil {
				return nil, err
			}
		}
		x = &condExpr{cond: cond, a: x, b: b, line: line}
	}
	return x, nil
}

func (ts *tokStream) usedLen() int {
	if ts.used == nil {
		return 0
	}
	return len(*ts.used)
}

// soften marks the filters and tests used since start soft.
func (ts *tokStream) soften(start int) {
	if ts.used == nil {
		return
	}
	for i := start; i < len(*ts.used); i++ {
		(*ts.used)[i].soft = true
	}
}

func (ts *tokStream) parseOr() (expr, error) {
	l, err := ts.parseAnd()
	if err != nil {
		return nil, err
	}
	for ts.isName("or") {
		line := ts.next().line
		r, err := ts.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "or", l: l, r: r, line: line}
	}
	return l, nil
}

func (ts *tokStream) parseAnd() (expr, error) {
	l, err := ts.parseNot()
	if err != nil {
		return nil, err
	}
	for ts.isName("and") {
		line := ts.next().line
		r, err := ts.parseNot()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "and", l: l, r: r, line: line}
	}
	return l, nil
}

func (ts *tokStream) parseNot() (expr, error) {
	if ts.isName("not") {
		ts.depth++
		defer func() { ts.depth-- }()
		if ts.depth > maxExprDepth {
			return nil, errorf(ts.peek().line, "expression nested deeper than %d levels", maxExprDepth)
		}
		line := ts.next().line
		x, err := ts.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", x: x, line: line}, nil
	}
	return ts.parseCompare()
}

func (ts *tokStream) parseCompare() (expr, error) {
	line := ts.peek().line
	first, err := ts.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first, line: line}
	for {
		t := ts.peek()
		var op string
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			ts.next()
		case t.kind == tkName && t.val == "in":
			op = "in"
			ts.next()
		case t.kind == tkName && t.val == "not" && ts.peekAt(1).kind == tkName && ts.peekAt(1).val == "in":
			op = "notin"
			ts.next()
			ts.next()
		}
		if op == "" {
			break
		}
		r, err := ts.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (ts *tokStream) parseMath1() (expr, error) {
	l, err := ts.parseConcat()
	if err != nil {
		return nil, err
	}
	for ts.isOp("+") || ts.isOp("-") {
		t := ts.next()
		r, err := ts.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (ts *tokStream) parseConcat() (expr, error) {
	l, err := ts.parseMath2()
	if err != nil {
		return nil, err
	}
	for ts.isOp("~") {
		t := ts.next()
		r, err := ts.parseMath2()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "~", l: l, r: r, line: t.line}
	}
	return l, nil
}

func (ts *tokStream) parseMath2() (expr, error) {
	l, err := ts.parsePow()
	if err != nil {
		return nil, err
	}
	for ts.isOp("*") || ts.isOp("/") || ts.isOp("//") || ts.isOp("%") {
		t := ts.next()
		r, err := ts.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (ts *tokStream) parsePow() (expr, error) {
	l, err := ts.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for ts.isOp("**") {
		t := ts.next()
		r, err := ts.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "**", l: l, r: r, line: t.line}
	}
	return l, nil
}

func (ts *tokStream) parseUnary(withFilter bool) (expr, error) {
	var x expr
	var err error
	t := ts.peek()
	if t.kind == tkOp && (t.val == "-" || t.val == "+") {
		ts.next()
		ts.depth++
		defer func() { ts.depth-- }()
		if ts.depth > maxExprDepth {
			return nil, errorf(t.line, "expression nested deeper than %d levels", maxExprDepth)
		}
		inner, err := ts.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{op: t.val, x: inner, line: t.line}
	} else {
		if x, err = ts.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = ts.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return ts.parseFilterExpr(x)
	}
	return x, nil
}

func (ts *tokStream) parsePrimary() (expr, error) {
	t := ts.next()
	switch t.kind {
	case tkName:
		switch t.val {
		case "true", "True":
			return &literal{true}, nil
		case "false", "False":
			return &literal{false}, nil
		case "none", "None":
			return &literal{nil}, nil
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tkString:
		s := t.val
		// adjacent string literals concatenate, as in Python
		for ts.peek().kind == tkString {
			s += ts.next().val
		}
		return &literal{s}, nil
	case tkInt:
		return &literal{t.ival}, nil
	case tkFloat:
		return &literal{t.fval}, nil
	case tkOp:
		switch t.val {
		case "(":
			if ts.skipOp(")") {
				return &listExpr{tuple: true}, nil
			}
			x, err := ts.parseTuple()
			if err != nil {
				return nil, err
			}
			return x, ts.expectOp(")")
		case "[":
			l := &listExpr{}
			for !ts.skipOp("]") {
				if len(l.items) > 0 {
					if err := ts.expectOp(","); err != nil {
						return nil, err
					}
					if ts.skipOp("]") {
						break
					}
				}
				x, err := ts.parseExpr()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			return l, nil
		case "{":
			d := &dictExpr{}
			for !ts.skipOp("}") {
				if len(d.keys) > 0 {
					if err := ts.expectOp(","); err != nil {
						return nil, err
					}
					if ts.skipOp("}") {
						break
					}
				}
				k, err := ts.parseExpr()
				if err != nil {
					return nil, err
				}
				if err := ts.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := ts.parseExpr()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			return d, nil
		}
	}
	return nil, errorf(t.line, "unexpected %s in expression", t)
}

func (ts *tokStream) parsePostfix(x expr) (expr, error) {
	for {
		t := ts.peek()
		if t.kind != tkOp {
			return x, nil
		}
		switch t.val {
		case ".":
			ts.next()
			a := ts.next()
			switch a.kind {
			case tkName:
				x = &attrExpr{obj: x, name: a.val, line: a.line}
			case tkInt:
				x = &itemExpr{obj: x, key: &literal{a.ival}, line: a.line}
			default:
				return nil, errorf(a.line, "expected an attribute name after '.', got %s", a)
			}
		case "[":
			ts.next()
			var parts [3]expr
			n := 0
			isSlice := false
			for {
				if ts.isOp(":") {
					ts.next()
					isSlice = true
					n++
					if n > 2 {
						return nil, errorf(t.line, "too many ':' in subscript")
					}
					continue
				}
				if ts.isOp("]") {
					ts.next()
					break
				}
				if parts[n] != nil {
					return nil, errorf(ts.peek().line, "expected ']' or ':', got %s", ts.peek())
				}
				y, err := ts.parseExpr()
				if err != nil {
					return nil, err
				}
				parts[n] = y
			}
			if isSlice {
				x = &sliceExpr{obj: x, start: parts[0], stop: parts[1], step: parts[2], line: t.line}
			} else {
				if parts[0] == nil {
					return nil, errorf(t.line, "empty subscript []")
				}
				x = &itemExpr{obj: x, key: parts[0], line: t.line}
			}
		case "(":
			ts.next()
			c := &callExpr{fn: x, line: t.line}
			if err := ts.parseArgs(&c.args, &c.kwName, &c.kwVal); err != nil {
				return nil, err
			}
			x = c
		default:
			return x, nil
		}
	}
}

// parseArgs parses call arguments after "(" up to and including ")".
func (ts *tokStream) parseArgs(args *[]expr, kwName *[]string, kwVal *[]expr) error {
	first := true
	for !ts.skipOp(")") {
		if !first {
			if err := ts.expectOp(","); err != nil {
				return err
			}
			if ts.skipOp(")") {
				break
			}
		}
		first = false
		if t := ts.peek(); t.kind == tkName && ts.peekAt(1).kind == tkOp && ts.peekAt(1).val == "=" {
			ts.next()
			ts.next()
			v, err := ts.parseExpr()
			if err != nil {
				return err
			}
			*kwName = append(*kwName, t.val)
			*kwVal = append(*kwVal, v)
			continue
		}
		if len(*kwName) > 0 {
			return errorf(ts.peek().line, "positional argument after keyword argument")
		}
		v, err := ts.parseExpr()
		if err != nil {
			return err
		}
		*args = append(*args, v)
	}
	return nil
}

func (ts *tokStream) parseFilterCall(x expr) (*filterExpr, error) {
	t := ts.next()
	if t.kind != tkName {
		return nil, errorf(t.line, "expected a filter name after '|', got %s", t)
	}
	f := &filterExpr{x: x, name: t.val, line: t.line}
	for ts.isOp(".") && ts.peekAt(1).kind == tkName { // dotted filter names
		ts.next()
		f.name += "." + ts.next().val
	}
	if ts.used != nil {
		*ts.used = append(*ts.used, usedName{filter: true, name: f.name, line: t.line, soft: ts.soft})
	}
	if ts.skipOp("(") {
		if err := ts.parseArgs(&f.args, &f.kwName, &f.kwVal); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (ts *tokStream) parseFilterExpr(x expr) (expr, error) {
	for {
		switch {
		case ts.isOp("|"):
			ts.next()
			f, err := ts.parseFilterCall(x)
			if err != nil {
				return nil, err
			}
			x = f
		case ts.isName("is"):
			line := ts.next().line
			neg := ts.skipName("not")
			t := ts.next()
			if t.kind != tkName {
				return nil, errorf(t.line, "expected a test name after 'is', got %s", t)
			}
			te := &testExpr{x: x, name: t.val, negate: neg, line: line}
			if ts.used != nil {
				*ts.used = append(*ts.used, usedName{name: t.val, line: t.line, soft: ts.soft})
			}
			if ts.isOp("(") {
				ts.next()
				var kn []string
				var kv []expr
				if err := ts.parseArgs(&te.args, &kn, &kv); err != nil {
					return nil, err
				}
				te.args = append(te.args, kv...)
			} else if n := ts.peek(); (n.kind == tkName || n.kind == tkString || n.kind == tkInt || n.kind == tkFloat ||
				n.kind == tkOp && (n.val == "[" || n.val == "{")) &&
				!(n.kind == tkName && (n.val == "else" || n.val == "or" || n.val == "and" || n.val == "if" || n.val == "is" || n.val == "in" || n.val == "not")) {
				arg, err := ts.parsePrimary()
				if err != nil {
					return nil, err
				}
				if arg, err = ts.parsePostfix(arg); err != nil {
					return nil, err
				}
				te.args = []expr{arg}
			}
			x = te
		default:
			return x, nil
		}
	}
}
