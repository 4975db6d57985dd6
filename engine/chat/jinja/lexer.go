package jinja

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer turns template source into pieces: literal text, {{ }} output
// tags and {% %} statement tags, the latter two as expression tokens. It
// applies whitespace control the way jinja2 does with trim_blocks=True and
// lstrip_blocks=True (the settings transformers uses for chat templates):
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag,
//     "-%}", "-}}", "-#}" all whitespace after it;
//   - a block or comment tag alone on its line after spaces/tabs takes those
//     spaces/tabs with it (lstrip_blocks), unless opened with "{%+";
//   - one newline right after "%}" or "#}" is dropped (trim_blocks), unless
//     closed with "+%}".

type tokKind int

const (
	tkEOF tokKind = iota
	tkName
	tkString
	tkInt
	tkFloat
	tkOp
)

type token struct {
	kind tokKind
	val  string // name, operator, or decoded string literal
	ival int64
	fval float64
	line int
}

func (t token) String() string {
	switch t.kind {
	case tkEOF:
		return "end of tag"
	case tkString:
		return strconv.Quote(t.val)
	case tkInt, tkFloat:
		return t.val
	}
	return "'" + t.val + "'"
}

type pieceKind int

const (
	pText pieceKind = iota
	pOutput
	pStmt
)

type piece struct {
	kind pieceKind
	text string  // pText
	toks []token // pOutput, pStmt (without the delimiters)
	line int
}

// Error is a template syntax or render error; Line is 1-based (0: unknown).
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("jinja: line %d: %s", e.Line, e.Msg)
	}
	return "jinja: " + e.Msg
}

func errorf(line int, format string, args ...any) *Error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

