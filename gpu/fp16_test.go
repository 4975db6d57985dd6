package gpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// The fp16-compute flavour (--compute-dtype fp16: the compute_75 "sm75"
// PTX, Turing's only flavour) on whatever GPU runs the tests, against the
// float64 reference and the CPU backend, and against the default bf16
// flavour on the same inputs: fp16 operands carry 11 mantissa bits to
// bf16's 8, so on values inside fp16's range its error must not exceed
// the bf16 path's, and stays under tolF16.
const tolF16 = 3e-3 // fp16 operands (rounding 2^-11), float32 accumulation

var (
	f16DevOnce sync.Once
	f16Dev     *Device
	f16DevErr  error
	f16Backend *Backend
)

// newF16Backend opens a second device of cuda:0 with Options.Compute =
// ComputeF16 (its modules load the sm75 flavour) and a backend on it,
// once for the package's tests; it skips without a GPU, as openTestDevice.
func newF16Backend(t *testing.T) *Backend {
	t.Helper()
	openTestDevice(t) // the skip (or FTCHAT_REQUIRE_GPU failure) when there is no GPU
	f16DevOnce.Do(func() {
		start := time.Now()
		if f16Dev, f16DevErr = Open(0, Options{Compute: ComputeF16}); f16DevErr != nil {
			return
		}
		f16Backend, f16DevErr = NewBackend(f16Dev, BackendOptions{})
		t.Logf("%s: fp16-compute backend ready (sm75 ops JIT) in %v", f16Dev.Info(), time.Since(start))
	})
	if f16DevErr != nil {
		t.Fatal(f16DevErr)
	}
	if f16Dev.Compute() != ComputeF16 || len(f16Dev.c.targets) != 1 || f16Dev.c.targets[0] != "sm75" {
		t.Fatalf("the fp16 device loads %v (compute %v), want the sm75 flavour", f16Dev.c.targets, f16Dev.Compute())
	}
	return f16Backend
}

// newF16Pair is newPair on the fp16-compute backend.
func newF16Pair(t *testing.T) *pair {
	g := newF16Backend(t)
	c := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(c.Close)
	p := &pair{t: t, g: g, c: c}
	t.Cleanup(func() {
		for _, x := range p.gts {
			g.FreeTensor(x)
		}
	})
	return p
}

// download reads a GPU tensor of p's backend, failing on a backend error.
func (p *pair) download(x model.Tensor) []float32 {
	p.t.Helper()
	out := make([]float32, x.Rows()*x.Cols())
	p.g.ToHost(x, out)
	if err := p.g.Err(); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// TestF16ComputeMatMul: the tensor-core GEMMs of the sm75 flavour (9 and
// 64 rows: the split-K 64x64 tile GEMM; 512: the 128x128 one) for
// several weight types, against the float64 reference, the CPU backend and
// the bf16 flavour on the same weights and inputs. Outputs start as NaN.
func TestF16ComputeMatMul(t *testing.T) {
	pf := newF16Pair(t)
	pb := newPair(t)
	if os.Getenv(flavourEnv) != "" {
		t.Skipf("%s is set: the bf16 comparison needs the default flavour", flavourEnv)
	}
	r := rand.New(rand.NewPCG(75, 16))
	const rows, cols = 197, 1024 // rows not a tile multiple: exercises bounds
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.Q4_0, gguf.BF16, gguf.F16, gguf.NVFP4, gguf.FP8_E4M3} {
		raw := randWeight(r, typ, rows, cols)
		info := gguf.TensorInfo{Name: "w." + typ.String(), Dims: []uint64{cols, rows}, Type: typ}
		fw, cw := pf.weight(info, raw)
		bw, _ := pb.weight(info, raw)
		for _, n := range []int{9, 64, 512} {
			x := randVec(r, n*cols, 1)
			want := refMatMul(typ, raw, rows, cols, x, n)
			name := fmt.Sprintf("%s n=%d", typ, n)

			fx, cx := pf.tensor(n, cols, x)
			fy, cy := pf.tensor(n, rows, nil)
			pf.g.MatMul(fy, fx, fw)
			pf.c.MatMul(cy, cx, cw)
			pf.compare(name+" fp16 vs cpu", fy, cy, tolF16)
			ef, err := relErr(pf.download(fy), want)
			if err != nil {
				t.Errorf("%s fp16: %v", name, err)
				continue
			}

			bx, _ := pb.tensor(n, cols, x)
			by, _ := pb.tensor(n, rows, nil)
			pb.g.MatMul(by, bx, bw)
			eb, err := relErr(pb.download(by), want)
			if err != nil {
				t.Errorf("%s bf16: %v", name, err)
				continue
			}
			t.Logf("%s: error vs float64 fp16 %.2e, bf16 %.2e", name, ef, eb)
			if ef > tolF16 || ef > eb {
				t.Errorf("%s: fp16-compute error %.3g vs the float64 reference; want <= %.0e and <= the bf16 flavour's %.3g", name, ef, tolF16, eb)
			}
		}
	}
}

