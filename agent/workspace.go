package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Workspace is the directory tree the agent may touch. Every path a tool
// receives is resolved against it, symlinks included, and refused when its
// real location is outside. File operations then go through an os.Root
// opened on the same directory, so a symlink swapped in after the check
// still cannot lead outside.
type Workspace struct {
	root string // absolute, symlinks resolved
	fs   *os.Root
}

// OpenWorkspace opens dir as the workspace root.
func OpenWorkspace(dir string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("workspace %s: not a directory", dir)
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", dir, err)
	}
	return &Workspace{root: real, fs: r}, nil
}

// Root is the workspace's real absolute path.
func (w *Workspace) Root() string { return w.root }

// Close releases the root directory handle.
func (w *Workspace) Close() error { return w.fs.Close() }

// PathError is a path the workspace refuses.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string { return fmt.Sprintf("%s: %s", e.Path, e.Reason) }

// resolve maps a tool's path argument to a path relative to the root (with
// no symlinks in it when it exists) or refuses it. Relative paths are taken
// from the root; absolute ones must lie inside it. The longest existing
// prefix is resolved with EvalSymlinks so symlinked parents count; a path
// whose last element is a symlink is resolved to its target, and a dangling
// symlink is refused (writing through it would create its target wherever
// it points).
func (w *Workspace) resolve(p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", &PathError{Path: p, Reason: "empty path; give a path relative to the project root"}
	}
	if strings.ContainsRune(p, 0) {
		return "", &PathError{Path: p, Reason: "path contains a NUL byte"}
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(w.root, abs)
	}
	abs = filepath.Clean(abs)
	if !w.inside(abs) {
		return "", &PathError{Path: p, Reason: "outside the workspace " + w.root}
	}
	// Find the longest prefix that exists (Lstat: a symlink exists even
	// when its target does not).
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", &PathError{Path: p, Reason: err.Error()}
		}
		parent := filepath.Dir(existing)
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", &PathError{Path: p, Reason: "a symlink on this path points to something that does not exist; refusing to follow it"}
		}
		return "", &PathError{Path: p, Reason: err.Error()}
	}
	full := filepath.Join(real, rest)
	if !w.inside(full) {
		return "", &PathError{Path: p, Reason: "resolves through a symlink to " + full + ", outside the workspace " + w.root}
	}
	rel, err := filepath.Rel(w.root, full)
	if err != nil {
		return "", &PathError{Path: p, Reason: err.Error()}
	}
	return rel, nil
}

func (w *Workspace) inside(abs string) bool {
	return abs == w.root || strings.HasPrefix(abs, w.root+string(filepath.Separator))
}

// display is how a resolved path is shown to the model and the user.
func display(rel string) string {
	if rel == "" {
		return "."
	}
	return filepath.ToSlash(rel)
}

// writeFile replaces rel's content atomically: the bytes go to a temporary
// file in the same directory, which is synced and renamed over the target,
// so a failure at any point leaves the old file as it was. The mode of an
// existing file is kept; missing parent directories are created.
func (w *Workspace) writeFile(rel string, data []byte) (err error) {
	mode := fs.FileMode(0o644)
	if st, err := w.fs.Stat(rel); err == nil {
		if !st.Mode().IsRegular() {
			return &PathError{Path: display(rel), Reason: "not a regular file"}
		}
		mode = st.Mode().Perm()
	}
	dir := filepath.Dir(rel)
	if err := w.fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, f, err := w.createTemp(dir, filepath.Base(rel))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			w.fs.Remove(tmp)
		}
	}()
	if err = writeAll(f, data); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return w.fs.Rename(tmp, rel)
}

// writeAll is a variable so tests can make a write fail half-way.
var writeAll = func(f *os.File, data []byte) error {
	_, err := f.Write(data)
	return err
}

func (w *Workspace) createTemp(dir, base string) (string, *os.File, error) {
	for i := 0; ; i++ {
		name := filepath.Join(dir, fmt.Sprintf(".%s.ftchat-%d-%d.tmp", base, os.Getpid(), i))
		f, err := w.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return name, f, nil
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return "", nil, err
		}
	}
}
