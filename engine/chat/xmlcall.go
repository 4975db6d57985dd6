package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
)

// The Qwen3.5 / Qwen3.6 / Qwen3-Coder tool-call format (ToolQwenXML):
//
//	<tool_call>
//	<function=NAME>
//	<parameter=ARG>
//	VALUE
//	</parameter>
//	...
//	</function>
//	</tool_call>
//
// A VALUE is raw text, not JSON: the template writes strings as they are,
// numbers and booleans with Python's str (3, True) and objects and lists
// with tojson, so values are typed back by the tool's JSON schema.
const (
	xmlFuncOpen   = "<function="
	xmlFuncClose  = "</function>"
	xmlParamOpen  = "<parameter="
	xmlParamClose = "</parameter>"
)

// errOpenValue: the call body ends inside a parameter value, so a
// </tool_call> seen there is part of the value (a file being written may
// hold the tag) and the real end is further on.
var errOpenValue = errors.New("a <parameter=...> value is not closed by </parameter>")

// SetTools gives the parser the tools the model was offered: their JSON
// schemas type the values of ToolQwenXML calls (a parameter declared
// integer, number, boolean, object or array is decoded; strings and
// parameters without a schema stay text). Call it before the first Feed.
func (p *StreamParser) SetTools(tools []Tool) {
	p.schemas = make(map[string]map[string]any, len(tools))
	for _, t := range tools {
		props, _ := t.Parameters["properties"].(map[string]any)
		p.schemas[t.Name] = props
	}
}

func (p *StreamParser) stepXML(final bool) bool {
	for {
		i := bytes.Index(p.buf[p.searchFrom:], []byte(hermesClose))
		if i < 0 {
			break
		}
		i += p.searchFrom
		c, err := p.xml.advance(p.buf, i)
		if errors.Is(err, errOpenValue) {
			p.searchFrom = i + len(hermesClose)
			continue
		}
		raw := hermesOpen + string(p.buf[:i]) + hermesClose
		p.buf = p.buf[i+len(hermesClose):]
		p.endXML()
		if err != nil {
			p.emitError(raw, err.Error())
		} else {
			p.emitCall(c)
		}
		return true
	}
	p.searchFrom = max(p.searchFrom, len(p.buf)-len(hermesClose)+1)
	if len(p.buf) > maxCallBytes {
		what := "no " + hermesClose
		if p.xml.inValue {
			what = fmt.Sprintf("parameter %q of %q not closed by %s", p.xml.pname, p.xml.name, xmlParamClose)
		}
		p.emitError(hermesOpen+string(p.buf), fmt.Sprintf("%s within %d bytes", what, maxCallBytes))
		p.buf = p.buf[:0]
		p.endXML()
		return true
	}
	if !final {
		return false
	}
	raw := hermesOpen + string(p.buf)
	empty := len(bytes.TrimSpace(p.buf)) == 0
	c, err := p.xml.advance(p.buf, len(p.buf))
	p.buf = p.buf[:0]
	p.endXML()
	p.skipWS = false
	switch {
	case empty:
		p.emitError(raw, "the output ended inside an empty "+hermesOpen)
	case err != nil:
		p.emitError(raw, "the output ended before "+hermesClose+" and "+err.Error())
	default:
		p.emitCall(c)
	}
	return false
}

func (p *StreamParser) endXML() {
	p.xml = xmlCallState{schemas: p.schemas}
	p.mode = modeText
	p.skipWS = true
}

// xmlCallState parses the body of one <tool_call> block incrementally: a
// </tool_call> inside a parameter value (errOpenValue) leaves the state
// where it was, and the next candidate end resumes from there, so a value
// holding many such tags still costs linear time.
type xmlCallState struct {
	schemas map[string]map[string]any

	pos     int // body offset where parsing resumes
	started bool
	name    string
	props   map[string]any
	args    map[string]any
	order   []string // args' keys as written
	inValue bool
	pname   string
	valAt   int // start of the open value
	scan    int // </parameter> occurrences before this are not the value's end
}

