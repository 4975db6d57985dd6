package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"time"
)

// The read-only tools run without approval on whatever the project holds,
// so a named pipe, a device, a 6 GiB file or a tree of a million
// directories must cost bounded time and memory and never block: every
// file is checked before it is opened, opened non-blocking, and read up
// to a limit; every walk stops at a deadline, an entry budget or ctx.

// fileKind names what a non-regular file is, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file"
}

// openChecked opens a resolved path that must be a directory (dir) or a
// regular file. The type is checked with Lstat before opening, and again
// on the open file, since the path may be swapped in between; the open is
// non-blocking, so a FIFO swapped in cannot stall it.
func (w *Workspace) openChecked(rel string, dir bool) (*os.File, fs.FileInfo, error) {
	rel = orDot(rel)
	ok := func(st fs.FileInfo) error {
		if dir && !st.IsDir() {
			return fmt.Errorf("%s is %s, not a directory", display(rel), fileKind(st.Mode()))
		}
		if !dir && !st.Mode().IsRegular() {
			if st.IsDir() {
				return fmt.Errorf("%s is a directory; use list to see its entries", display(rel))
			}
			return fmt.Errorf("%s is %s; only regular files are read", display(rel), fileKind(st.Mode()))
		}
		return nil
	}
	st, err := w.fs.Lstat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s does not exist; use list or glob to find files", display(rel))
		}
		return nil, nil, err
	}
	if err := ok(st); err != nil {
		return nil, nil, err
	}
	f, err := w.fs.OpenFile(rel, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err == nil {
		err = ok(st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// readHead reads at most max bytes of a resolved regular file and its size.
func (w *Workspace) readHead(rel string, max int64) ([]byte, int64, error) {
	f, st, err := w.openChecked(rel, false)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	return b, st.Size(), err
}

// walkStop is why a walk ended early with partial results.
type walkStop struct{ reason string }

func (e *walkStop) Error() string { return e.reason }

// walk visits the regular files under rel (a resolved path) in lexical
// order, skipping .git, symlinks and special files. It stops with ctx's
// error when cancelled, and with a *walkStop after WalkTime or WalkEntries
// directory entries; visit may stop it by returning an error.
func (t *Tools) walk(ctx context.Context, rel string, visit func(p string) error) error {
	deadline := time.Now().Add(t.limits.WalkTime)
	seen := 0
	check := func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cancelled: %w", err)
		}
		if time.Now().After(deadline) {
			return &walkStop{fmt.Sprintf("stopped after %s of searching; narrow the path or pattern", t.limits.WalkTime)}
		}
		if seen > t.limits.WalkEntries {
			return &walkStop{fmt.Sprintf("stopped after %d directory entries; narrow the path or pattern", t.limits.WalkEntries)}
		}
		return nil
	}
	var walkDir func(dir string, top bool) error
	walkDir = func(dir string, top bool) error {
		f, _, err := t.ws.openChecked(dir, true)
		if err != nil {
			if top {
				return err
			}
			return nil // unreadable or swapped directories are skipped
		}
		var ents []fs.DirEntry
		for {
			chunk, err := f.ReadDir(1024)
			ents = append(ents, chunk...)
			seen += len(chunk)
			if cerr := check(); cerr != nil {
				f.Close()
				return cerr
			}
			if err != nil || len(chunk) == 0 {
				break
			}
		}
		f.Close()
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		for _, e := range ents {
			if err := check(); err != nil {
				return err
			}
			p := path.Join(dir, e.Name())
			if dir == "." {
				p = e.Name()
			}
			switch {
			case e.IsDir():
				if e.Name() == ".git" {
					continue
				}
				if err := walkDir(p, false); err != nil {
					return err
				}
			case e.Type().IsRegular():
				if err := visit(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	return walkDir(orDot(rel), true)
}