// TestF16ComputeLargeActivations: activation rows far beyond fp16's 65504
// (2e5, as an FFN's silu(gate)*up can reach), tiny ones (1e-3) and plain
// ones side by side, through each tensor-core GEMM of the sm75 flavour
// (gemmq at 9 and 32 rows, split-K at 9 rows, the skinny GEMM, the unsplit
// tile GEMM, the 128-row tile GEMM). The row scales of mma.cuh keep every row within tolF16 of
// the CPU, row by row (a matrix-wide error would hide the small rows).
func TestF16ComputeLargeActivations(t *testing.T) {
	p := newF16Pair(t)
	g := p.g
	r := rand.New(rand.NewPCG(75, 65504))
	const rows, cols = 197, 1024
	raw := randWeight(r, gguf.Q4_K, rows, cols)
	gw, cw := p.weight(gguf.TensorInfo{Name: "w.large", Dims: []uint64{cols, rows}, Type: gguf.Q4_K}, raw)
	mags := []float32{2e5, 1e-3, 1} // row tok is scaled by mags[tok%3]
	for _, tc := range []struct {
		name                 string
		n                    int
		skinny, split, gemmq bool
	}{{"gemmq", 9, false, true, true}, {"gemmq", 32, false, true, true}, {"split-K", 9, false, true, false},
		{"skinny", 16, true, true, false}, {"tile", 64, false, false, false}, {"large tile", 200, false, true, false}} {
		x := randVec(r, tc.n*cols, 1)
		for tok := range tc.n {
			for i := range cols {
				x[tok*cols+i] *= mags[tok%3]
			}
		}
		gx, cx := p.tensor(tc.n, cols, x)
		gy, cy := p.tensor(tc.n, rows, nil)
		setSkinny(t, g, tc.skinny)
		setSplitK(t, g, tc.split)
		setGemmq(t, g, tc.gemmq)
		g.MatMul(gy, gx, gw)
		setSkinny(t, g, false)
		setSplitK(t, g, true)
		setGemmq(t, g, true)
		p.c.MatMul(cy, cx, cw)
		got, want := p.download(gy), make([]float32, tc.n*rows)
		p.c.ToHost(cy, want)
		worst := 0.0
		for tok := range tc.n {
			e, err := relErr(got[tok*rows:(tok+1)*rows], want[tok*rows:(tok+1)*rows])
			if err != nil {
				t.Fatalf("%s row %d: %v", tc.name, tok, err)
			}
			worst = max(worst, e)
			if e > tolF16 {
				t.Errorf("%s n=%d: row %d (|x| ~ %g): relative error %.3g > %.0e", tc.name, tc.n, tok, mags[tok%3], e, tolF16)
			}
		}
		t.Logf("%s n=%d: worst row error %.2e", tc.name, tc.n, worst)
	}
}

