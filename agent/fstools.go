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

// readText reads a resolved regular text file.
func (t *Tools) readText(rel string) ([]byte, error) {
	st, err := t.ws.fs.Stat(orDot(rel))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist; use list or glob to find files", display(rel))
		}
		return nil, err
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory; use list to see its entries", display(rel))
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", display(rel))
	}
	b, err := t.ws.readFile(rel)
	if err != nil {
		return nil, err
	}
	if isBinary(b) {
		return nil, fmt.Errorf("%s is a binary file (%d bytes); read_file shows text only", display(rel), len(b))
	}
	return b, nil
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
		b, err := t.readText(rel)
		if err != nil {
			return "", err
		}
		lines := splitLines(string(b))
		n := len(lines)
		if n == 0 {
			return display(rel) + " is empty", nil
		}
		if start < 1 {
			start = 1
		}
		if end <= 0 || end > n {
			end = n
		}
		if start > n {
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
		head := fmt.Sprintf("%s (lines %d-%d of %d)\n", display(rel), start, last, n)
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
	return &Plan{Summary: "list " + display(rel), run: func(context.Context) (string, error) {
		dir := rel
		if dir == "" {
			dir = "."
		}
		f, err := t.ws.fs.Open(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("%s does not exist", display(rel))
			}
			return "", err
		}
		defer f.Close()
		ents, err := f.ReadDir(-1)
		if err != nil {
			return "", fmt.Errorf("%s is not a directory", display(rel))
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %d entries\n", display(rel), len(ents))
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

// walk visits the regular files under rel (a resolved path), skipping .git
// and symlinks, in lexical order.
func (t *Tools) walk(rel string, visit func(p string, d fs.DirEntry) error) error {
	start := rel
	if start == "" {
		start = "."
	}
	return fs.WalkDir(t.ws.fs.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start {
				return err
			}
			return nil // unreadable entries are skipped
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != start {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return visit(p, d)
	})
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

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

func planGlob(t *Tools, args map[string]any) (*Plan, error) {
	pattern := strings.TrimSpace(strArg(args, "pattern", ""))
	if pattern == "" {
		return nil, errors.New("empty pattern; try **/*.go")
	}
	if _, err := path.Match(strings.ReplaceAll(pattern, "**", "*"), ""); err != nil {
		return nil, fmt.Errorf("bad pattern %q: %v", pattern, err)
	}
	if path.IsAbs(pattern) || strings.HasPrefix(pattern, "../") || strings.Contains(pattern, "/../") {
		return nil, fmt.Errorf("pattern %q: patterns are relative to the project root and cannot leave it", pattern)
	}
	return &Plan{Summary: "glob " + pattern, run: func(context.Context) (string, error) {
		var hits []string
		more := 0
		err := t.walk("", func(p string, _ fs.DirEntry) error {
			if matchGlob(pattern, p) {
				if len(hits) < t.limits.ListEntries {
					hits = append(hits, p)
				} else {
					more++
				}
			}
			return nil
		})
		if err != nil {
			return "", err
		}
		if len(hits) == 0 {
			return "no files match " + pattern, nil
		}
		out := strings.Join(hits, "\n") + "\n"
		if more > 0 {
			out += fmt.Sprintf("... and %d more\n", more)
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
	return &Plan{Summary: fmt.Sprintf("grep %q in %s", re.String(), display(rel)), run: func(ctx context.Context) (string, error) {
		var b strings.Builder
		n := 0
		search := func(p string) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if filter != "" && !matchGlob(filter, p) {
				return nil
			}
			st, err := t.ws.fs.Stat(p)
			if err != nil || st.Size() > t.limits.GrepFileSize {
				return nil
			}
			data, err := t.ws.readFile(p)
			if err != nil || isBinary(data) {
				return nil
			}
			for i, line := range splitLines(string(data)) {
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
		st, err := t.ws.fs.Stat(orDot(rel))
		if err != nil {
			return "", fmt.Errorf("%s does not exist", display(rel))
		}
		if st.IsDir() {
			err = t.walk(rel, func(p string, _ fs.DirEntry) error { return search(p) })
		} else {
			err = search(rel)
		}
		switch {
		case errors.Is(err, errEnough):
			fmt.Fprintf(&b, "[stopped after %d matches; narrow the pattern or path]\n", n)
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
	st, err := t.ws.fs.Stat(orDot(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !st.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s is not a regular file", display(rel))
	}
	b, err := t.ws.readFile(rel)
	return b, true, err
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
			now, err := t.ws.readFile(rel)
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
