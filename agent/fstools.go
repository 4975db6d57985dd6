package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// sniffLen is how much of a file is checked for NUL bytes to call it binary.
const sniffLen = 8000

func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), sniffLen)], 0) >= 0 }

// readText reads a resolved regular text file whole, for edit and
// write_file, which refuse files larger than FileSize.
func (t *Tools) readText(rel string) ([]byte, error) {
	b, size, cut, err := t.readTextHead(rel)
	if err == nil && cut {
		err = fmt.Errorf("%s is %s, more than the %s that edit and write_file handle; change it with run_shell", display(rel), byteSize(size), byteSize(t.limits.FileSize))
	}
	return b, err
}

// readTextHead reads at most FileSize bytes of a resolved regular text
// file; cut says the file is longer (the text then ends at a line end).
func (t *Tools) readTextHead(rel string) (b []byte, size int64, cut bool, err error) {
	b, size, err = t.ws.readHead(rel, t.limits.FileSize+1)
	if err != nil {
		return nil, 0, false, err
	}
	if isBinary(b) {
		return nil, 0, false, fmt.Errorf("%s is a binary file (%s); read_file shows text only", display(rel), byteSize(size))
	}
	if cut = int64(len(b)) > t.limits.FileSize; cut {
		b = b[:t.limits.FileSize]
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[:i+1]
		}
	}
	return b, size, cut, nil
}

// byteSize prints a size for people: 512 bytes, 4.0 MiB, 6.0 GiB.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// splitLines splits text into lines that keep their "\n", so joining them
// gives the text back byte for byte.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func planRead(t *Tools, args map[string]any) (*Plan, error) {
	rel, err := t.ws.resolve(strArg(args, "path", ""))
	if err != nil {
		return nil, err
	}
	start, end := intArg(args, "start_line", 1), intArg(args, "end_line", 0)
	return &Plan{Summary: "read_file " + display(rel), run: func(context.Context) (string, error) {
		b, size, cut, err := t.readTextHead(rel)
		if err != nil {
			return "", err
		}
		lines := splitLines(string(b))
		n := len(lines)
		of := fmt.Sprint(n)
		if cut {
			of = fmt.Sprintf("%d read; the file is %s and read_file reads only its first %s", n, byteSize(size), byteSize(t.limits.FileSize))
		}
		if n == 0 && !cut {
			return display(rel) + " is empty", nil
		}
		if start < 1 {
			start = 1
		}
		if end <= 0 || end > n {
			end = n
		}
		if start > n {
			if cut {
				return "", fmt.Errorf("start_line %d is past the %d lines read_file reads of %s (%s); use grep or run_shell for the rest", start, n, display(rel), byteSize(size))
			}
			return "", fmt.Errorf("%s has %d lines; start_line %d is past the end", display(rel), n, start)
		}
		if end < start {
			return "", fmt.Errorf("end_line %d is before start_line %d", end, start)
		}
		var body strings.Builder
		last := start - 1
		for i := start - 1; i < end; i++ {
			if body.Len()+len(lines[i]) > t.limits.ReadBytes {
				break
			}
			body.WriteString(lines[i])
			last = i + 1
		}
		if last < start { // one line longer than the cap: show its head
			cut := t.limits.ReadBytes
			for cut > 0 && !utf8.RuneStart(lines[start-1][cut]) {
				cut--
			}
			body.WriteString(lines[start-1][:cut])
			body.WriteString("\n")
			last = start
		}
		head := fmt.Sprintf("%s (lines %d-%d of %s)\n", display(rel), start, last, of)
		out := head + body.String()
		if !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		if last < end {
			out += fmt.Sprintf("[cut at %d bytes; read on with start_line %d]\n", t.limits.ReadBytes, last+1)
		}
		return out, nil
	}}, nil
}

func planList(t *Tools, args map[string]any) (*Plan, error) {
	rel, err := t.ws.resolve(strArg(args, "path", "."))
	if err != nil {
		return nil, err
	}
	return &Plan{Summary: "list " + display(rel), run: func(ctx context.Context) (string, error) {
		f, _, err := t.ws.openChecked(rel, true)
		if err != nil {
			return "", err
		}
		defer f.Close()
		// Read in chunks, up to WalkEntries: a directory of millions of
		// entries is neither held in memory nor read past cancellation.
		var ents []fs.DirEntry
		more := false
		for {
			if err := ctx.Err(); err != nil {
				return "", fmt.Errorf("cancelled: %w", err)
			}
			chunk, err := f.ReadDir(1024)
			ents = append(ents, chunk...)
			if err != nil || len(chunk) == 0 {
				break
			}
			if len(ents) >= t.limits.WalkEntries {
				more = true
				break
			}
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		var b strings.Builder
		if more {
			fmt.Fprintf(&b, "%s: more than %d entries; these are the first read, sorted among themselves\n", display(rel), len(ents))
		} else {
			fmt.Fprintf(&b, "%s: %d entries\n", display(rel), len(ents))
		}
		for i, e := range ents {
			if i == t.limits.ListEntries {
				fmt.Fprintf(&b, "... and %d more\n", len(ents)-i)
				break
			}
			name := e.Name()
			switch {
			case e.IsDir():
				name += "/"
			case e.Type()&fs.ModeSymlink != 0:
				name += "@"
			}
			b.WriteString(name + "\n")
		}
		return b.String(), nil
	}}, nil
}

var errEnough = errors.New("enough results")

// matchGlob matches a slash-separated path against a pattern in which "**"
// is any number of directories; a pattern without "/" matches the file name
// at any depth.
func matchGlob(pattern, p string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := path.Match(pattern, path.Base(p))
		return ok
	}
	return matchSegs(strings.Split(strings.TrimPrefix(pattern, "./"), "/"), strings.Split(p, "/"))
}

