package ui

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

func TestStoreRoundTripAndList(t *testing.T) {
	st := &Store{Dir: filepath.Join(t.TempDir(), "nested", "sessions")}
	if names, err := st.List(); err != nil || len(names) != 0 {
		t.Fatalf("empty store: %v %v", names, err)
	}
	f := &SessionFile{Name: "a", Model: "m", Messages: []engine.Message{{Role: "user", Content: "héllo\n```x```"}}}
	if err := st.Save(f, 5); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := st.Save(&SessionFile{Name: "b"}, 2); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute)
	os.Chtimes(filepath.Join(st.Dir, "a.json"), future, future)
	got, err := st.Load("a")
	if err != nil || got.Messages[0].Content != f.Messages[0].Content || got.Version != sessionVersion {
		t.Fatalf("load: %+v %v", got, err)
	}
	if latest, _ := st.Latest(); latest != "a" {
		t.Errorf("latest = %q, want a (newest mtime)", latest)
	}
	// Stale temp files from a crash are not sessions.
	os.WriteFile(filepath.Join(st.Dir, ".c.json.123.tmp"), []byte("{"), 0o600)
	if names, _ := st.List(); len(names) != 2 {
		t.Errorf("list = %v", names)
	}
	// An older save that finishes late does not overwrite a newer one.
	if err := st.Save(&SessionFile{Name: "a", Model: "stale"}, 3); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Load("a"); got.Model != "m" {
		t.Errorf("an out-of-order save overwrote a newer one: model %q", got.Model)
	}
}

func TestStoreBadInput(t *testing.T) {
	st := &Store{Dir: t.TempDir()}
	for _, n := range []string{"", "../x", "a/b", ".hidden", "x.tmp", strings.Repeat("n", 101)} {
		if err := st.Save(&SessionFile{Name: n}, 0); err == nil || !strings.Contains(err.Error(), "bad session name") {
			t.Errorf("Save(%q) error = %v", n, err)
		}
	}
	cases := map[string]string{
		"empty":   "",
		"trunc":   `{"version":1,"messages":[`,
		"array":   `[1,2]`,
		"version": `{"version":99,"messages":[]}`,
	}
	for name, content := range cases {
		p := filepath.Join(st.Dir, name+".json")
		os.WriteFile(p, []byte(content), 0o600)
		_, err := st.Load(name)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "left as it is") {
			t.Errorf("Load(%s) error = %v", name, err)
		}
		if data, _ := os.ReadFile(p); string(data) != content {
			t.Errorf("Load(%s) modified the file", name)
		}
	}
}

const crashChildEnv = "FTCHAT_UI_SAVE_CHILD"

// crashPayload is a session big enough that a write takes a while, tagged
// with its generation so the parent can check it is complete.
func crashPayload(gen int) *SessionFile {
	msgs := make([]engine.Message, 200)
	for i := range msgs {
		msgs[i] = engine.Message{Role: "user", Content: strings.Repeat(strconv.Itoa(gen%10), 2000)}
	}
	return &SessionFile{Name: "crash", Model: "gen-" + strconv.Itoa(gen), Messages: msgs}
}

// TestSaveCrashChild is the child process of TestSaveCrashSafety: it
// saves new generations of a session until it is killed.
func TestSaveCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("child process of TestSaveCrashSafety")
	}
	st := &Store{Dir: dir}
	base, _ := strconv.Atoi(os.Getenv(crashChildEnv + "_BASE"))
	for gen := base + 1; ; gen++ {
		if err := st.Save(crashPayload(gen), uint64(gen)); err != nil {
			fmt.Fprintln(os.Stderr, "save:", err)
			os.Exit(3)
		}
	}
}

