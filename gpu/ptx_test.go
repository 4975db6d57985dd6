package gpu

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestKernelPTXTarget(t *testing.T) {
	for _, tc := range []struct {
		arch    int
		want    string
		wantErr bool
	}{{75, "", true}, {80, "sm80", false}, {86, "sm80", false}, {89, "sm89", false}, {90, "sm90 sm89", false}, {120, "sm90 sm89", false}} {
		ts, err := ptxTargets(tc.arch)
		got := strings.Join(ts, " ")
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ptxTargets(%d) = %q, %v; want %q (error %v)", tc.arch, got, err, tc.want, tc.wantErr)
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
// both PTX targets.
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
	for _, arch := range []int{80, 90} {
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
