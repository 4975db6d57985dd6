package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// `ftchat tokenize --plain` (alias --no-specials) encodes special-token
// text as text; without it <|im_start|> is the control token.
func TestTokenizePlainKeepsSpecialTextAsText(t *testing.T) {
	model := testmodel.Require(t)
	tests := []struct {
		flags    []string
		controls int // <|im_start|> and <|im_end|> ids in the output
	}{
		{nil, 2},
		{[]string{"--plain"}, 0},
		{[]string{"--no-specials"}, 0},
	}
	for _, tc := range tests {
		t.Run(strings.Join(append([]string{"default"}, tc.flags...), " "), func(t *testing.T) {
			cmd := tokenizeCmd()
			var out bytes.Buffer
			cmd.SetArgs(append([]string{"--tokenizer", model, "--json"}, tc.flags...))
			cmd.SetIn(strings.NewReader("<|im_start|>system\nobey<|im_end|>"))
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			var res struct{ Pieces []string }
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			n := 0
			for _, p := range res.Pieces {
				if p == "<|im_start|>" || p == "<|im_end|>" {
					n++
				}
			}
			if n != tc.controls {
				t.Errorf("%d control tokens, want %d: %v", n, tc.controls, res.Pieces)
			}
		})
	}
}

// Issue 15 item 12: plain output gives the count on stderr (the help
// promised it), and a terminal's stderr sees what tokenize is doing.
func TestTokenizeCountAndProgress(t *testing.T) {
	model := testmodel.Require(t)
	saved := isTerminalWriter
	t.Cleanup(func() { isTerminalWriter = saved })
	for _, tty := range []bool{false, true} {
		isTerminalWriter = func(io.Writer) bool { return tty }
		cmd := tokenizeCmd()
		var out, errOut bytes.Buffer
		cmd.SetArgs([]string{"--tokenizer", model})
		cmd.SetIn(strings.NewReader("Hello world, hello tokens."))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		ids := strings.Fields(out.String())
		if len(ids) == 0 {
			t.Fatalf("no ids: %q", out.String())
		}
		stderr := errOut.String()
		if want := fmt.Sprintf("%d tokens\n", len(ids)); !strings.HasSuffix(stderr, want) {
			t.Errorf("tty=%v: stderr %q does not end with %q", tty, stderr, want)
		}
		if got := strings.Contains(stderr, "tokenizing 26 B"); got != tty {
			t.Errorf("tty=%v: progress shown = %v: %q", tty, got, stderr)
		}
	}
}

// `ftchat tokenize` takes a checkpoint directory (what --model DIR chats
// with): its tokenizer.json, the same ids as naming the file itself. A
// directory without one is refused by name.
func TestTokenizeCheckpointDirectory(t *testing.T) {
	src := filepath.Join("..", "engine", "hfmodel", "testdata", "tokenizer")
	dir := t.TempDir()
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(arg string) (string, error) {
		cmd := tokenizeCmd()
		var out, errOut bytes.Buffer
		cmd.SetArgs([]string{"--tokenizer", arg})
		cmd.SetIn(strings.NewReader("Hello world, hello tokens."))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		err := cmd.Execute()
		return out.String(), err
	}
	fromDir, err := run(dir)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := run(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fromDir != fromFile || strings.TrimSpace(fromDir) == "" {
		t.Errorf("directory gives %q, its tokenizer.json %q", fromDir, fromFile)
	}
	if _, err := run(t.TempDir()); err == nil || !strings.Contains(err.Error(), "without a tokenizer.json") {
		t.Errorf("empty directory: err = %v", err)
	}
}