// advance parses buf[:end] as a whole call body, resuming where the last
// call stopped; buf[:end] must extend what it saw then. It is lenient where
// the intent is plain (a missing </function>, a value without the newlines
// around it) and strict where it is not (text that is neither a parameter
// nor the end, a parameter given twice).
func (st *xmlCallState) advance(buf []byte, end int) (*ToolCall, error) {
	b := buf[:end]
	for {
		if st.inValue {
			vend := valueEnd(b, st.scan)
			if vend < 0 {
				st.scan = end
				return nil, fmt.Errorf("parameter %q of %q: %w", st.pname, st.name, errOpenValue)
			}
			raw := string(b[st.valAt:vend])
			raw = strings.TrimSuffix(strings.TrimPrefix(raw, "\n"), "\n")
			schema, _ := st.props[st.pname].(map[string]any)
			st.args[st.pname] = TypedValue(schema, raw)
			st.order = append(st.order, st.pname)
			st.inValue = false
			st.pos = vend + len(xmlParamClose)
			continue
		}
		for st.pos < end && isSpace(b[st.pos]) {
			st.pos++
		}
		s := b[st.pos:]
		if !st.started {
			if !bytes.HasPrefix(s, []byte(xmlFuncOpen)) {
				return nil, fmt.Errorf("no %sNAME> in the call", xmlFuncOpen)
			}
			name, n, err := tagName(s[len(xmlFuncOpen):], "function")
			if err != nil {
				return nil, err
			}
			st.started, st.name, st.args = true, name, map[string]any{}
			st.props = st.schemas[name]
			st.pos += len(xmlFuncOpen) + n
			continue
		}
		switch {
		case len(s) == 0:
			return st.call(), nil
		case bytes.HasPrefix(s, []byte(xmlFuncClose)):
			if rest := bytes.TrimSpace(s[len(xmlFuncClose):]); len(rest) > 0 {
				return nil, fmt.Errorf("text after %s: %s", xmlFuncClose, clip(string(rest)))
			}
			return st.call(), nil
		case bytes.HasPrefix(s, []byte(xmlParamOpen)):
			pname, n, err := tagName(s[len(xmlParamOpen):], "parameter")
			if err != nil {
				return nil, err
			}
			if _, dup := st.args[pname]; dup {
				return nil, fmt.Errorf("parameter %q of %q is given twice", pname, st.name)
			}
			st.inValue, st.pname = true, pname
			st.valAt = st.pos + len(xmlParamOpen) + n
			st.scan = st.valAt
		default:
			return nil, fmt.Errorf("unexpected text in the call to %q: %s (want %sNAME> or %s)", st.name, clip(string(s)), xmlParamOpen, xmlFuncClose)
		}
	}
}

func (st *xmlCallState) call() *ToolCall {
	return &ToolCall{Name: st.name, Arguments: st.args, ArgsJSON: XMLArgsJSON(st.order, st.args)}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// tagName reads NAME> of <function=NAME> or <parameter=NAME>; n is how
// many bytes it took.
func tagName(s []byte, what string) (name string, n int, err error) {
	j := bytes.IndexByte(s, '>')
	if j < 0 {
		return "", 0, fmt.Errorf("the <%s=...> tag is not closed by '>'", what)
	}
	name = strings.TrimSpace(string(s[:j]))
	if name == "" || strings.ContainsAny(name, "<\n") {
		return "", 0, fmt.Errorf("bad %s name %s", what, clip(string(s[:j])))
	}
	return name, j + 1, nil
}

// valueEnd is where a parameter value ends in b: the first </parameter>
// at or after from that is followed (after whitespace) by the next
// parameter, </function> or the end of b, so a value may itself hold
// </parameter>. -1: none yet.
func valueEnd(b []byte, from int) int {
	for {
		m := bytes.Index(b[from:], []byte(xmlParamClose))
		if m < 0 {
			return -1
		}
		pos := from + m
		after := bytes.TrimLeftFunc(b[pos+len(xmlParamClose):], unicode.IsSpace)
		if len(after) == 0 || bytes.HasPrefix(after, []byte(xmlParamOpen)) || bytes.HasPrefix(after, []byte(xmlFuncClose)) {
			return pos
		}
		from = pos + 1
	}
}

func clip(s string) string {
	const n = 60
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:completeRunes([]byte(s[:n]))])
}

// TypedValue decodes the raw text of an XML-format parameter value by its
// JSON schema ({"type": ...}, a list of types, or anyOf/oneOf of them): a
// schema that allows a string keeps the text; otherwise integer and number
// become float64 (as encoding/json decodes them), boolean accepts true/false
// in any case (the template writes Python's True/False), null accepts
// null/None, object and array are JSON. Text that fits none of the types,
// and values without a schema, stay strings: the tool's own argument check
// then names the problem.
func TypedValue(schema map[string]any, raw string) any {
	if IsStringSchema(schema) {
		return raw
	}
	types := schemaTypes(schema)
	v := strings.TrimSpace(raw)
	for _, t := range types {
		switch t {
		case "integer", "number":
			var n any
			if json.Unmarshal([]byte(v), &n) == nil {
				if f, ok := n.(float64); ok && (t == "number" || f == math.Trunc(f)) {
					return f
				}
			}
		case "boolean":
			switch strings.ToLower(v) {
			case "true":
				return true
			case "false":
				return false
			}
		case "null":
			if v == "null" || v == "None" {
				return nil
			}
		case "object":
			var o map[string]any
			if json.Unmarshal([]byte(v), &o) == nil && o != nil {
				return o
			}
		case "array":
			var a []any
			if json.Unmarshal([]byte(v), &a) == nil && a != nil {
				return a
			}
		}
	}
	return raw
}

func schemaTypes(schema map[string]any) []string {
	var out []string
	switch t := schema["type"].(type) {
	case string:
		out = append(out, t)
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		subs, _ := schema[k].([]any)
		for _, sub := range subs {
			if m, ok := sub.(map[string]any); ok {
				out = append(out, schemaTypes(m)...)
			}
		}
	}
	return out
}
