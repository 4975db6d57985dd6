package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// timeOps times reps of queue() with device events and returns the mean
// milliseconds per call. It first keeps the GPU busy with the same op for
// at least 200 ms so that clocks have left their idle state.
func timeOps(tb testing.TB, g *Backend, reps int, queue func()) float64 {
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		for i := 0; i < 10; i++ {
			queue()
		}
		if err := g.Synchronize(); err != nil {
			tb.Fatal(err)
		}
	}
	var e0, e1 Event
	g.dev.Do(func(c *Ctx) error {
		e0, _ = c.NewEvent()
		e1, _ = c.NewEvent()
		return c.Record(e0, c.Stream())
	})
	for i := 0; i < reps; i++ {
		queue()
	}
	var ms float32
	err := g.dev.Do(func(c *Ctx) error {
		defer c.DestroyEvent(e0)
		defer c.DestroyEvent(e1)
		if err := c.Record(e1, c.Stream()); err != nil {
			return err
		}
		var err error
		ms, err = c.Elapsed(e0, e1)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := g.Err(); err != nil {
		tb.Fatal(err)
	}
	return float64(ms) / float64(reps)
}

// BenchmarkMatMul times decode GEMV (1 token) and prefill GEMM (512 tokens)
// on Llama-3.1-8B projection shapes; reports weight GB/s and TFLOP/s.
func BenchmarkMatMul(b *testing.B) {
	g := newTestBackendB(b)
	r := rand.New(rand.NewPCG(1, 1))
	shapes := []struct{ out, in int }{{4096, 4096}, {14336, 4096}, {4096, 14336}}
	benchMatMul(b, g, r, []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.Q4_1, gguf.F16}, shapes)
}

// BenchmarkMatMulFP8 times the Hugging Face FP8 weight forms (per-tensor
// FP8_E4M3 and block-scaled FP8_E4M3_B32, 1 and 1.125 bytes a weight)
// beside Q8_0 (1.0625), whose GEMV is the tuned 8-bit reference.
func BenchmarkMatMulFP8(b *testing.B) {
	g := newTestBackendB(b)
	r := rand.New(rand.NewPCG(1, 1))
	shapes := []struct{ out, in int }{{4096, 4096}, {14336, 4096}}
	benchMatMul(b, g, r, []gguf.Type{gguf.FP8_E4M3, gguf.FP8_E4M3_B32, gguf.Q8_0}, shapes)
}

// benchMatMul times MatMul for every type and out x in shape: decode GEMV
// (1 token; the chunked-x and whole-x variants) and prefill GEMM (512
// tokens), reporting us/op, weight GB/s and TFLOP/s.
func benchMatMul(b *testing.B, g *Backend, r *rand.Rand, types []gguf.Type, shapes []struct{ out, in int }) {
	for _, typ := range types {
		for _, sh := range shapes {
			raw := randWeight(r, typ, sh.out, sh.in)
			w, err := g.LoadWeight(gguf.TensorInfo{Name: "bench", Dims: []uint64{uint64(sh.in), uint64(sh.out)}, Type: typ}, raw)
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range []int{1, 512} {
				x := g.NewTensor(n, sh.in)
				g.FromHost(x, randVec(r, n*sh.in, 1))
				y := g.NewTensor(n, sh.out)
				modes := []int32{0}
				if n == 1 {
					modes = []int32{2, 1} // chunked-x and whole-x decode GEMV
				}
				for _, mode := range modes {
					g.gemvMode.Store(mode)
					b.Run(fmt.Sprintf("%s/%dx%d/n=%d/mode=%d", typ, sh.out, sh.in, n, mode), func(b *testing.B) {
						ms := timeOps(b, g, max(b.N, 100), func() { g.MatMul(y, x, w) })
						b.ReportMetric(ms*1e3, "us/op")
						b.ReportMetric(float64(len(raw))/(ms*1e-3)/1e9, "weightGB/s")
						b.ReportMetric(2*float64(n)*float64(sh.out)*float64(sh.in)/(ms*1e-3)/1e12, "TFLOP/s")
					})
				}
				g.gemvMode.Store(0)
				g.FreeTensor(x)
				g.FreeTensor(y)
			}
			g.FreeWeight(w)
		}
	}
}

// BenchmarkElementwise times the small per-layer ops at decode and prefill sizes.
func BenchmarkElementwise(b *testing.B) {
	g := newTestBackendB(b)
	r := rand.New(rand.NewPCG(2, 2))
	const dim = 4096
	nw, _ := g.LoadWeight(vecInfo("norm", dim), f32Bytes(randVec(r, dim, 1)))
	for _, n := range []int{1, 512} {
		x := g.NewTensor(n, dim)
		g.FromHost(x, randVec(r, n*dim, 1))
		y := g.NewTensor(n, dim)
		pos := make([]int32, n)
		for i := range pos {
			pos[i] = int32(1000 + i)
		}
		ops := map[string]func(){
			"rmsnorm": func() { g.RMSNorm(y, x, nw, 1e-5) },
			"rope":    func() { g.RoPE(y, pos, 128, model.Rope{Dim: 128, Base: 500000}) },
			"swiglu":  func() { g.SwiGLU(y, x, x) },
			"add":     func() { g.Add(y, x) },
		}
		for name, op := range ops {
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				ms := timeOps(b, g, max(b.N, 200), op)
				b.ReportMetric(ms*1e3, "us/op")
			})
		}
	}
}

func newTestBackendB(b *testing.B) *Backend {
	b.Helper()
	d := openTestDevice(b)
	if testBackend == nil {
		be, err := NewBackend(d, BackendOptions{})
		if err != nil {
			b.Fatal(err)
		}
		testBackend = be
	}
	return testBackend
}

