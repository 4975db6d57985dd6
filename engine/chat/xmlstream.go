package chat

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Streaming the arguments of a ToolQwenXML call. The parser (xmlcall.go)
// types a call's values once the call is complete and gives the arguments
// as ArgsJSON: an object of the parameters in the order written, compact,
// strings as written (XMLArgsJSON). XMLArgsStreamer writes the same text
// while the model writes the call: the key of each parameter as soon as
// its tag is complete, a string value's text as it arrives (up to what
// may still be the value's end: a pending </parameter>, a final newline,
// a split UTF-8 sequence), and a typed value whole when its end is
// certain. What it has written is always a prefix of the call's ArgsJSON;
// the rest (at least the closing brace) comes with the complete call.

// XMLArgsJSON writes a call's arguments as the streamer does: keys in the
// order given, compact, no HTML escaping.
func XMLArgsJSON(order []string, args map[string]any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range order {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonText(k))
		b.WriteByte(':')
		b.WriteString(jsonText(args[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// jsonText is v as compact JSON without HTML escaping. A string's
// escaping is per rune, so the text of pieces split at rune boundaries
// joins into the text of the whole.
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "null" // not reached: values come from TypedValue
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// stringPiece is the escaped text of s inside a JSON string (no quotes).
func stringPiece(s string) string {
	t := jsonText(s)
	return t[1 : len(t)-1]
}

// IsStringSchema reports whether TypedValue keeps a value of this schema
// as its text: no type, or one that allows a string.
func IsStringSchema(schema map[string]any) bool {
	types := schemaTypes(schema)
	if len(types) == 0 {
		return true
	}
	for _, t := range types {
		if t == "string" {
			return true
		}
	}
	return false
}

type xsMode uint8

const (
	xsBetween xsMode = iota // before a parameter, </function> or the end
	xsValue                 // inside a parameter's value
	xsDone                  // the call's end was seen: nothing more
	xsDead                  // the call will not parse: nothing more
)

// XMLArgsStreamer follows the body of one XML call after its
// <function=NAME> tag.
type XMLArgsStreamer struct {
	props  map[string]any // the tool's properties' schemas
	buf    []byte         // text not yet consumed (in a value: the value so far)
	mode   xsMode
	opened bool
	seen   map[string]bool
	pname  string
	str    bool // the open value is streamed as a string
	start  int  // content offset in buf: -1 until the first byte says (a leading newline is dropped)
	sent   int  // content written up to this offset of buf
	scan   int  // </parameter> before this offset of buf are not the value's end
}

// NewXMLArgsStreamer starts on a call of a tool whose JSON schema
// properties are props (nil when unknown).
func NewXMLArgsStreamer(props map[string]any) *XMLArgsStreamer {
	return &XMLArgsStreamer{props: props, seen: map[string]bool{}}
}

// Done reports whether the streamer has seen the call's end (or that it
// will not parse) and takes no more text.
func (s *XMLArgsStreamer) Done() bool { return s.mode == xsDone || s.mode == xsDead }

// Feed takes the next text of the call body and returns the next piece
// of the arguments' JSON ("" for none). Once it is Done it returns the
// text it holds that follows the arguments (from </function> or
// </tool_call> on, or where the call stopped making sense), once, and
// passes later text back as it is.
func (s *XMLArgsStreamer) Feed(text string) (piece, rest string) {
	if s.Done() {
		return "", text
	}
	var out strings.Builder
	if !s.opened {
		s.opened = true
		out.WriteByte('{')
	}
	s.buf = append(s.buf, text...)
	for {
		switch s.mode {
		case xsBetween:
			s.buf = bytes.TrimLeft(s.buf, " \t\r\n")
			b := s.buf
			switch {
			case len(b) == 0:
				return out.String(), ""
			case bytes.HasPrefix(b, []byte(xmlParamOpen)):
				name, n, err := tagName(b[len(xmlParamOpen):], "parameter")
				if err != nil {
					if bytes.IndexByte(b, '>') >= 0 || bytes.ContainsAny(b[len(xmlParamOpen):], "<\n") {
						return out.String(), s.stop(xsDead)
					}
					return out.String(), "" // the tag goes on
				}
				if s.seen[name] {
					return out.String(), s.stop(xsDead) // given twice: the call is an error
				}
				s.seen[name] = true
				if len(s.seen) > 1 {
					out.WriteByte(',')
				}
				out.WriteString(jsonText(name))
				out.WriteByte(':')
				schema, _ := s.props[name].(map[string]any)
				s.pname, s.str = name, IsStringSchema(schema)
				if s.str {
					out.WriteByte('"')
				}
				s.buf = s.buf[len(xmlParamOpen)+n:]
				s.mode, s.start, s.sent, s.scan = xsValue, -1, 0, 0
			case bytes.HasPrefix(b, []byte(xmlFuncClose)), bytes.HasPrefix(b, []byte(hermesClose)):
				return out.String(), s.stop(xsDone)
			case isTagPrefix(b):
				return out.String(), ""
			default:
				return out.String(), s.stop(xsDead)
			}
		case xsValue:
			end, limit := s.valueEnd()
			if s.start < 0 && len(s.buf) > 0 && (end >= 0 || limit > 0) {
				s.start = 0
				if s.buf[0] == '\n' {
					s.start = 1
				}
				s.sent = s.start
			}
			if end < 0 {
				if s.str && s.start >= 0 {
					out.WriteString(s.stringUpTo(limit, false))
				}
				return out.String(), ""
			}
			raw := string(s.buf[:end])
			raw = strings.TrimSuffix(strings.TrimPrefix(raw, "\n"), "\n")
			if s.str {
				out.WriteString(s.stringUpTo(end, true))
				out.WriteByte('"')
			} else {
				schema, _ := s.props[s.pname].(map[string]any)
				out.WriteString(jsonText(TypedValue(schema, raw)))
			}
			s.buf = s.buf[end+len(xmlParamClose):]
			s.mode = xsBetween
		default:
			return out.String(), ""
		}
	}
}

// stop ends the streamer in mode m and hands back the text it holds.
func (s *XMLArgsStreamer) stop(m xsMode) string {
	s.mode = m
	rest := string(s.buf)
	s.buf = nil
	return rest
}

// stringUpTo writes the open string value's content from s.sent up to
// offset to of s.buf; unless final, a newline just before to (the value's
// last byte if it ends there) and a UTF-8 sequence that may go on are held
// back.
func (s *XMLArgsStreamer) stringUpTo(to int, final bool) string {
	if final {
		if to > s.start && s.buf[to-1] == '\n' {
			to--
		}
	} else {
		if to > s.sent && s.buf[to-1] == '\n' {
			to--
		}
		// Stop before a rune that is not complete yet.
		i := s.sent
		for i < to {
			if !utf8.FullRune(s.buf[i:to]) {
				break
			}
			_, n := utf8.DecodeRune(s.buf[i:to])
			i += n
		}
		to = i
	}
	if to <= s.sent {
		return ""
	}
	p := stringPiece(string(s.buf[s.sent:to]))
	s.sent = to
	return p
}

// valueEnd finds the open value's end in s.buf as the parser's valueEnd
// will: the first </parameter> followed (after white space) by a
// parameter, </function> or </tool_call>. It returns the end, or -1 and
// how far the value is certain to go on (a </parameter> whose follower is
// not known yet, or the start of a partial one at the end of the text).
func (s *XMLArgsStreamer) valueEnd() (end, limit int) {
	for {
		m := bytes.Index(s.buf[s.scan:], []byte(xmlParamClose))
		if m < 0 {
			return -1, len(s.buf) - partialSuffix(s.buf[s.scan:], xmlParamClose)
		}
		pos := s.scan + m
		after := bytes.TrimLeftFunc(s.buf[pos+len(xmlParamClose):], unicode.IsSpace)
		switch {
		case bytes.HasPrefix(after, []byte(xmlParamOpen)), bytes.HasPrefix(after, []byte(xmlFuncClose)), bytes.HasPrefix(after, []byte(hermesClose)):
			return pos, pos
		case len(after) == 0, isTagPrefix(after), !utf8.FullRune(after):
			return -1, pos
		}
		s.scan = pos + 1
	}
}

// isTagPrefix reports whether b may still grow into a parameter tag,
// </function> or </tool_call>.
func isTagPrefix(b []byte) bool {
	for _, t := range []string{xmlParamOpen, xmlFuncClose, hermesClose} {
		if len(b) < len(t) && strings.HasPrefix(t, string(b)) {
			return true
		}
	}
	return false
}

// partialSuffix is the length of the longest proper prefix of tag that b
// ends with.
func partialSuffix(b []byte, tag string) int {
	for k := min(len(b), len(tag)-1); k > 0; k-- {
		if bytes.HasSuffix(b, []byte(tag[:k])) {
			return k
		}
	}
	return 0
}