// matchSegs matches path segments against pattern segments. Failed
// (pattern, segment) positions are remembered: without that, each "**"
// tries every split of what is left, and "**/**/**/..." over a deep tree
// takes time exponential in the number of "**".
func matchSegs(pat, segs []string) bool {
	failed := make([]bool, (len(pat)+1)*(len(segs)+1))
	var match func(i, j int) bool
	match = func(i, j int) bool {
		for ; i < len(pat); i, j = i+1, j+1 {
			if pat[i] == "**" {
				key := i*(len(segs)+1) + j
				if failed[key] {
					return false
				}
				for k := j; k <= len(segs); k++ {
					if match(i+1, k) {
						return true
					}
				}
				failed[key] = true
				return false
			}
			if j == len(segs) {
				return false
			}
			if ok, _ := path.Match(pat[i], segs[j]); !ok {
				return false
			}
		}
		return j == len(segs)
	}
	return match(0, 0)
}

// maxPatternLen bounds glob patterns (and so the matcher's memo).
const maxPatternLen = 1024

func planGlob(t *Tools, args map[string]any) (*Plan, error) {
	pattern := strings.TrimSpace(strArg(args, "pattern", ""))
	if pattern == "" {
		return nil, errors.New("empty pattern; try **/*.go")
	}
	if len(pattern) > maxPatternLen {
		return nil, fmt.Errorf("pattern is %d bytes, more than %d; give a shorter one", len(pattern), maxPatternLen)
	}
	if _, err := path.Match(strings.ReplaceAll(pattern, "**", "*"), ""); err != nil {
		return nil, fmt.Errorf("bad pattern %q: %v", pattern, err)
	}
	if path.IsAbs(pattern) || strings.HasPrefix(pattern, "../") || strings.Contains(pattern, "/../") {
		return nil, fmt.Errorf("pattern %q: patterns are relative to the project root and cannot leave it", pattern)
	}
	return &Plan{Summary: "glob " + pattern, run: func(ctx context.Context) (string, error) {
		var hits []string
		more := 0
		err := t.walk(ctx, "", func(p string) error {
			if matchGlob(pattern, p) {
				if len(hits) < t.limits.ListEntries {
					hits = append(hits, p)
				} else {
					more++
				}
			}
			return nil
		})
		var stop *walkStop
		if err != nil && !errors.As(err, &stop) {
			return "", err
		}
		if len(hits) == 0 && stop == nil {
			return "no files match " + pattern, nil
		}
		out := strings.Join(hits, "\n") + "\n"
		if len(hits) == 0 {
			out = "no files match " + pattern + " so far\n"
		}
		if more > 0 {
			out += fmt.Sprintf("... and %d more\n", more)
		}
		if stop != nil {
			out += "[" + stop.reason + "]\n"
		}
		return out, nil
	}}, nil
}

// grepLineLen caps each matching line shown.
const grepLineLen = 200

