package gpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/gpu/internal/ptxgz"
	"github.com/ftchat/ftchat/gpu/internal/ptxhash"
)

// TestPTXUpToDate fails when a kernels/*.cu changed without regenerating its
// PTX: each generated file records the SHA-256 of the source it came from.
// The PTX is embedded gzip-compressed, so this also proves every module
// decompresses.
func TestPTXUpToDate(t *testing.T) {
	srcs, err := filepath.Glob("kernels/*.cu")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no kernel sources found: %v", err)
	}
	for _, src := range srcs {
		want, err := ptxhash.Source("kernels", filepath.Base(src))
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(src), ".cu")
		code, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, suf := range ptxhash.Targets(code) {
			ptx := filepath.Join("kernels", name+"_"+suf+ptxgz.Ext)
			gz, err := os.ReadFile(ptx)
			if err != nil {
				t.Errorf("%s has no generated %s: run go generate ./gpu/...", src, ptx)
				continue
			}
			b, err := ptxgz.Decode(gz, 0)
			if err != nil {
				t.Errorf("%s: %v", ptx, err)
				continue
			}
			if got := ptxhash.Recorded(b); got != want {
				t.Errorf("%s is stale (records source hash %q, %s hashes to %s): run go generate ./gpu/...", ptx, got, src, want)
			}
			if !bytes.Contains(b, []byte(".target sm_"+suf[2:])) {
				t.Errorf("%s does not target sm_%s", ptx, suf[2:])
			}
		}
	}
	// Only the .ptx.gz files are embedded: a plain .ptx left here (an older
	// ptxgen, a copied tuning build) would silently not be the one loaded.
	plain, _ := filepath.Glob("kernels/*.ptx")
	for _, p := range plain {
		t.Errorf("%s: kernels/ holds uncompressed PTX, which is not embedded; regenerate with go generate ./gpu/... (writes .ptx.gz)", p)
	}
}

// TestKernelPTXTarget is the flavour selection: compute capability x
// --compute-dtype x FTCHAT_PTX_FLAVOUR -> the flavours loaded, best first.
func TestKernelPTXTarget(t *testing.T) {
	for _, tc := range []struct {
		arch  int
		cd    ComputeDType
		force string
		want  string // flavours, or a substring of the error
		err   bool
	}{
		{70, ComputeAuto, "", "older than sm_75", true},
		{75, ComputeAuto, "", "sm75", false},
		{75, ComputeF16, "", "sm75", false},
		{75, ComputeBF16, "", "--compute-dtype bf16 needs sm_80", true},
		{80, ComputeAuto, "", "sm80", false},
		{80, ComputeBF16, "", "sm80", false},
		{80, ComputeF16, "", "sm75", false},
		{86, ComputeAuto, "", "sm80", false},
		{86, ComputeF16, "", "sm75", false},
		{89, ComputeAuto, "", "sm89", false},
		{89, ComputeF16, "", "sm75", false},
		{90, ComputeAuto, "", "sm90 sm89", false},
		{90, ComputeF16, "", "sm75", false},
		{120, ComputeBF16, "", "sm90 sm89", false},
		{90, ComputeAuto, "sm75", "sm75", false},
		{90, ComputeF16, "sm75", "sm75", false},
		{90, ComputeAuto, "sm80", "sm80", false},
		{90, ComputeAuto, "sm89", "sm89", false},
		{80, ComputeAuto, "sm89", "needs sm_89 or newer", true},
		{90, ComputeBF16, "sm75", "cannot run --compute-dtype bf16", true},
		{90, ComputeF16, "sm80", "--compute-dtype fp16 needs sm75", true},
		{90, ComputeAuto, "sm70", "supported values are sm75, sm80, sm89 and sm90", true},
		{90, ComputeAuto, "75", "supported values are sm75", true},
	} {
		ts, err := ptxTargets(tc.arch, tc.cd, tc.force)
		got := strings.Join(ts, " ")
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ptxTargets(%d, %v, %q) = %q, %v; want an error mentioning %q", tc.arch, tc.cd, tc.force, got, err, tc.want)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ptxTargets(%d, %v, %q) = %q, %v; want %q", tc.arch, tc.cd, tc.force, got, err, tc.want)
		}
		if want := map[bool]ComputeDType{true: ComputeF16, false: ComputeBF16}[got == "sm75"]; targetsCompute(ts) != want {
			t.Errorf("targetsCompute(%q) = %v, want %v", got, targetsCompute(ts), want)
		}
	}
	p, err := KernelPTX("ops", 90)
	if err != nil {
		t.Fatal(err)
	}
	if p[len(p)-1] != 0 {
		t.Error("PTX handed to the driver must end in a NUL byte")
	}
}

