package gpu

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// attnPairs are the K/V dtype pairs kernels/attention.cu is built for, in
// attn_fa_smem's order: the four single dtypes, then kvcache.GPUPairs.
func attnPairs() [][2]kvcache.DType {
	ps := [][2]kvcache.DType{{kvcache.BF16, kvcache.BF16}, {kvcache.F16, kvcache.F16},
		{kvcache.FP8E4M3, kvcache.FP8E4M3}, {kvcache.FP8E5M2, kvcache.FP8E5M2}}
	return append(ps, kvcache.GPUPairs...)
}

// A pair the GPU does not run (an fp8 K with a 16-bit V, two fp8 or two
// 16-bit formats) is refused before anything touches the device (so this
// runs without a GPU, on a Ctx that has none), with one line that names
// the pairs that do run and the way out.
func TestAllocKVRefusesUnsupportedPairs(t *testing.T) {
	base := kvcache.Layout{Layers: 2, KVHeads: 2, HeadDim: 64, PageSize: 16, Pages: 4}
	for _, p := range [][2]kvcache.DType{
		{kvcache.FP8E4M3, kvcache.BF16}, {kvcache.FP8E5M2, kvcache.F16}, {kvcache.FP8E4M3, kvcache.FP8E5M2},
		{kvcache.FP8E5M2, kvcache.FP8E4M3}, {kvcache.BF16, kvcache.F16}, {kvcache.F16, kvcache.BF16},
	} {
		l := base.WithDTypes(p[0], p[1])
		kv, err := (&Ctx{}).AllocKV(l)
		if kv != nil || err == nil {
			t.Fatalf("%s: allocated", l.DTypeName())
		}
		msg := err.Error()
		for _, want := range []string{"K/V dtypes " + l.DTypeName() + " do not run on the GPU",
			"K in bf16/fp16 with V in fp8_e4m3/fp8_e5m2", "--device cpu runs every pair"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q; want it to say %q", l.DTypeName(), msg, want)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: %q is more than one line", l.DTypeName(), msg)
		}
	}
}

// TestAttentionKernelsForEveryPair checks, without a GPU, that every
// kernel name the launchers build for a pair the GPU accepts
// (kvcache.GPUPairSupported) is an entry of the attention module, for
// every head_dim and PTX target, and that kvcache.GPUPairs is exactly the
// mixed part of attnPairs (the order attn_fa_smem reports).
func TestAttentionKernelsForEveryPair(t *testing.T) {
	dts := []kvcache.DType{kvcache.BF16, kvcache.F16, kvcache.FP8E4M3, kvcache.FP8E5M2}
	var runs [][2]kvcache.DType
	for _, k := range dts {
		for _, v := range dts {
			if kvcache.GPUPairSupported(k, v) {
				runs = append(runs, [2]kvcache.DType{k, v})
			}
		}
	}
	if len(runs) != len(attnPairs()) {
		t.Fatalf("the GPU accepts %d pairs %v; attention.cu is built for %d %v", len(runs), runs, len(attnPairs()), attnPairs())
	}
	for _, arch := range []int{80, 89, 90} {
		ptx, err := KernelPTX(attentionModule, arch)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range runs {
			l := kvcache.Layout{DType: p[0]}.WithDTypes(p[0], p[1])
			var names []string
			for _, d := range attnHeadDims {
				names = append(names, fmt.Sprintf("attn_%s_d%d", kernelDTypes(l), d))
			}
			for _, d := range faHeadDims {
				names = append(names, fmt.Sprintf("attn_fa_%s_d%d", kernelDTypes(l), d))
			}
			for _, n := range names {
				if !bytes.Contains(ptx, []byte(".visible .entry "+n+"(")) {
					t.Errorf("%s: kernel %s is not in the attention module (sm_%d)", l.DTypeName(), n, arch)
				}
			}
		}
	}
}

// TestKVAllocSizesPerHalf checks, without a GPU, the per-half sizes the
// pool is laid out with against kvcache's accounting: a mixed pool's
// codes and scales per token equal Layout.BytesPerToken.
func TestKVAllocSizesPerHalf(t *testing.T) {
	for _, p := range attnPairs() {
		for _, sm := range []kvcache.ScaleMode{kvcache.DynamicScales, kvcache.StaticScales} {
			l := kvcache.Layout{Layers: 3, KVHeads: 2, HeadDim: 128, PageSize: 16, Pages: 5, Scales: sm}.WithDTypes(p[0], p[1])
			kc, vc, ks, vs := kvHalfBytes(l)
			perToken := (kc + vc + ks + vs) * int64(l.Layers) / int64(l.Tokens())
			if want := int64(l.BytesPerToken()); perToken != want {
				t.Errorf("%s %v: %d bytes per token (K %d+%d, V %d+%d per layer), kvcache counts %d",
					l.DTypeName(), sm, perToken, kc, ks, vc, vs, want)
			}
		}
	}
}
