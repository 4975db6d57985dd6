package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
)

// shapeOnlyGGUF writes a GGUF of a synth preset whose header (metadata and
// tensor infos) is real and whose tensor data is a hole: a sparse file of
// the model's full size, which costs no disk. bench capacity reads only
// the header.
func shapeOnlyGGUF(t *testing.T, preset string) string {
	t.Helper()
	spec, err := synth.Preset(preset, gguf.Q4_K)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := spec.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), preset+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := gguf.NewWriter(f, kv, spec.Tensors())
	if err != nil {
		t.Fatal(err)
	}
	// Close flushes the header and reports the tensors never written.
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "tensors missing") {
		t.Fatalf("closing a header-only writer: %v", err)
	}
	hdr, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	infos := w.Tensors()
	last := infos[len(infos)-1]
	data := int64(last.Offset+last.Bytes()+31) / 32 * 32
	if err := f.Truncate(hdr + data); err != nil {
		t.Fatal(err)
	}
	return path
}

// The Qwen3.6-35B-A3B shape in an 8 GiB budget: KV 20,480 B/token in bf16
// and 10,400 in fp8, the state per sequence apart, and the tokens that fit
// once the state is off the budget.
func TestCapacityHybridGolden(t *testing.T) {
	path := shapeOnlyGGUF(t, "qwen3.6-35b-a3b")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runBench(&out, &out, append([]string{"capacity", "--model", path}, args...)...)
		return strings.ReplaceAll(out.String(), path, "MODEL"), err
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	// The weights (18.2 GiB) do not fit 8 GiB: the engine's expert plan
	// keeps the KV of the model's 262,144 bf16 tokens, the state and the
	// workspace, and the experts in RAM.
	out, err := run("--gpu-memory", "8GiB")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "capacity_qwen36_35b_8gib.txt", []byte(out))
	// Issue 12's headline: fp8 KV for 131,072 tokens, the rest experts.
	out, err = run("--gpu-memory", "8GiB", "--kv-cache-dtype", "fp8_e4m3", "--ctx-size", "131072")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "capacity_qwen36_35b_8gib_fp8_131k.txt", []byte(out))
	js, err := run("--gpu-memory", "8GiB", "--kv-cache-dtype", "fp8_e4m3", "--ctx-size", "131072", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r CapacityReport
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	const perSeq = 4 * 30 * (3*8192 + 32*128*128) // 65,863,680
	if r.Rows[0].BytesPerToken != 20480 || r.Rows[2].BytesPerToken != 10400 || r.StateBytesPerSeq != perSeq ||
		r.StateSlots != 4 || r.StateBytes != 4*perSeq || r.Layers != 10 || r.Blocks != 40 {
		t.Errorf("report: %+v", r)
	}
	p := r.Placement
	if p == nil || p.DeviceLayers+p.HostLayers != 40 || p.HostLayers == 0 || p.NCPUMoE != p.HostLayers || p.StagingBytes < 2*p.HostExperts/int64(p.HostLayers) {
		t.Fatalf("placement: %+v", p)
	}
	if r.Weights != p.DenseBytes+p.DeviceExperts {
		t.Errorf("weights %d, want dense + device experts %d", r.Weights, p.DenseBytes+p.DeviceExperts)
	}
	for _, row := range r.Rows {
		left := r.Budget - r.Weights - r.Workspace - p.StagingBytes - r.StateBytes
		if want := int(left/int64(row.BytesPerToken*64)) * 64; row.DType != "fp8_e4m3" || row.ScaleMode != "static" {
			if row.Tokens != want {
				t.Errorf("%s %s: %d tokens, want %d", row.DType, row.ScaleMode, row.Tokens, want)
			}
		}
		if row.DType == "fp8_e4m3" && row.Tokens < 131072 {
			t.Errorf("%s %s: %d tokens, fewer than the 131,072 the plan reserved", row.DType, row.ScaleMode, row.Tokens)
		}
	}
	// Forced: --cpu-moe keeps every expert in RAM; an --n-cpu-moe that
	// leaves too many on the GPU is refused with the count that fits.
	out, err = run("--gpu-memory", "8GiB", "--kv-cache-dtype", "fp8_e4m3", "--ctx-size", "131072", "--cpu-moe")
	if err != nil || !strings.Contains(out, "experts 0/40 layers") || !strings.Contains(out, "RAM: experts 40 layers") {
		t.Errorf("--cpu-moe: %v\n%s", err, out)
	}
	_, err = run("--gpu-memory", "8GiB", "--kv-cache-dtype", "fp8_e4m3", "--ctx-size", "131072", "--n-cpu-moe", "10")
	if err == nil || !strings.Contains(err.Error(), "--n-cpu-moe 31 fits") {
		t.Errorf("--n-cpu-moe 10: %v", err)
	}
	// Not even the dense part fits: one message with the numbers.
	_, err = run("--gpu-memory", "6GiB")
	if err == nil || !strings.Contains(err.Error(), "lower --ctx-size, use --kv-cache-dtype fp8_e4m3, or raise --gpu-memory") {
		t.Errorf("6 GiB with 262,144 bf16 tokens: %v", err)
	}
}
