package kvcache

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestValidatePageSize(t *testing.T) {
	for _, p := range []int{1, 2, 16, 64, 256, 1024} {
		if err := ValidatePageSize(p); err != nil {
			t.Errorf("%d: %v", p, err)
		}
	}
	for _, p := range []int{0, -16, 3, 24, 100, 2048} {
		err := ValidatePageSize(p)
		if err == nil || !strings.Contains(err.Error(), "power of two from 1 to 1024") {
			t.Errorf("%d: %v", p, err)
		}
	}
}

func TestValidateHeadDimAndDevice(t *testing.T) {
	for _, d := range SupportedHeadDims {
		if err := ValidateHeadDim(d, 89); err != nil {
			t.Error(err)
		}
	}
	if err := ValidateHeadDim(72, 0); err != nil {
		t.Errorf("cpu must accept any head_dim: %v", err)
	}
	err := ValidateHeadDim(72, 90)
	if err == nil || !strings.Contains(err.Error(), "head_dim 72") || !strings.Contains(err.Error(), "64, 80, 96, 128, 256") {
		t.Errorf("72 on cuda: %v", err)
	}
	for _, d := range []DType{BF16, F16, FP8E4M3, FP8E5M2} {
		for _, cc := range []int{0, 75, 80, 86, 89, 90, 120} {
			if err := ValidateForDevice(d, cc); err != nil {
				t.Errorf("%v on %d: %v", d, cc, err)
			}
		}
	}
	err = ValidateForDevice(FP8E4M3, 70)
	if err == nil || !strings.Contains(err.Error(), "--kv-cache-dtype fp8_e4m3") || !strings.Contains(err.Error(), "sm_70") || !strings.Contains(err.Error(), "sm_75") {
		t.Errorf("fp8 on sm_70: %v", err)
	}
}

func TestScalesFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f := &ScalesFile{Model: "m", DType: FP8E4M3, Layers: 2, KVHeads: 3,
		K: [][]float32{{0.5, 1, 2}, {3, 4, 5}}, V: [][]float32{{1, 1, 1}, {0.25, 0.5, 0.125}},
		Calib: &CalibInfo{Tokens: 10, Percentile: 99.9, Margin: 1.1, Source: "x.txt"}}
	path := filepath.Join(dir, "s.json")
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	g, err := LoadScales(path)
	if err != nil {
		t.Fatal(err)
	}
	if g.Model != "m" || g.DType != FP8E4M3 || g.Layers != 2 || g.KVHeads != 3 || *g.Calib != *f.Calib ||
		!slices.EqualFunc(g.K, f.K, slices.Equal) || !slices.EqualFunc(g.V, f.V, slices.Equal) {
		t.Errorf("round trip: %+v", g)
	}
	k, v, err := g.Expand(FP8E4M3)
	if err != nil || !slices.Equal(k, []float32{0.5, 1, 2, 3, 4, 5}) || !slices.Equal(v, []float32{1, 1, 1, 0.25, 0.5, 0.125}) {
		t.Errorf("expand: %v %v %v", k, v, err)
	}
	// e4m3 scales used for e5m2 are rescaled by 448/57344 = 1/128.
	k, _, _ = g.Expand(FP8E5M2)
	if k[0] != 0.5/128 {
		t.Errorf("e5m2 expand: %v", k)
	}
	if err := g.Match(2, 3); err != nil {
		t.Error(err)
	}
	err = g.Match(30, 3)
	if err == nil || !strings.Contains(err.Error(), "--kv-scales") || !strings.Contains(err.Error(), "2 attention layers x 3 kv heads") || !strings.Contains(err.Error(), "30 x 3") {
		t.Errorf("mismatch: %v", err)
	}
}

