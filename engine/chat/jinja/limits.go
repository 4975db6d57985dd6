package jinja

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits bound what one Render may cost. A chat template comes with the
// model file and is untrusted: without limits `"x"|center(10**10)`, list
// doubling or sorting a huge list abort the process or hang a prompt.
// Zero fields take the defaults.
type Limits struct {
	// MaxBytes is the memory budget: every string, list, dict and output
	// byte the render builds is charged, before it is allocated, against
	// this total (DefaultMaxBytes).
	MaxBytes int64
	// MaxSteps bounds loop iterations, macro calls, comparisons and
	// element visits (1<<24).
	MaxSteps int
	// Timeout is the wall-clock deadline of one render (DefaultTimeout).
	Timeout time.Duration
}

// Defaults for Limits.
const (
	DefaultMaxBytes = 64 << 20
	DefaultTimeout  = 2 * time.Second
)

// elemSize is what one list element or dict entry is charged (an
// interface value, plus the map overhead for dicts, roughly).
const elemSize = 16

// LimitError is a render stopped by its Limits.
type LimitError struct {
	Line int
	Msg  string
}

func (e *LimitError) Error() string { return (&Error{Line: e.Line, Msg: e.Msg}).Error() }

func (r *renderer) setLimits(l Limits) {
	r.maxBytes = l.MaxBytes
	if r.maxBytes <= 0 {
		r.maxBytes = DefaultMaxBytes
	}
	r.maxSteps = l.MaxSteps
	if r.maxSteps <= 0 {
		r.maxSteps = maxSteps
	}
	d := l.Timeout
	if d <= 0 {
		d = DefaultTimeout
	}
	r.timeout = d
	r.deadline = time.Now().Add(d)
}

// grow charges n bytes the render is about to allocate; what (with args)
// names the operation for the error message. Once over budget every later
// charge fails too, so an error swallowed somewhere cannot let work go on.
func (r *renderer) grow(n int64, what string, args ...any) error {
	if r.err != nil {
		return r.err
	}
	if n < 0 || n > r.maxBytes-r.used {
		r.err = &LimitError{Msg: fmt.Sprintf("template output exceeds the %s budget for what a render may build (%s); the template is broken or hostile: fix it or use another one",
			sizeStr(r.maxBytes), fmt.Sprintf(what, args...))}
		return r.err
	}
	r.used += n
	return nil
}

// growN charges count items of size bytes each, overflow-safe.
func (r *renderer) growN(count, size int64, what string, args ...any) error {
	if count < 0 || size < 0 || (size > 0 && count > math.MaxInt64/size) {
		return r.grow(-1, what, args...)
	}
	return r.grow(count*size, what, args...)
}

// work counts n steps of computation (comparisons, element visits) and
// checks the deadline now and then.
func (r *renderer) work(n int) error {
	if r.err != nil {
		return r.err
	}
	before := r.steps
	r.steps += n
	if r.steps > r.maxSteps || r.steps < before {
		r.err = &LimitError{Msg: fmt.Sprintf("template runs more than %d loop iterations, macro calls and comparisons; the template is broken or hostile: fix it or use another one", r.maxSteps)}
		return r.err
	}
	if before>>8 != r.steps>>8 || n >= 256 || n == 0 {
		return r.checkDeadline()
	}
	return nil
}

func (r *renderer) checkDeadline() error {
	if r.err != nil {
		return r.err
	}
	if time.Now().After(r.deadline) {
		r.err = &LimitError{Msg: fmt.Sprintf("template rendering takes longer than %v; the template is broken or hostile: fix it or use another one", r.timeout)}
		return r.err
	}
	return nil
}