// TestParseComputeDType: the flag's values, and one error naming them.
func TestParseComputeDType(t *testing.T) {
	for in, want := range map[string]ComputeDType{"": ComputeAuto, "auto": ComputeAuto, "bf16": ComputeBF16, "BF16": ComputeBF16, "fp16": ComputeF16, " f16 ": ComputeF16} {
		got, err := ParseComputeDType(in)
		if err != nil || got != want {
			t.Errorf("ParseComputeDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"fp32", "fp8", "half", "bf16,fp16"} {
		_, err := ParseComputeDType(in)
		if err == nil {
			t.Errorf("ParseComputeDType(%q): no error", in)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "--compute-dtype \""+in+"\"") || !strings.Contains(msg, "auto") || !strings.Contains(msg, "bf16 and fp16") {
			t.Errorf("ParseComputeDType(%q): error %q does not name the value and the allowed ones", in, msg)
		}
	}
}

// TestSM75PTXIsFP16 checks, without a GPU, that the sm75 flavour of the
// tensor-core modules is what fp16 compute promises: fp16 MMAs only (no
// bf16 one, no m16n8k16 one Turing lacks), no cp.async or redux.sync, and
// the default flavours keep their bf16 MMAs.
func TestSM75PTXIsFP16(t *testing.T) {
	for _, mod := range []string{"mm_q4_k", "mm_bf16", "mm_f16", "moe_q4_k", "moe_q8_0", "attention", "moe"} {
		p, err := KernelPTX(mod, 75)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(p, []byte(".target sm_75")) {
			t.Errorf("%s sm75: not compute_75 PTX", mod)
		}
		for _, bad := range []string{".bf16", "m16n8k16", "cp.async", "redux.sync", "e4m3x2"} {
			if bytes.Contains(p, []byte(bad)) {
				t.Errorf("%s sm75 PTX contains %q, which sm_75 cannot run", mod, bad)
			}
		}
		if mod != "moe" && !bytes.Contains(p, []byte("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")) {
			t.Errorf("%s sm75 PTX has no fp16 m16n8k8 MMA", mod)
		}
		if mod == "mm_q4_k" || mod == "moe_q4_k" {
			p80, err := KernelPTX(mod, 80)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(p80, []byte("m16n8k16.row.col.f32.bf16.bf16.f32")) {
				t.Errorf("%s sm80 PTX lost its bf16 MMA", mod)
			}
		}
	}
}

// BenchmarkKernelPTX is the cost of handing a module to the driver before
// the JIT: reading (and, since the PTX is stored compressed, inflating) the
// largest module.
func BenchmarkKernelPTX(b *testing.B) {
	for _, arch := range []int{80, 90} {
		b.Run(fmt.Sprintf("attention/sm%d", arch), func(b *testing.B) {
			for b.Loop() {
				p, err := KernelPTX("attention", arch)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(p)))
			}
		})
	}
}

// TestKernelModules checks, without a GPU, that every kernel the backend
// launches is an entry of the embedded module kernelModule names, for
// the sm75, sm80 and sm90 PTX targets.
func TestKernelModules(t *testing.T) {
	names := []string{"rmsnorm", "head_rmsnorm", "rope", "swiglu", "add", "add_bias", "argmax_rows", "moe_route", "moe_combine", "fill_u32"}
	for _, typ := range SupportedTypes() {
		suf := kernelSuffix[typ]
		for _, p := range typedKernels {
			if (p == "gemvf_" || p == "embedf_") && !isFloatType(typ) {
				continue
			}
			names = append(names, p+suf)
		}
	}
	for _, p := range gemmqKernels {
		names = append(names, p+kernelSuffix[gguf.Q4_K], p+kernelSuffix[gguf.Q6_K])
	}
	for _, p := range gemvqKernels {
		names = append(names, p+kernelSuffix[gguf.Q4_K], p+kernelSuffix[gguf.Q6_K])
	}
	for _, arch := range []int{75, 80, 90} {
		for _, n := range names {
			mod := kernelModule(n)
			ptx, err := KernelPTX(mod, arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(ptx, []byte(".visible .entry "+n+"(")) {
				t.Errorf("kernel %s is not in module %s (sm_%d)", n, mod, arch)
			}
		}
	}
}
