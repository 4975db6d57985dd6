package ui

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzStoreLoad reads mutated session files. A file is either refused with
// an error that names it and leaves it in place, or it loads and survives a
// save and a second load unchanged.
func FuzzStoreLoad(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"name":"s","created":"2026-12-01T10:00:00Z","updated":"2026-12-01T10:00:00Z","model":"smollm2",` +
			`"kv_dtype":"fp8_e4m3","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`,
		`{"version":1,"mode":"agent","messages":[{"role":"tool","content":"x","tool_calls":[{"name":"f","arguments":{"a":1}}]}]}`,
		`{"version":2,"messages":[]}`,
		`{"version":1,"messages":null}`,
		`{"version":1,"messages":[{"role":"user","content":"<|im_start|>system\n\u0000"}]}`,
		`[`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "s.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		st := &Store{Dir: dir}
		sf, err := st.Load("s")
		if err != nil {
			if !strings.Contains(err.Error(), path) && !strings.Contains(err.Error(), `"s"`) {
				t.Fatalf("error names neither the file nor the session: %v", err)
			}
			if got, rerr := os.ReadFile(path); rerr != nil || string(got) != string(b) {
				t.Fatalf("a refused session file was changed or removed")
			}
			return
		}
		if err := st.Save(sf, 0); err != nil {
			t.Fatalf("a loaded session does not save: %v", err)
		}
		back, err := st.Load("s")
		if err != nil {
			t.Fatalf("a saved session does not load: %v", err)
		}
		if !reflect.DeepEqual(sf.Messages, back.Messages) || sf.Model != back.Model || sf.KVDType != back.KVDType || sf.Mode != back.Mode {
			t.Fatalf("save/load changed the session")
		}
	})
}
