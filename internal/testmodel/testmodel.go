// Package testmodel locates the default model for the tests that run it.
// CI fetches it with `make model` before `go test`; elsewhere those tests
// skip when it is absent. It also holds the helpers that the model tests of
// several packages share for reading their fixtures (fixture.go).
package testmodel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/hub"
)

// Path is $FTCHAT_TEST_MODEL, else the default model's file in the model
// cache (hub.CacheDir). It may not exist.
func Path() string {
	if p := os.Getenv("FTCHAT_TEST_MODEL"); p != "" {
		return p
	}
	dir, err := hub.CacheDir()
	if err != nil {
		return ""
	}
	for _, k := range hub.KnownModels() {
		if k.Name == hub.DefaultModel {
			return filepath.Join(dir, k.File)
		}
	}
	return ""
}

// Require returns Path, or skips tb when the file is not there.
func Require(tb testing.TB) string {
	tb.Helper()
	p := Path()
	if _, err := os.Stat(p); p == "" || err != nil {
		tb.Skipf("default model not present (%q): run `make model` or set FTCHAT_TEST_MODEL", p)
	}
	return p
}