// TestF16ComputeMoE: the grouped expert GEMM (forced, moeForce 2) and the
// automatic path of the sm75 flavour against the CPU backend, and the
// grouped GEMM's error against the bf16 flavour's on the same inputs.
func TestF16ComputeMoE(t *testing.T) {
	pf := newF16Pair(t)
	pb := newPair(t)
	if os.Getenv(flavourEnv) != "" {
		t.Skipf("%s is set: the bf16 comparison needs the default flavour", flavourEnv)
	}
	defer moeForce.Store(0)
	const E, dim, ff = 16, 512, 256
	for ci, tc := range []moeCase{{gguf.Q4_K, gguf.Q6_K}, {gguf.Q8_0, gguf.Q8_0}, {gguf.BF16, gguf.F16}} {
		// the same seed draws the same weights for both backends
		fr, br := rand.New(rand.NewPCG(uint64(ci), 75)), rand.New(rand.NewPCG(uint64(ci), 75))
		fm, cm := pf.moeWeights(fr, tc, E, dim, ff)
		bm, _ := pb.moeWeights(br, tc, E, dim, ff)
		for _, n := range []int{9, 64, 513} {
			fm.TopK, cm.TopK, bm.TopK = 8, 8, 8
			x := randVec(fr, n*dim, 1)
			fx, cx := pf.tensor(n, dim, x)
			_, cy := pf.tensor(n, dim, nil)
			pf.c.MoE(cy, cx, &cm)
			want := make([]float32, n*dim)
			pf.c.ToHost(cy, want)
			bx, _ := pb.tensor(n, dim, x)
			name := fmt.Sprintf("MoE %s/%s n=%d", tc.gu, tc.down, n)
			for _, mode := range []int32{2, 0} {
				fy, _ := pf.tensor(n, dim, nil)
				moeForce.Store(mode)
				pf.g.MoE(fy, fx, &fm)
				moeForce.Store(0)
				tol := tolMoEGrouped
				if mode == 0 && n <= moeGemvMaxTok {
					tol = tolMoEGemv
				}
				ef := pf.compare(fmt.Sprintf("%s mode=%d fp16 vs cpu", name, mode), fy, cy, min(tol, tolF16))
				if mode != 2 {
					continue
				}
				by, _ := pb.tensor(n, dim, nil)
				moeForce.Store(2)
				pb.g.MoE(by, bx, &bm)
				moeForce.Store(0)
				eb, err := relErr(pb.download(by), want)
				if err != nil {
					t.Errorf("%s bf16: %v", name, err)
					continue
				}
				t.Logf("%s grouped: error vs cpu fp16 %.2e, bf16 %.2e", name, ef, eb)
				if ef > eb {
					t.Errorf("%s grouped: fp16-compute error %.3g exceeds the bf16 flavour's %.3g", name, ef, eb)
				}
			}
		}
	}
}

// TestF16ComputeAttention runs the decode/extend attention cases and the
// FA prefill cases (every KV dtype and mixed pair: bf16 pages converted to
// fp16, FP8 widened to fp16, FP8 V scales kept in range, cp.async
// replaced) on the sm75 flavour, against the CPU attention with attnTol,
// outputs poisoned first. Both flavours carry q and p as hi/lo 16-bit
// pairs, so the bar is the bf16 flavour's own tolerance.
func TestF16ComputeAttention(t *testing.T) {
	newF16Backend(t)
	for _, set := range []struct {
		name  string
		cases []attnCase
		seed  int
	}{{"decode", attnCases(), 0}, {"fa", faCases(), 1000}} {
		for ci, tc := range set.cases {
			t.Run(set.name+"/"+tc.String(), func(t *testing.T) {
				if tc.long && testing.Short() {
					t.Skip("long context case skipped in -short mode")
				}
				checkAttention(t, f16Dev, set.seed+ci, tc)
			})
		}
	}
}

// TestF16ComputeAttentionLargeQ: q rows of magnitude 2000 on bf16 pages
// (q·k in fp16 operands unscaled would reach fp16's limit; the kernels
// scale each q row by a power of two first) stay finite and close to the
// CPU, in the decode kernel and in FA. Scores of that size make the
// softmax amplify float32 rounding (a score's absolute error becomes the
// relative error of its probability), so both flavours land near attnTol:
// the bar is attnTol or 1.25x the bf16 flavour's error on the same inputs.
func TestF16ComputeAttentionLargeQ(t *testing.T) {
	newF16Backend(t)
	if os.Getenv(flavourEnv) != "" {
		t.Skipf("%s is set: the bf16 comparison needs the default flavour", flavourEnv)
	}
	bd := openTestDevice(t)
	for ci, tc := range []attnCase{
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: []seqShape{{100, 1}, {30, 9}}, qmag: 2000},
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: []seqShape{{100, 100}}, qmag: 2000, fa: true},
	} {
		t.Run(tc.String(), func(t *testing.T) {
			ef, at := attentionError(t, f16Dev, 7500+ci, tc)
			eb, _ := attentionError(t, bd, 7500+ci, tc)
			t.Logf("fp16 flavour %.2e, bf16 flavour %.2e", ef, eb)
			if bar := max(attnTol, 1.25*eb); ef > bar {
				t.Errorf("fp16 flavour: max rel. error %.2e at %s exceeds %.2e (attnTol, or 1.25x the bf16 flavour's %.2e)", ef, at, bar, eb)
			}
		})
	}
}