func planGrep(t *Tools, args map[string]any) (*Plan, error) {
	re, err := regexp.Compile(strArg(args, "pattern", ""))
	if err != nil {
		return nil, fmt.Errorf("bad regular expression: %v", err)
	}
	rel, err := t.ws.resolve(strArg(args, "path", "."))
	if err != nil {
		return nil, err
	}
	filter := strArg(args, "glob", "")
	if len(filter) > maxPatternLen {
		return nil, fmt.Errorf("glob is %d bytes, more than %d; give a shorter one", len(filter), maxPatternLen)
	}
	return &Plan{Summary: fmt.Sprintf("grep %q in %s", re.String(), display(rel)), run: func(ctx context.Context) (string, error) {
		var b strings.Builder
		n := 0
		search := func(p string, single bool) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("cancelled: %w", err)
			}
			if filter != "" && !matchGlob(filter, p) {
				return nil
			}
			data, size, err := t.ws.readHead(p, t.limits.GrepFileSize+1)
			if single && err != nil {
				return err
			}
			if err != nil || size > t.limits.GrepFileSize || int64(len(data)) > t.limits.GrepFileSize || isBinary(data) {
				return nil
			}
			for i, line := range splitLines(string(data)) {
				if i%4096 == 0 && ctx.Err() != nil {
					return fmt.Errorf("cancelled: %w", ctx.Err())
				}
				line = strings.TrimRight(line, "\r\n")
				if !re.MatchString(line) {
					continue
				}
				if n == t.limits.GrepMatches {
					return errEnough
				}
				n++
				if len(line) > grepLineLen {
					line = line[:grepLineLen] + "..."
				}
				fmt.Fprintf(&b, "%s:%d: %s\n", display(p), i+1, line)
			}
			return nil
		}
		st, err := t.ws.fs.Lstat(orDot(rel))
		if err != nil {
			return "", fmt.Errorf("%s does not exist", display(rel))
		}
		if st.IsDir() {
			err = t.walk(ctx, rel, func(p string) error { return search(p, false) })
		} else {
			err = search(rel, true)
		}
		var stop *walkStop
		switch {
		case errors.Is(err, errEnough):
			fmt.Fprintf(&b, "[stopped after %d matches; narrow the pattern or path]\n", n)
		case errors.As(err, &stop):
			if n == 0 {
				fmt.Fprintf(&b, "no matches for %s so far\n", re.String())
			}
			fmt.Fprintf(&b, "[%s]\n", stop.reason)
		case err != nil:
			return "", err
		case n == 0:
			return "no matches for " + re.String(), nil
		}
		return b.String(), nil
	}}, nil
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// existing returns the current content of a resolved path for a write: nil
// and no error when it does not exist.
func (t *Tools) existing(rel string) ([]byte, bool, error) {
	if _, err := t.ws.fs.Lstat(orDot(rel)); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	b, size, err := t.ws.readHead(rel, t.limits.FileSize+1)
	if err == nil && int64(len(b)) > t.limits.FileSize {
		err = fmt.Errorf("%s is %s, more than the %s that edit and write_file handle; change it with run_shell", display(rel), byteSize(size), byteSize(t.limits.FileSize))
	}
	return b, err == nil, err
}

func planWrite(t *Tools, args map[string]any) (*Plan, error) {
	rel, err := t.ws.resolve(strArg(args, "path", ""))
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, errors.New("path is the project root, not a file")
	}
	content := strArg(args, "content", "")
	old, exists, err := t.existing(rel)
	if err != nil {
		return nil, err
	}
	summary := fmt.Sprintf("write_file %s (new file, %d lines)", display(rel), len(splitLines(content)))
	if exists {
		summary = fmt.Sprintf("write_file %s (%d lines, was %d)", display(rel), len(splitLines(content)), len(splitLines(string(old))))
	}
	return &Plan{
		Summary: summary,
		Preview: UnifiedDiff(display(rel), string(old), content, exists),
		run: func(context.Context) (string, error) {
			if err := t.ws.writeFile(rel, []byte(content)); err != nil {
				return "", err
			}
			return fmt.Sprintf("wrote %s (%d bytes)", display(rel), len(content)), nil
		},
	}, nil
}

func planEdit(t *Tools, args map[string]any) (*Plan, error) {
	rel, err := t.ws.resolve(strArg(args, "path", ""))
	if err != nil {
		return nil, err
	}
	oldText, newText := strArg(args, "old_text", ""), strArg(args, "new_text", "")
	if oldText == "" {
		return nil, errors.New("old_text is empty; give the exact text to replace (use write_file to create a file)")
	}
	data, err := t.readText(rel)
	if err != nil {
		return nil, err
	}
	src := string(data)
	switch n := strings.Count(src, oldText); {
	case n == 0:
		hint := ""
		if strings.Contains(collapseSpace(src), collapseSpace(oldText)) {
			hint = " (it is there with different spaces or line breaks: copy it exactly)"
		}
		return nil, fmt.Errorf("old_text was not found in %s%s; read the file and copy the text exactly", display(rel), hint)
	case n > 1:
		return nil, fmt.Errorf("old_text matches %d times in %s (at lines %s); include more surrounding lines so it matches once",
			n, display(rel), matchLines(src, oldText))
	}
	updated := strings.Replace(src, oldText, newText, 1)
	return &Plan{
		Summary: "edit " + display(rel),
		Preview: UnifiedDiff(display(rel), src, updated, true),
		run: func(context.Context) (string, error) {
			now, err := t.readText(rel)
			if err != nil {
				return "", err
			}
			if string(now) != src {
				return "", fmt.Errorf("%s changed since the edit was planned; read it again", display(rel))
			}
			if err := t.ws.writeFile(rel, []byte(updated)); err != nil {
				return "", err
			}
			return "edited " + display(rel), nil
		},
	}, nil
}

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

func matchLines(src, sub string) string {
	var lines []string
	for off := 0; ; {
		i := strings.Index(src[off:], sub)
		if i < 0 {
			break
		}
		lines = append(lines, fmt.Sprint(strings.Count(src[:off+i], "\n")+1))
		off += i + len(sub)
	}
	return strings.Join(lines, ", ")
}
