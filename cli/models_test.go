package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/ui"
)

// `ftchat models` lists the GGUF files in the cache (what /model offers in
// the chat) with their sizes, then the names fetched on first use.
func TestModelsListsTheCache(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FTCHAT_CACHE_DIR", dir)
	run := func() string {
		var out bytes.Buffer
		cmd := modelsCmd()
		cmd.SetOut(&out)
		cmd.SetArgs(nil)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if got := run(); !strings.Contains(got, "cache: "+dir+"\n  (empty)\n") || !strings.Contains(got, "known names") {
		t.Errorf("empty cache:\n%s", got)
	}
	for name, size := range map[string]int{"b-model.gguf": 3 << 20, "a-model.GGUF": 1024, "notes.txt": 10} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A symlinked model shows its target's size.
	target := filepath.Join(t.TempDir(), "c.gguf")
	if err := os.WriteFile(target, make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "c-model.gguf")); err != nil {
		t.Fatal(err)
	}
	got := run()
	a, b := strings.Index(got, "a-model.GGUF"), strings.Index(got, "b-model.gguf")
	if a < 0 || b < a || strings.Contains(got, "notes.txt") || !strings.Contains(got, "3.00 MiB") || !strings.Contains(got, "1.00 KiB") || !strings.Contains(got, "5.00 MiB") {
		t.Errorf("listing:\n%s", got)
	}
}

// The chat gets a /model source for an in-process engine (it then owns the
// engine and the session) and none for another engine (a remote one).
func TestChatModelsOnlyForTheInProcessEngine(t *testing.T) {
	t.Setenv("FTCHAT_CACHE_DIR", t.TempDir())
	o := engine.Options{Model: filepath.Join("..", "engine", "model", "testdata", "tiny_qwen35.gguf"), Device: "cpu", KVTokens: 1024}
	eng, err := engine.Load(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, closeModels := chatModels(Config{Engine: o}, eng, eng.NewSession())
	if src == nil {
		t.Fatal("no /model source for the in-process engine")
	}
	list, err := src.Models()
	if err != nil || len(list) == 0 || !list[0].Current {
		t.Errorf("Models() = %+v, %v: want the model in use listed first", list, err)
	}
	closeModels()
	eng.Close() // as Chat's own defer does: harmless after closeModels
	if src, closeModels := chatModels(Config{}, otherEngine{}, nil); src != nil {
		t.Error("a /model source for an engine that is not in-process")
	} else {
		closeModels()
	}
}

type otherEngine struct{ ui.Engine }