// TestSaveCrashSafety kills a process in the middle of repeated saves and
// checks the file is always a complete session, never empty or partial.
func TestSaveCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "crash.json")
	rng := rand.New(rand.NewPCG(1, 2))
	lastGen := 0
	for round := 0; round < 8; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSaveCrashChild$", "-test.count=1")
		base := (round + 1) * 1000000
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashChildEnv+"_BASE="+strconv.Itoa(base))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until this child has completed a save, then kill it at a
		// random moment (most likely in the middle of a later save).
		deadline := time.Now().Add(20 * time.Second)
		for currentGen(path) <= base {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("the child never saved")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()

		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var f SessionFile
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("round %d: the session file is corrupt after a kill (%d bytes): %v", round, len(data), err)
		}
		gen, err := strconv.Atoi(strings.TrimPrefix(f.Model, "gen-"))
		if err != nil || len(f.Messages) != 200 {
			t.Fatalf("round %d: incomplete session: model %q, %d messages", round, f.Model, len(f.Messages))
		}
		want := crashPayload(gen)
		for i, m := range f.Messages {
			if m.Content != want.Messages[i].Content {
				t.Fatalf("round %d: message %d of generation %d differs", round, i, gen)
			}
		}
		if gen <= base {
			t.Fatalf("round %d: generation %d is older than the one seen before the kill", round, gen)
		}
		t.Logf("round %d: killed after %d saves", round, gen-base)
		lastGen = gen
	}
	if lastGen == 0 {
		t.Fatal("no generation observed")
	}
}

// currentGen reads the generation of the session file, 0 if unreadable.
func currentGen(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var f SessionFile
	if json.Unmarshal(data, &f) != nil {
		return 0
	}
	g, _ := strconv.Atoi(strings.TrimPrefix(f.Model, "gen-"))
	return g
}

// A save killed between create and rename leaves a temporary file; the
// next start (the first List or Save) removes it once it is clearly stale,
// and leaves young ones (another ftchat may be saving) and sessions alone.
func TestStoreRemovesStaleTempFiles(t *testing.T) {
	for _, first := range []string{"list", "save"} {
		t.Run(first, func(t *testing.T) {
			dir := t.TempDir()
			old := time.Now().Add(-10 * time.Minute)
			files := map[string]bool{ // name -> kept
				".a.json.123.tmp": false,
				".b.json.9.tmp":   false,
				".c.json.77.tmp":  true, // young
				"a.json":          true,
				"notes.tmp":       true, // not a save's temp file
			}
			for n, kept := range files {
				p := filepath.Join(dir, n)
				os.WriteFile(p, []byte(`{"version":1,"messages":[]}`), 0o600)
				if !kept || n == "a.json" || n == "notes.tmp" {
					os.Chtimes(p, old, old)
				}
			}
			st := &Store{Dir: dir}
			switch first {
			case "list":
				if names, err := st.List(); err != nil || len(names) != 1 {
					t.Fatalf("list = %v, %v", names, err)
				}
			case "save":
				if err := st.Save(&SessionFile{Name: "z"}, 1); err != nil {
					t.Fatal(err)
				}
			}
			for n, kept := range files {
				_, err := os.Stat(filepath.Join(dir, n))
				if got := err == nil; got != kept {
					t.Errorf("%s: kept = %v, want %v", n, got, kept)
				}
			}
		})
	}
}

// A save that fails at any step returns the error and leaves no temporary
// file behind: the target is a directory (rename fails), or the session
// directory is under a regular file (mkdir fails, root included).
func TestStoreFailedSaveReportsErrorAndLeavesNoTemp(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "file"), nil, 0o600)
	os.MkdirAll(filepath.Join(base, "d", "x.json", "inner"), 0o700)
	tests := []struct{ name, dir, errHas string }{
		{"target is a directory", filepath.Join(base, "d"), `save session "x"`},
		{"dir under a file", filepath.Join(base, "file", "sessions"), "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &Store{Dir: tc.dir}
			err := st.Save(&SessionFile{Name: "x"}, 1)
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("error = %v, want %q", err, tc.errHas)
			}
			if st.savedThrough("x") != 0 {
				t.Error("a failed save was recorded as written")
			}
			if tmps, _ := filepath.Glob(filepath.Join(tc.dir, ".*.tmp")); len(tmps) != 0 {
				t.Errorf("temporary files left: %v", tmps)
			}
		})
	}
}
