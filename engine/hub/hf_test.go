package hub

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHFSnapshot(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	mk := func(repo, snap string, config bool) string {
		d := filepath.Join(cache, "models--"+repo, "snapshots", snap)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if config {
			if err := os.WriteFile(filepath.Join(d, "config.json"), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	ref := func(repo, name, rev string) {
		d := filepath.Join(cache, "models--"+repo, "refs")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(rev+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one := mk("a--one", "r1", true)
	two1, two2 := mk("a--two", "r1", true), mk("a--two", "r2", true)
	ref("a--two", "main", "r2")
	mk("a--many", "x", true)
	mk("a--many", "y", true)
	mk("a--empty", "x", false)
	for _, c := range []struct {
		name, want, err string
		ok              bool
	}{
		{"a/one", one, "", true},
		{"a/two", two2, "", true},
		{"a/two@r1", two1, "", true},
		{"a/many", "", "has 2 snapshots", false},
		{"a/empty", "", "no snapshot holds a config.json", false},
		{"a/missing", "", "", false},
		{"a/two@../r1", "", "not a snapshot name", false},
		{"not-a-repo", "", "", false},
		{"a/../x", "", "", false},
	} {
		p, ok, err := hfSnapshot(c.name)
		if p != c.want || ok != c.ok || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %q %v %v; want %q %v %q", c.name, p, ok, err, c.want, c.ok, c.err)
		}
	}
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", "/x")
	if d, _ := HFCacheDir(); d != filepath.Join("/x", "hub") {
		t.Errorf("HF_HOME: %s", d)
	}
}