func sizeStr(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// ---- budgeted string building ----

// sink collects a string whose writes are charged to a byte limit first;
// a write over the limit is dropped and sets over. Building repr/tojson
// output through it bounds the memory of `[[x]*1000]*1000` printed. Large
// output goes into fixed-size chunks joined at the end, so it allocates
// about twice its size (a doubling Builder would allocate five times), and
// a dry sink only counts.
type sink struct {
	cur   strings.Builder
	parts []string
	n     int64 // bytes written (or counted)
	left  int64
	over  bool
	dry   bool
}

const chunkSize = 64 << 10

// room charges n bytes; false means do not write (over, or dry).
func (s *sink) room(n int64) bool {
	if s.over {
		return false
	}
	if n > s.left {
		s.over = true
		return false
	}
	s.left -= n
	s.n += n
	if s.dry {
		return false
	}
	if s.cur.Len()+int(n) > chunkSize && s.cur.Len() > 0 {
		s.parts = append(s.parts, s.cur.String())
		s.cur = strings.Builder{}
		s.cur.Grow(chunkSize)
	}
	return true
}

func (s *sink) put(str string) {
	if s.room(int64(len(str))) {
		s.cur.WriteString(str)
	}
}

func (s *sink) putByte(c byte) {
	if s.room(1) {
		s.cur.WriteByte(c)
	}
}

func (s *sink) putRune(c rune) {
	n := utf8.RuneLen(c)
	if n < 0 {
		n = utf8.RuneLen(utf8.RuneError) // what WriteRune writes instead
	}
	if s.room(int64(n)) {
		s.cur.WriteRune(c)
	}
}

// Len is the number of bytes written.
func (s *sink) Len() int64 { return s.n }

func (s *sink) String() string {
	if len(s.parts) == 0 {
		return s.cur.String()
	}
	return strings.Join(append(s.parts, s.cur.String()), "")
}

// build runs write twice: counting only, then for real once that size is
// charged, so a value over the budget allocates nothing at all.
func (r *renderer) build(write func(*sink) error, what string, args ...any) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	dry := &sink{left: r.maxBytes - r.used, dry: true}
	if err := write(dry); err != nil {
		return "", err
	}
	if dry.over {
		return "", r.grow(-1, what, args...)
	}
	if err := r.grow(dry.n, what, args...); err != nil {
		return "", err
	}
	s := &sink{left: dry.n}
	s.cur.Grow(int(min(dry.n, chunkSize)))
	if err := write(s); err != nil {
		return "", err
	}
	return s.String(), nil
}

// str is toStr charged against the budget: composite values (lists, dicts)
// are rendered with repr within what is left of it.
func (r *renderer) str(v any, what string) (string, error) {
	switch v.(type) {
	case []any, Tuple, *Dict, *Namespace:
	default:
		return toStr(v), nil // scalars: small, or a string already built
	}
	return r.reprStr(v, what)
}

// iter is iterate charged against the budget: a string becomes one value
// per character, a dict a copy of its keys.
func (r *renderer) iter(v any) ([]any, error) {
	switch x := unTuple(v).(type) {
	case string:
		if err := r.growN(int64(utf8.RuneCountInString(x)), elemSize+4, "iterating a string of %d bytes", len(x)); err != nil {
			return nil, err
		}
	case *Dict:
		if err := r.growN(int64(x.Len()), elemSize, "iterating a dict of %d keys", x.Len()); err != nil {
			return nil, err
		}
	}
	return iterate(v)
}

// at gives a limit error the line where it surfaced (keeping its type, so
// it is not wrapped as "filter ...: jinja: ..."); other errors are
// wrapped by wrap.
func at(line int, err error, wrap func() error) error {
	if err == nil {
		return nil
	}
	if le, ok := err.(*LimitError); ok {
		if le.Line == 0 {
			le.Line = line
		}
		return le
	}
	if wrap == nil {
		return err
	}
	return wrap()
}

// reprStr is repr() charged against the budget; what names the operation.
func (r *renderer) reprStr(v any, what string) (string, error) {
	return r.build(func(s *sink) error { writeRepr(s, v, 0); return nil }, "%s of a %s", what, typeName(v))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
