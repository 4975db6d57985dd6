package engine

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/kvcache"
)

func TestValidateKVTypes(t *testing.T) {
	gpu := Hardware{CUDA: true, ComputeCap: 90, DeviceName: "H200", DeviceCount: 1}
	none := Hardware{CUDAReason: "libcuda.so.1 not found"}
	for _, tc := range []struct {
		name string
		o    Options
		hw   Hardware
		want string // substring of the error; "" = valid
	}{
		{"mixed cpu", Options{KVDTypeK: "bf16", KVDTypeV: "fp8_e4m3", Device: "cpu"}, none, ""},
		{"v only", Options{KVDType: "fp8_e5m2", KVDTypeK: "fp16"}, none, ""},
		{"same pair on gpu", Options{KVDTypeK: "fp8", KVDTypeV: "fp8_e4m3", Device: "cuda"}, gpu, ""},
		{"16-bit k, fp8 v on gpu", Options{KVDTypeK: "bf16", KVDTypeV: "fp8_e4m3", Device: "cuda"}, gpu, ""},
		{"fp16 k, e5m2 v on gpu", Options{KVDTypeK: "fp16", KVDTypeV: "fp8_e5m2", Device: "cuda"}, gpu, ""},
		{"fp8 k, 16-bit v on gpu", Options{KVDTypeK: "fp8_e4m3", KVDTypeV: "bf16", Device: "cuda"}, gpu,
			"K/V dtypes k=fp8_e4m3 v=bf16 do not run on the GPU"},
		{"two fp8 formats on gpu", Options{KVDTypeK: "fp8_e5m2", KVDTypeV: "fp8_e4m3", Device: "cuda"}, gpu,
			"--device cpu runs every pair"},
		{"two 16-bit formats on gpu", Options{KVDTypeK: "bf16", KVDTypeV: "fp16", Device: "cuda"}, gpu,
			"K in bf16/fp16 with V in fp8_e4m3/fp8_e5m2"},
		{"bad k", Options{KVDTypeK: "q8_0"}, none, `--cache-type-k "q8_0" is not supported`},
		{"bad v", Options{KVDTypeV: "int4"}, none, `--cache-type-v "int4" is not supported`},
		{"auto half", Options{KVDTypeV: "auto"}, none, `--cache-type-v "auto" is not supported`},
		{"scales, fp8 v", Options{KVScales: "s.json", KVDTypeK: "bf16", KVDTypeV: "fp8"}, none, ""},
		{"scales, no fp8 half", Options{KVScales: "s.json", KVDType: "fp8", KVDTypeK: "bf16", KVDTypeV: "fp16"}, none, "needs an fp8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate(tc.hw)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// halves reads back the K rows and the V rows a session holds (all layers).
func halves(t *testing.T, e *Engine, s *Session) (k, v []float32) {
	t.Helper()
	hs := e.be.(*cpu.Backend).KVStore()
	l := hs.Layout()
	hw := l.KVHeads * l.HeadDim
	rk, rv := make([]float32, hw), make([]float32, hw)
	pages := s.seq.Pages()
	for pos := range s.seq.Len() {
		for layer := range l.Layers {
			hs.ReadRow(layer, int(pages[pos/l.PageSize]), pos%l.PageSize, rk, rv)
			k, v = append(k, rk...), append(v, rv...)
		}
	}
	return k, v
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// An engine loaded with --cache-type-k bf16 --cache-type-v fp8_e4m3 stores
// each half in its dtype and accounts it so; /kvdtype converts one half
// at a time (the other keeps its very bits) and back.
func TestMixedKVEngineAndSwitch(t *testing.T) {
	e := load(t, Options{KVTokens: 1024, KVDTypeK: "bf16", KVDTypeV: "fp8_e4m3"})
	c := e.mdl.Config
	st := e.Stats()
	bf16 := kvcache.BytesPerToken(c.AttnLayers, c.KVHeads, c.HeadDim, kvcache.BF16, kvcache.DynamicScales)
	fp8 := kvcache.BytesPerToken(c.AttnLayers, c.KVHeads, c.HeadDim, kvcache.FP8E4M3, kvcache.DynamicScales)
	if st.KVDType != "k=bf16 v=fp8_e4m3" || st.BytesPerToken != (bf16+fp8)/2 {
		t.Fatalf("stats: %q, %d B/token; want k=bf16 v=fp8_e4m3, %d", st.KVDType, st.BytesPerToken, (bf16+fp8)/2)
	}
	if st.FP8TokensCapacity <= st.TokensCapacity {
		t.Fatalf("fp8 would hold %d tokens, the mixed pool %d: all-fp8 must hold more", st.FP8TokensCapacity, st.TokensCapacity)
	}
	s := e.NewSession()
	msgs := []Message{{Role: "user", Content: "Summarise this.\n" + longText(40)}}
	collect(t, s.Generate(context.Background(), greedy(2, msgs...)))
	k0, v0 := halves(t, e, s)

	// V to bf16: K untouched bit for bit, V widened exactly (bf16 holds
	// every fp8 value times its float32 scale up to bf16 rounding).
	if err := e.SwitchKV(context.Background(), "v=bf16", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().KVDType; got != "bf16" {
		t.Fatalf("after v=bf16 the cache is %q", got)
	}
	k1, v1 := halves(t, e, s)
	if !sameBits(k1, k0) {
		t.Fatal("switching V changed the K half")
	}
	if d := rowsRelErr(v1, v0); d > 0x1p-8 {
		t.Fatalf("V widened to bf16 moved by %.5f (relative L2), want <= 2^-8", d)
	}

	// K to fp8: V untouched, K within E4M3's rounding.
	if err := e.SwitchKV(context.Background(), "k=fp8_e4m3", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().KVDType; got != "k=fp8_e4m3 v=bf16" {
		t.Fatalf("after k=fp8_e4m3 the cache is %q", got)
	}
	k2, v2 := halves(t, e, s)
	if !sameBits(v2, v1) {
		t.Fatal("switching K changed the V half")
	}
	if d := rowsRelErr(k2, k1); d == 0 || d > 0.04 {
		t.Fatalf("K requantized to fp8_e4m3 moved by %.5f (relative L2), want in (0, 0.04]", d)
	}

	// Reconfigure (the re-prefill path) takes the same specs, and the
	// conversation still answers with prefix reuse.
	if err := e.Reconfigure(context.Background(), "k=bf16 v=fp8_e5m2", nil); err != nil {
		t.Fatal(err)
	}
	if got := e.Stats().KVDType; got != "k=bf16 v=fp8_e5m2" {
		t.Fatalf("after Reconfigure the cache is %q", got)
	}
	next := append(append([]Message(nil), msgs...), Message{Role: "user", Content: "Shorter."})
	collect(t, s.Generate(context.Background(), greedy(2, next...)))
	if st := e.Stats(); st.LastPrefillTokens > 40 {
		t.Fatalf("after the switch the next turn prefilled %d tokens", st.LastPrefillTokens)
	}
	for _, bad := range []string{"k=int8", "q=bf16", "k=bf16 k=fp16"} {
		if err := e.SwitchKV(context.Background(), bad, nil); err == nil {
			t.Errorf("SwitchKV(%q) accepted", bad)
		}
	}
}

// bench quality's --kv-cache-dtype entries name K and V apart with a
// slash; a half left out is bf16, the reference.
func TestMixedKVBenchSpec(t *testing.T) {
	e := load(t, Options{KVTokens: 256})
	for _, c := range []struct{ in, name, mode string }{
		{"k=bf16/v=fp8_e4m3", "k=bf16 v=fp8_e4m3", "dynamic"},
		{"v=fp8_e5m2", "k=bf16 v=fp8_e5m2", "dynamic"},
		{"k=fp16/v=fp16", "fp16", "none"},
	} {
		s, err := e.KVSpecFor(c.in, "")
		if err != nil {
			t.Fatal(err)
		}
		if s.String() != c.name || s.ScaleMode() != c.mode {
			t.Errorf("%q: %q %q, want %q %q", c.in, s, s.ScaleMode(), c.name, c.mode)
		}
	}
}