// BenchmarkDecodeLayer times one Llama-3.1-8B decoder layer at batch 1
// without attention (norms, Q/K/V/O, RoPE, SwiGLU MLP, residuals; all
// Q4_K weights), as issued by model code: the per-op host overhead is in
// the number. Weight bytes per layer are reported for a bandwidth figure.
func BenchmarkDecodeLayer(b *testing.B) {
	g := newTestBackendB(b)
	r := rand.New(rand.NewPCG(3, 3))
	const dim, ff, kvDim = 4096, 14336, 1024
	var bytes int
	load := func(out, in int) model.Weight {
		raw := randWeight(r, gguf.Q4_K, out, in)
		bytes += len(raw)
		w, err := g.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{uint64(in), uint64(out)}, Type: gguf.Q4_K}, raw)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	wq, wk, wv, wo := load(dim, dim), load(kvDim, dim), load(kvDim, dim), load(dim, dim)
	wg, wu, wd := load(ff, dim), load(ff, dim), load(dim, ff)
	norm, _ := g.LoadWeight(vecInfo("norm", dim), f32Bytes(randVec(r, dim, 1)))
	x, h := g.NewTensor(1, dim), g.NewTensor(1, dim)
	q, k, v, o := g.NewTensor(1, dim), g.NewTensor(1, kvDim), g.NewTensor(1, kvDim), g.NewTensor(1, dim)
	gt, ut := g.NewTensor(1, ff), g.NewTensor(1, ff)
	g.FromHost(x, randVec(r, dim, 1))
	pos := []int32{1234}
	rope := model.Rope{Dim: 128, Base: 500000}
	layer := func() {
		g.RMSNorm(h, x, norm, 1e-5)
		g.MatMul(q, h, wq)
		g.MatMul(k, h, wk)
		g.MatMul(v, h, wv)
		g.RoPE(q, pos, 128, rope)
		g.MatMul(o, q, wo) // attention output stands in for q here
		g.Add(x, o)
		g.RMSNorm(h, x, norm, 1e-5)
		g.MatMul(gt, h, wg)
		g.MatMul(ut, h, wu)
		g.SwiGLU(gt, gt, ut)
		g.MatMul(o, gt, wd)
		g.Add(x, o)
	}
	ms := timeOps(b, g, max(b.N, 100), layer)
	b.ReportMetric(ms*1e3, "us/layer")
	b.ReportMetric(float64(bytes)/(ms*1e-3)/1e9, "weightGB/s")
	b.ReportMetric(1e3/(32*ms), "tok/s(32 layers)")
}

// BenchmarkReadBandwidth reports the device's read bandwidth (stream_read
// over 4 GiB of random data, best of three grid sizes): the ceiling that
// the GEMV and attention rows of a profile (FTCHAT_PROFILE=1) are read
// against.
func BenchmarkReadBandwidth(b *testing.B) {
	g := newTestBackendB(b)
	var bw float64
	err := g.dev.Do(func(c *Ctx) error {
		var err error
		bw, err = readBandwidth(c)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(bw, "readGB/s")
	b.Logf("read bandwidth (stream_read, 4 GiB): %.0f GB/s", bw)
}

// BenchmarkMatMulPrefill times a 512-token MatMul on the Llama-3.1-8B
// projection shapes three ways in one run: ftchat's own tensor-core GEMM
// (gemml), cuBLAS on bf16 W chunks (GemmEx) and cuBLAS on float32 chunks
// (Sgemm, TF32). A BF16 W on the GemmEx way skips the dequantization: that
// row is cuBLAS's bf16 rate here, the ceiling of the dequantizing rows.
// Reports us/op and TFLOP/s. Skips the cuBLAS ways when the library is
// missing.
func BenchmarkMatMulPrefill(b *testing.B) {
	d := openTestDevice(b)
	r := rand.New(rand.NewPCG(5, 5))
	const n = 512
	shapes := []struct{ out, in int }{{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}}
	for _, way := range []struct {
		name string
		opts BackendOptions
	}{{"own", BackendOptions{}}, {"cublas-bf16", BackendOptions{CUBLAS: true}}, {"cublas-tf32", BackendOptions{CUBLAS: true, CUBLASTF32: true}}} {
		g, err := NewBackend(d, way.opts)
		if err != nil {
			b.Fatal(err)
		}
		if way.opts.CUBLAS {
			if p, err := g.CUBLAS(); p == "" {
				g.Close()
				b.Logf("%s skipped: %v", way.name, err)
				continue
			}
		}
		for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q8_0, gguf.BF16} {
			for _, sh := range shapes {
				raw := randWeight(r, typ, sh.out, sh.in)
				w, err := g.LoadWeight(gguf.TensorInfo{Name: "bench", Dims: []uint64{uint64(sh.in), uint64(sh.out)}, Type: typ}, raw)
				if err != nil {
					b.Fatal(err)
				}
				x, y := g.NewTensor(n, sh.in), g.NewTensor(n, sh.out)
				g.FromHost(x, randVec(r, n*sh.in, 1))
				b.Run(fmt.Sprintf("%s/%s/%dx%d", way.name, typ, sh.out, sh.in), func(b *testing.B) {
					ms := timeOps(b, g, max(b.N, 20), func() { g.MatMul(y, x, w) })
					b.ReportMetric(ms*1e3, "us/op")
					b.ReportMetric(2*float64(n)*float64(sh.out)*float64(sh.in)/(ms*1e-3)/1e12, "TFLOP/s")
				})
				g.FreeTensor(x)
				g.FreeTensor(y)
				g.FreeWeight(w)
			}
		}
		g.Close()
	}
}
