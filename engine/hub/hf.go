package hub

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ftchat/ftchat/internal/safefile"
)

// isCheckpointDir reports whether dir holds a Hugging Face config.json.
func isCheckpointDir(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil && st.Mode().IsRegular()
}

// HFCacheDir is the Hugging Face hub cache: $HF_HUB_CACHE, else
// $HF_HOME/hub, else ~/.cache/huggingface/hub.
func HFCacheDir() (string, error) {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), nil
}

// hfSnapshot finds ORG/NAME (optionally ORG/NAME@REV) in the HF cache
// layout models--ORG--NAME/snapshots/REV/: the revision refs/main names,
// else the only snapshot. ok is false when the name is not in the cache.
func hfSnapshot(name string) (string, bool, error) {
	name, rev, _ := strings.Cut(name, "@")
	org, repo, ok := strings.Cut(name, "/")
	if !ok || org == "" || repo == "" || strings.ContainsAny(repo, `/\`) || strings.Contains(name, "..") {
		return "", false, nil
	}
	cache, err := HFCacheDir()
	if err != nil {
		return "", false, nil
	}
	base := filepath.Join(cache, "models--"+org+"--"+repo)
	if _, err := os.Stat(base); err != nil {
		return "", false, nil
	}
	if rev == "" {
		rev = "main"
	}
	if b, err := safefile.ReadFile(filepath.Join(base, "refs", rev), 4096, "HF cache ref"); err == nil {
		rev = strings.TrimSpace(string(b))
	}
	snap := filepath.Join(base, "snapshots", rev)
	if filepath.Dir(snap) != filepath.Join(base, "snapshots") {
		return "", false, fmt.Errorf("model %q: revision %q is not a snapshot name", name, rev)
	}
	if isCheckpointDir(snap) {
		return snap, true, nil
	}
	ents, _ := os.ReadDir(filepath.Join(base, "snapshots"))
	var snaps []string
	for _, e := range ents {
		if e.IsDir() && isCheckpointDir(filepath.Join(base, "snapshots", e.Name())) {
			snaps = append(snaps, e.Name())
		}
	}
	sort.Strings(snaps)
	switch len(snaps) {
	case 0:
		return "", false, fmt.Errorf("model %q is in the Hugging Face cache (%s) but no snapshot holds a config.json (incomplete download?)", name, base)
	case 1:
		return filepath.Join(base, "snapshots", snaps[0]), true, nil
	}
	return "", false, fmt.Errorf("model %q has %d snapshots in %s and refs/%s names none of them: pass %s@REV or the snapshot directory (%s)",
		name, len(snaps), base, rev, name, strings.Join(snaps, ", "))
}