var endRawRe = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*([-+]?)%\}`)

type lexer struct {
	src   string
	pos   int
	line  int
	out   []piece
	ltext strings.Builder // pending text
	tline int             // line where pending text started
}

// normalizeSource does what jinja2 does before lexing: newlines become "\n"
// and one trailing newline is dropped (keep_trailing_newline=False).
func normalizeSource(src string) string {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	return strings.TrimSuffix(src, "\n")
}

func lex(src string) ([]piece, error) {
	lx := &lexer{src: normalizeSource(src), line: 1, tline: 1}
	if err := lx.run(); err != nil {
		return nil, err
	}
	return lx.out, nil
}

func (lx *lexer) flushText() {
	if lx.ltext.Len() > 0 {
		lx.out = append(lx.out, piece{kind: pText, text: lx.ltext.String(), line: lx.tline})
	}
	lx.ltext.Reset()
}

func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

// stripBefore applies "-" or lstrip_blocks to text that precedes a tag.
// atLineStart says whether text begins at the start of a line.
func stripBefore(text string, minus, lstrip, atLineStart bool) string {
	if minus {
		return strings.TrimRightFunc(text, unicode.IsSpace)
	}
	if !lstrip {
		return text
	}
	nl := strings.LastIndexByte(text, '\n')
	if nl < 0 && !atLineStart {
		return text
	}
	tail := text[nl+1:]
	if strings.Trim(tail, " \t") == "" {
		return text[:nl+1]
	}
	return text
}

func (lx *lexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		textStart := lx.pos
		i := indexTagStart(src, lx.pos)
		if i < 0 {
			lx.addText(src[lx.pos:])
			lx.advance(len(src) - lx.pos)
			break
		}
		text := src[lx.pos:i]
		kind := src[i+1] // '{', '%' or '#'
		mod := byte(0)
		if i+2 < len(src) && (src[i+2] == '-' || src[i+2] == '+') {
			mod = src[i+2]
		}
		if kind == '{' && mod == '+' {
			mod = 0 // "{{+" has no meaning; '+' is then a unary plus
		}
		atLineStart := textStart == 0 || src[textStart-1] == '\n'
		text = stripBefore(text, mod == '-', kind != '{' && mod != '+', atLineStart)
		lx.addText(text)
		lx.advance(i - lx.pos)
		tagLine := lx.line
		hdr := 2
		if mod != 0 {
			hdr = 3
		}
		lx.advance(hdr)
		switch kind {
		case '#':
			end := strings.Index(src[lx.pos:], "#}")
			if end < 0 {
				return errorf(tagLine, "comment opened with {# is never closed with #}")
			}
			minus := end > 0 && src[lx.pos+end-1] == '-'
			plus := end > 0 && src[lx.pos+end-1] == '+'
			lx.advance(end + 2)
			lx.afterTag(minus, !plus)
		case '{', '%':
			toks, minus, plus, err := lx.lexTag(kind == '%', tagLine)
			if err != nil {
				return err
			}
			if kind == '%' && len(toks) > 0 && toks[0].kind == tkName && toks[0].val == "raw" {
				if len(toks) != 1 {
					return errorf(tagLine, "raw takes no arguments")
				}
				lx.afterTag(minus, !plus)
				if err := lx.lexRaw(tagLine); err != nil {
					return err
				}
				continue
			}
			lx.flushText()
			pk := pOutput
			if kind == '%' {
				pk = pStmt
			}
			lx.out = append(lx.out, piece{kind: pk, toks: toks, line: tagLine})
			lx.afterTag(minus, kind == '%' && !plus)
		}
	}
	lx.flushText()
	return nil
}

func (lx *lexer) addText(s string) {
	if s == "" {
		return
	}
	if lx.ltext.Len() == 0 {
		lx.tline = lx.line
	}
	lx.ltext.WriteString(s)
}

// afterTag drops whitespace after a tag: all of it for "-", one newline
// for trim_blocks.
func (lx *lexer) afterTag(minus, trim bool) {
	rest := lx.src[lx.pos:]
	if minus {
		n := len(rest) - len(strings.TrimLeftFunc(rest, unicode.IsSpace))
		lx.advance(n)
		return
	}
	if trim && strings.HasPrefix(rest, "\n") {
		lx.advance(1)
	}
}

func (lx *lexer) lexRaw(line int) error {
	m := endRawRe.FindStringSubmatchIndex(lx.src[lx.pos:])
	if m == nil {
		return errorf(line, "raw block is never closed with {%% endraw %%}")
	}
	body := lx.src[lx.pos : lx.pos+m[0]]
	minusBefore := m[3] > m[2] && lx.src[lx.pos+m[2]] == '-'
	plusBefore := m[3] > m[2] && lx.src[lx.pos+m[2]] == '+'
	body = stripBefore(body, minusBefore, !plusBefore, false)
	startPos := lx.pos
	lx.addText(body)
	lx.advance(m[1])
	minusAfter := m[5] > m[4] && lx.src[startPos+m[4]] == '-'
	plusAfter := m[5] > m[4] && lx.src[startPos+m[4]] == '+'
	lx.afterTag(minusAfter, !plusAfter)
	return nil
}

func indexTagStart(s string, from int) int {
	for i := from; i+1 < len(s); i++ {
		if s[i] == '{' && (s[i+1] == '{' || s[i+1] == '%' || s[i+1] == '#') {
			return i
		}
	}
	return -1
}

var ops2 = []string{"//", "**", "==", "!=", "<=", ">="}

const ops1 = "+-*/%~()[]{}<>=.:|,;"

// lexTag reads expression tokens up to the closing delimiter ("%}" for a
// statement, "}}" for output). It reports whether the delimiter carried "-"
// or "+".
func (lx *lexer) lexTag(stmt bool, tagLine int) (toks []token, minus, plus bool, err error) {
	src := lx.src
	depth := 0
	closer := "}}"
	what := "{{"
	if stmt {
		closer = "%}"
		what = "{%"
	}
	for {
		// skip whitespace
		for lx.pos < len(src) {
			r, n := utf8.DecodeRuneInString(src[lx.pos:])
			if !unicode.IsSpace(r) {
				break
			}
			lx.advance(n)
		}
		if lx.pos >= len(src) {
			return nil, false, false, errorf(tagLine, "tag opened with %s is never closed with %s", what, closer)
		}
		rest := src[lx.pos:]
		if depth == 0 {
			switch {
			case strings.HasPrefix(rest, closer):
				lx.advance(2)
				return toks, false, false, nil
			case strings.HasPrefix(rest, "-"+closer):
				lx.advance(3)
				return toks, true, false, nil
			case stmt && strings.HasPrefix(rest, "+"+closer):
				lx.advance(3)
				return toks, false, true, nil
			}
		}
		line := lx.line
		c := rest[0]
		switch {
		case c == '\'' || c == '"':
			s, n, ok := scanString(rest)
			if !ok {
				return nil, false, false, errorf(line, "string literal is never closed")
			}
			toks = append(toks, token{kind: tkString, val: s, line: line})
			lx.advance(n)
		case c >= '0' && c <= '9':
			tk, n := scanNumber(rest)
			tk.line = line
			toks = append(toks, tk)
			lx.advance(n)
		case c == '_' || c < utf8.RuneSelf && unicode.IsLetter(rune(c)) || c >= utf8.RuneSelf:
			n := 0
			for n < len(rest) {
				r, sz := utf8.DecodeRuneInString(rest[n:])
				if r == '_' || unicode.IsLetter(r) || (n > 0 && unicode.IsDigit(r)) {
					n += sz
					continue
				}
				break
			}
			if n == 0 {
				r, _ := utf8.DecodeRuneInString(rest)
				return nil, false, false, errorf(line, "unexpected character %q", r)
			}
			toks = append(toks, token{kind: tkName, val: rest[:n], line: line})
			lx.advance(n)
		default:
			op := ""
			for _, o := range ops2 {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" && strings.IndexByte(ops1, c) >= 0 {
				op = rest[:1]
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(rest)
				return nil, false, false, errorf(line, "unexpected character %q", r)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth > 0 {
					depth--
				}
			}
			toks = append(toks, token{kind: tkOp, val: op, line: line})
			lx.advance(len(op))
		}
	}
}

// scanString reads a quoted literal with Python escapes; n is bytes consumed.
func scanString(s string) (val string, n int, ok bool) {
	q := s[0]
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		if c == q {
			return b.String(), i + 1, true
		}
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		e := s[i+1]
		i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\':
			b.WriteByte('\\')
		case '\'':
			b.WriteByte('\'')
		case '"':
			b.WriteByte('"')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '\n':
			// line continuation
		case 'x', 'u', 'U':
			w := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+w <= len(s) {
				if v, err := strconv.ParseUint(s[i:i+w], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
					b.WriteRune(rune(v))
					i += w
					break
				}
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i - 1
			v := 0
			for k := 0; k < 3 && j < len(s) && s[j] >= '0' && s[j] <= '7'; k++ {
				v = v*8 + int(s[j]-'0')
				j++
			}
			b.WriteRune(rune(v))
			i = j
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, false
}

func scanNumber(s string) (token, int) {
	n := 0
	digits := func() {
		for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '_' && n+1 < len(s) && s[n+1] >= '0' && s[n+1] <= '9') {
			n++
		}
	}
	digits()
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		isFloat = true
		n++
		digits()
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && s[m] >= '0' && s[m] <= '9' {
			isFloat = true
			n = m
			digits()
		}
	}
	text := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		f, _ := strconv.ParseFloat(text, 64)
		return token{kind: tkFloat, val: s[:n], fval: f}, n
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		f, _ := strconv.ParseFloat(text, 64)
		return token{kind: tkFloat, val: s[:n], fval: f}, n
	}
	return token{kind: tkInt, val: s[:n], ival: v}, n
}
