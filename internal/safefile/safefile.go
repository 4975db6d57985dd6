// Package safefile opens user-given files for reading without the ways a
// plain os.Open can hurt: a named pipe blocks the open (and every read)
// forever, and a device such as /dev/zero, or a file far larger than any
// sane input, reads until memory runs out. Every entry point that reads a
// path the user or a download named goes through here.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file or stream over its size limit.
var ErrTooLarge = errors.New("too large")

// Error describes a refused file. Its message names the path (prefixed by
// what it was given as, e.g. "--model") and what to do about it.
type Error struct {
	What string // e.g. "--model"; may be empty
	Path string
	Msg  string
	Err  error // ErrNotRegular or ErrTooLarge
}

func (e *Error) Error() string {
	name := e.Path
	if e.What != "" {
		name = e.What + " " + e.Path
	}
	return name + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Open opens path for reading if it is a regular file (symlinks followed).
// The type is checked before the open, and again on the opened descriptor,
// which is opened non-blocking where the platform allows, so a named pipe
// swapped in between cannot block. what names the path in errors ("--model",
// "tokenizer"); it may be empty.
func Open(path, what string) (*os.File, os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, prefix(what, err)
	}
	if err := checkRegular(path, what, st); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, nil, prefix(what, err)
	}
	st, err = f.Stat()
	if err == nil {
		err = checkRegular(path, what, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, prefix(what, err)
	}
	return f, st, nil
}

// ReadFile reads the regular file at path, refusing one larger than max
// bytes with an error that names the limit.
func ReadFile(path string, max int64, what string) ([]byte, error) {
	f, st, err := Open(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, tooLarge(path, what, fmt.Sprintf("is %s, larger than the %s limit", Size(st.Size()), Size(max)))
	}
	// The file may grow between the stat and the read: bound the read too.
	b, err := ReadAll(f, max, what, path)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ReadAll reads r to the end, refusing more than max bytes (for streams with
// no size of their own, e.g. a gunzipped file: a gzip bomb stops at max).
// what and path name the source in the error.
func ReadAll(r io.Reader, max int64, what, path string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, prefix(what, fmt.Errorf("%s: %w", path, err))
	}
	if int64(len(b)) > max {
		return nil, tooLarge(path, what, fmt.Sprintf("holds more than the %s limit", Size(max)))
	}
	return b, nil
}

func tooLarge(path, what, msg string) error {
	return &Error{What: what, Path: path, Err: ErrTooLarge,
		Msg: msg + " (is this the right file?)"}
}

// CheckRegular returns the Open error for st if it is not a regular file,
// for callers that stat a path before handing it on.
func CheckRegular(path, what string, st fs.FileInfo) error { return checkRegular(path, what, st) }

func checkRegular(path, what string, st fs.FileInfo) error {
	m := st.Mode()
	if m.IsRegular() {
		return nil
	}
	var kind string
	switch {
	case m.IsDir():
		kind = "a directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a block device"
	default:
		kind = "of type " + m.Type().String()
	}
	return &Error{What: what, Path: path, Err: ErrNotRegular,
		Msg: "is " + kind + ", not a regular file; give the path of a regular file"}
}

// prefix puts what in front of an os error (which already names the path).
func prefix(what string, err error) error {
	var se *Error
	if what == "" || errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Size formats a byte count for messages: "64 MiB", "1.5 GiB", "512 B".
func Size(n int64) string {
	const (
		kib = 1 << 10
		mib = 1 << 20
		gib = 1 << 30
	)
	f := func(v float64, unit string) string {
		if v == float64(int64(v)) {
			return fmt.Sprintf("%d %s", int64(v), unit)
		}
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	switch {
	case n >= gib:
		return f(float64(n)/gib, "GiB")
	case n >= mib:
		return f(float64(n)/mib, "MiB")
	case n >= kib:
		return f(float64(n)/kib, "KiB")
	}
	return fmt.Sprintf("%d B", n)
}