func TestParseScalesPerLayerAndErrors(t *testing.T) {
	good := `{"format":"ftchat-kv-scales/1","model":"m","dtype":"fp8_e4m3","layers":2,"kv_heads":4,"k_scale":[0.5,2],"v_scale":[[1,2,3,4],[1,1,1,1]]}`
	f, err := ParseScales([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	k, v, _ := f.Expand(FP8E4M3)
	if !slices.Equal(k, []float32{0.5, 0.5, 0.5, 0.5, 2, 2, 2, 2}) || !slices.Equal(v, []float32{1, 2, 3, 4, 1, 1, 1, 1}) {
		t.Errorf("per-layer expand: %v %v", k, v)
	}
	for _, c := range []struct{ json, want string }{
		{`{`, "not a kv scales file"},
		{`{"format":"x"}`, "format"},
		{strings.Replace(good, "fp8_e4m3", "bf16", 1), "dtype"},
		{strings.Replace(good, `"layers":2`, `"layers":3`, 1), "k_scale has 2 layers"},
		{strings.Replace(good, `[0.5,2]`, `[0.5,-2]`, 1), "positive"},
		{strings.Replace(good, `[1,2,3,4]`, `[1,2]`, 1), "v_scale[0] has 2 values"},
		{strings.Replace(good, `[0.5,2]`, `"a"`, 1), "k_scale must be"},
	} {
		if _, err := ParseScales([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.json, err, c.want)
		}
	}
	if _, err := LoadScales(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "--kv-scales") {
		t.Errorf("missing file: %v", err)
	}
}

func TestCalibrator(t *testing.T) {
	const layers, heads, dim = 2, 2, 16
	c, err := NewCalibrator(layers, heads, dim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Scales("m", FP8E4M3, CalibOptions{}); !errors.Is(err, ErrNoSamples) {
		t.Errorf("empty calibrator: %v", err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	var all [layers][heads][]float64 // |k| per layer/head
	kmax, vmax := [layers][heads]float64{}, [layers][heads]float64{}
	for range 500 {
		for l := range layers {
			k, v := make([]float32, heads*dim), make([]float32, heads*dim)
			for i := range k {
				k[i] = float32(r.NormFloat64() * float64(1+l+i/dim))
				v[i] = float32(r.ExpFloat64())
				h := i / dim
				all[l][h] = append(all[l][h], math.Abs(float64(k[i])))
				kmax[l][h] = math.Max(kmax[l][h], math.Abs(float64(k[i])))
				vmax[l][h] = math.Max(vmax[l][h], float64(v[i]))
			}
			k[0] = float32(math.NaN()) // ignored
			c.Observe(l, k, v)
		}
	}
	if c.Tokens() != 500 {
		t.Errorf("tokens %d", c.Tokens())
	}
	f, err := c.Scales("m", FP8E4M3, CalibOptions{})
	if err != nil {
		t.Fatal(err)
	}
	amaxScales := f
	for l := range layers {
		for h := range heads {
			// amax of the non-NaN values; k[0] was replaced by NaN after recording.
			if got, want := f.V[l][h], float32(vmax[l][h])/448; got != want {
				t.Errorf("v scale [%d][%d] = %g want %g", l, h, got, want)
			}
			if f.K[l][h] > float32(kmax[l][h])/448 {
				t.Errorf("k scale above amax")
			}
		}
	}
	// Percentile: within one histogram bin (2^(1/32) ≈ 2.2%) above the exact order statistic.
	f, err = c.Scales("m", FP8E5M2, CalibOptions{Percentile: 99, Margin: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	for l := range layers {
		for h := range heads {
			xs := slices.Clone(all[l][h])
			sort.Float64s(xs)
			exact := xs[int(math.Ceil(0.99*float64(len(xs))))-1]
			got := float64(f.K[l][h]) * 57344 / 1.5
			if got < exact*0.97 || got > exact*1.0221 {
				t.Errorf("k p99 [%d][%d] = %g, exact %g", l, h, got, exact)
			}
		}
	}
	pl, _ := c.Scales("m", FP8E4M3, CalibOptions{PerLayer: true})
	for l := range layers {
		if len(pl.K[l]) != 1 || pl.K[l][0] != max(amaxScales.K[l][0], amaxScales.K[l][1]) {
			t.Errorf("per layer %d: %v, per head %v", l, pl.K[l], amaxScales.K[l])
		}
	}
	path := filepath.Join(t.TempDir(), "s.json")
	if err := pl.Save(path); err != nil {
		t.Fatal(err)
	}
	if g, err := LoadScales(path); err != nil || len(g.K[0]) != 1 {
		t.Errorf("per-layer reload: %v %v", g, err)
	}
	for _, o := range []CalibOptions{{Percentile: 101}, {Margin: -1}} {
		if _, err := c.Scales("m", FP8E4M3, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := c.Scales("m", BF16, CalibOptions{}); err == nil {
		t.Error("bf16 accepted")
	}
}

func TestDropOldestTurns(t *testing.T) {
	turns := []int{100, 500, 300, 200, 50}
	for _, c := range []struct {
		keep, need, capacity, want int
		err                        bool
	}{
		{1, 100, 2000, 0, false}, // 1250 fits
		{1, 100, 1000, 1, false}, // 1250 -> drop 500 -> 750
		{1, 500, 1000, 2, false}, // 1650 -> 1150 -> 850
		{1, 500, 600, 4, false},  // 1650 -> ... keep 100 + 500 = 600
		{1, 501, 600, 0, true},
		{0, 0, 50, 4, false},
		{9, 0, 100, 0, true}, // keep clamps to all turns
	} {
		got, err := DropOldestTurns(turns, c.keep, c.need, c.capacity)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%+v: %d, %v", c, got, err)
		}
	}
}

func TestCalibratorObserveStore(t *testing.T) {
	l := Layout{Layers: 2, KVHeads: 2, HeadDim: 8, PageSize: 4, Pages: 8, DType: BF16}
	st, _ := NewHostStore(l)
	r := rand.New(rand.NewPCG(9, 9))
	pages := []int32{5, 2, 7}
	want := [2][2][2]float32{} // [layer][k|v][head] amax of the bf16-rounded inputs
	for layer := range 2 {
		for tok := range 10 {
			k, v := make([]float32, 16), make([]float32, 16)
			for i := range k {
				k[i], v[i] = float32(r.NormFloat64()), float32(r.NormFloat64()*3)
				h := i / 8
				want[layer][0][h] = max(want[layer][0][h], float32(math.Abs(float64(DecodeBF16(EncodeBF16(k[i]))))))
				want[layer][1][h] = max(want[layer][1][h], float32(math.Abs(float64(DecodeBF16(EncodeBF16(v[i]))))))
			}
			st.WriteRow(layer, int(pages[tok/4]), tok%4, k, v)
		}
	}
	c, _ := NewCalibrator(2, 2, 8)
	if err := c.ObserveStore(st, pages, 10); err != nil {
		t.Fatal(err)
	}
	f, err := c.Scales("m", FP8E4M3, CalibOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for layer := range 2 {
		for h := range 2 {
			if f.K[layer][h] != want[layer][0][h]/448 || f.V[layer][h] != want[layer][1][h]/448 {
				t.Errorf("layer %d head %d: k %g v %g, want %g %g", layer, h, f.K[layer][h], f.V[layer][h], want[layer][0][h]/448, want[layer][1][h]/448)
			}
		}
	}
	if c.Tokens() != 10 {
		t.Errorf("tokens %d", c.Tokens())
	}
	bad, _ := NewCalibrator(3, 2, 8)
	if err := bad.ObserveStore(st, pages, 10); err == nil {
		t.Error("shape mismatch accepted")
	}
	if err := c.ObserveStore(st, pages, 13); err == nil {
		t.Error("n beyond the page table accepted")
	}
}

// TestGPUPairs: the GPU runs one dtype for both halves or a 16-bit K with
// an fp8 V; the refusal of any other pair is one line that names what
// runs and suggests the nearest pair that does.
func TestGPUPairs(t *testing.T) {
	dts := []DType{BF16, F16, FP8E4M3, FP8E5M2}
	for _, k := range dts {
		for _, v := range dts {
			want := k == v || !k.IsFP8() && v.IsFP8()
			if got := GPUPairSupported(k, v); got != want {
				t.Errorf("GPUPairSupported(%v, %v) = %v, want %v", k, v, got, want)
			}
			if want {
				continue
			}
			msg := MixedOnGPUError(k, v).Error()
			sk, sv := gpuK(k, v), gpuV(k, v)
			if !GPUPairSupported(sk, sv) || sk == sv {
				t.Errorf("%s: suggests k=%v v=%v, which is not a mixed pair the GPU runs", PairName(k, v), sk, sv)
			}
			for _, s := range []string{PairName(k, v), "K in bf16/fp16 with V in fp8_e4m3/fp8_e5m2",
				"--cache-type-k " + sk.String() + " --cache-type-v " + sv.String(), "--device cpu runs every pair"} {
				if !strings.Contains(msg, s) {
					t.Errorf("%s: %q does not say %q", PairName(k, v), msg, s)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("%s: %q is more than one line", PairName(k, v), msg)
			}
		}
	}
}
