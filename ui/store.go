package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// sessionVersion is bumped when the file format changes incompatibly.
const sessionVersion = 1

// SessionFile is one saved conversation, stored as JSON.
type SessionFile struct {
	Version  int              `json:"version"`
	Name     string           `json:"name"`
	Created  time.Time        `json:"created"`
	Updated  time.Time        `json:"updated"`
	Model    string           `json:"model,omitempty"`
	KVDType  string           `json:"kv_dtype,omitempty"`
	Mode     string           `json:"mode,omitempty"` // "agent" for agent mode: requests and answers, no tool calls
	Messages []engine.Message `json:"messages"`
}

// Store keeps sessions as <Dir>/<name>.json. Saves are atomic: the new
// content goes to a temporary file in the same directory, is fsynced, and
// replaces the old file by rename, so a crash leaves either the old or the
// new complete file.
type Store struct {
	Dir string

	mu      sync.Mutex
	written map[string]uint64 // name -> highest save sequence written
	cleaned sync.Once         // stale temporary files removed
}

// staleTempAge is how old a save's temporary file must be before it is
// taken for the leftover of a killed save: a save takes milliseconds, so a
// younger one may belong to another ftchat saving right now.
const staleTempAge = time.Minute

// DefaultSessionDir is $XDG_DATA_HOME/ftchat/sessions, or
// ~/.local/share/ftchat/sessions when XDG_DATA_HOME is unset.
func DefaultSessionDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "ftchat", "sessions"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("session directory: no home directory (%v); set XDG_DATA_HOME", err)
	}
	return filepath.Join(home, ".local", "share", "ftchat", "sessions"), nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// checkName rejects names that are not plain file names.
func checkName(name string) error {
	if !validName.MatchString(name) || strings.HasSuffix(name, ".tmp") {
		return fmt.Errorf("bad session name %q: use 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func (s *Store) path(name string) string { return filepath.Join(s.Dir, name+".json") }

// Save writes f under f.Name atomically. seq orders concurrent saves of the
// same name: a save older than one already written is skipped.
func (s *Store) Save(f *SessionFile, seq uint64) error {
	if err := checkName(f.Name); err != nil {
		return err
	}
	f.Version = sessionVersion
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("save session %q: %w", f.Name, err)
	}
	s.removeStaleTemps()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = map[string]uint64{}
	}
	if seq != 0 && seq < s.written[f.Name] {
		return nil
	}
	if err := writeFileAtomic(s.Dir, f.Name+".json", append(data, '\n')); err != nil {
		return fmt.Errorf("save session %q: %w", f.Name, err)
	}
	s.written[f.Name] = seq
	return nil
}

// savedThrough is the highest save sequence written for name in this
// process: a snapshot with a higher one is not on disk (yet).
func (s *Store) savedThrough(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written[name]
}

// removeStaleTemps deletes, once per Store, the temporary files that a
// save killed between create and rename left behind (see writeFileAtomic).
func (s *Store) removeStaleTemps() {
	s.cleaned.Do(func() {
		ents, err := os.ReadDir(s.Dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".tmp") || !e.Type().IsRegular() {
				continue
			}
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTempAge {
				os.Remove(filepath.Join(s.Dir, n))
			}
		}
	})
}

// writeFallback writes data, a session file that could not be saved in the
// store, to a new file in the user's cache directory or else the temporary
// directory, and returns its path.
func writeFallback(name string, data []byte) (string, error) {
	var dirs []string
	if d, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "ftchat", "unsaved"))
	}
	dirs = append(dirs, os.TempDir())
	var errs []string
	for _, dir := range dirs {
		p, err := writeNewFile(dir, "ftchat-session-"+name+"-*.json", data)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err.Error())
	}
	return "", errors.New(strings.Join(errs, "; "))
}

// writeNewFile writes data to a new file named after pattern (see
// os.CreateTemp) in dir, and syncs it.
func writeNewFile(dir, pattern string, data []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// writeFileAtomic replaces dir/name with data so that readers (and a crash
// at any point) see either the previous complete file or the new one.
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmpName, filepath.Join(dir, name)); err != nil {
		return err
	}
	ok = true
	// Persist the rename itself; failure here is not worth failing the save
	// over on filesystems that cannot sync directories.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Load reads a named session. A file that is not a valid session is
// reported with its path and left untouched.
func (s *Store) Load(name string) (*SessionFile, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	p := s.path(name)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no session named %q in %s (see /load + Tab for the saved ones)", name, s.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("load session %q: %w", name, err)
	}
	var f SessionFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("session file %s is corrupt (%v); it was left as it is: move it away or load another session", p, err)
	}
	if f.Version != sessionVersion {
		return nil, fmt.Errorf("session file %s has format version %d, this ftchat reads version %d; it was left as it is", p, f.Version, sessionVersion)
	}
	f.Name = name
	return &f, nil
}

// List returns the saved session names, most recently modified first.
func (s *Store) List() ([]string, error) {
	s.removeStaleTemps()
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	type item struct {
		name string
		mod  time.Time
	}
	var items []item
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || checkName(n) != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		items = append(items, item{n, info.ModTime()})
	}
	sort.Slice(items, func(i, j int) bool {
		if !items[i].mod.Equal(items[j].mod) {
			return items[i].mod.After(items[j].mod)
		}
		return items[i].name > items[j].name
	})
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.name
	}
	return names, nil
}

// Latest returns the most recently saved session's name, or "" if none.
func (s *Store) Latest() (string, error) {
	names, err := s.List()
	if err != nil || len(names) == 0 {
		return "", err
	}
	return names[0], nil
}

// newSessionName names a new session after its start time.
func newSessionName(t time.Time) string { return t.Format("2006-01-02_15-04-05") }
