package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Tolerances, as relative Frobenius error ‖gpu − ref‖ / ‖ref‖:
const (
	tolExact = 1e-6 // dequantization and element-wise ops (same float32 arithmetic)
	tolF32   = 2e-5 // float32 reductions in a different order (GEMV, norms, RoPE)
	tolBF16  = 1e-2 // tensor-core GEMM: bf16 operands (8-bit mantissa), float32 accumulation
)

var testBackend *Backend

func newTestBackend(t *testing.T) *Backend {
	t.Helper()
	d := openTestDevice(t)
	if testBackend == nil {
		start := time.Now()
		b, err := NewBackend(d, BackendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: backend ready (ops module JIT) in %v", d.Info(), time.Since(start))
		testBackend = b
	}
	return testBackend
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// f16Fields lists the byte offsets of each block's float16 scale fields;
// every other byte of a random block is a valid quant, scale or mask.
var f16Fields = map[gguf.Type][]int{
	gguf.Q4_0: {0}, gguf.Q4_1: {0, 2}, gguf.Q5_0: {0}, gguf.Q5_1: {0, 2}, gguf.Q8_0: {0}, gguf.Q8_1: {0, 2},
	gguf.Q2_K: {80, 82}, gguf.Q3_K: {108}, gguf.Q4_K: {0, 2}, gguf.Q5_K: {0, 2}, gguf.Q6_K: {208},
}

// randWeight returns random GGUF bytes of type t for rows×cols: float types
// are encoded normal values; block types are random bits with finite, small
// float16 scales, so every code path of the decoders is exercised. NVFP4's
// UE4M3 scales are random bytes too (every byte decodes finite).
// fp16Operands reports whether this run forces the sm75 flavour, whose
// tensor-core operands are fp16 (FTCHAT_PTX_FLAVOUR=sm75): random weights
// then stay inside fp16's range, which MXFP4's E8M0 scales can leave
// (the fp16 flavour saturates such weights at 65504).
func fp16Operands() bool { return os.Getenv(flavourEnv) == "sm75" }

func randWeight(r *rand.Rand, t gguf.Type, rows, cols int) []byte {
	if isFloatType(t) {
		raw, err := gguf.Quantize(t, randVec(r, rows*cols, 0.5))
		if err != nil {
			panic(err)
		}
		return raw
	}
	if t == gguf.FP8_E4M3 { // 0x7F and 0xFF are NaN: a random byte would poison the reference too
		return randFP8Codes(r, rows*cols)
	}
	if t == gguf.FP8_E4M3_B32 { // and random float32 scales would be NaN or huge
		return randFP8B32Blocks(r, rows, cols, -8, -4)
	}
	nb := rows * cols / t.BlockElems()
	raw := make([]byte, nb*t.BlockBytes())
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		if t == gguf.MXFP4 { // E8M0 scale 2^-20..2^20: random bytes would overflow float32
			if fp16Operands() { // fp16 holds 6e-5..65504: 2^-10..2^4 (|w| <= 96)
				raw[b*t.BlockBytes()] = byte(117 + r.IntN(15))
			} else {
				raw[b*t.BlockBytes()] = byte(108 + r.IntN(41))
			}
		}
		for _, off := range f16Fields[t] {
			s := float32(r.Float64()*0.02 + 0.001)
			if r.IntN(4) == 0 {
				s = -s
			}
			binary.LittleEndian.PutUint16(raw[b*t.BlockBytes()+off:], gguf.F32ToF16(s))
		}
	}
	return raw
}

func relErr(got, want []float32) (float64, error) {
	if len(got) != len(want) {
		return 0, fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	var num, den float64
	for i := range got {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			return 0, fmt.Errorf("element %d is %v (unwritten or overflow); want %v", i, got[i], want[i])
		}
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num), nil
	}
	return math.Sqrt(num / den), nil
}

func nanVec(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

// pair runs the same op on the GPU backend and the CPU reference.
type pair struct {
	t   *testing.T
	g   *Backend
	c   *cpu.Backend
	gts []model.Tensor
}

func newPair(t *testing.T) *pair {
	g := newTestBackend(t)
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

// tensor makes the same tensor on both backends (nil data: NaN poison).
func (p *pair) tensor(rows, cols int, data []float32) (model.Tensor, model.Tensor) {
	if data == nil {
		data = nanVec(rows * cols)
	}
	gt, ct := p.g.NewTensor(rows, cols), p.c.NewTensor(rows, cols)
	p.g.FromHost(gt, data)
	p.c.FromHost(ct, data)
	p.gts = append(p.gts, gt)
	return gt, ct
}

func (p *pair) weight(info gguf.TensorInfo, raw []byte) (model.Weight, model.Weight) {
	gw, err := p.g.LoadWeight(info, raw)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { p.g.FreeWeight(gw) })
	cw, err := p.c.LoadWeight(info, raw)
	if err != nil {
		p.t.Fatal(err)
	}
	return gw, cw
}

// compare downloads both tensors and checks the relative error.
func (p *pair) compare(name string, gt, ct model.Tensor, tol float64) float64 {
	p.t.Helper()
	n := ct.Rows() * ct.Cols()
	got, want := make([]float32, n), make([]float32, n)
	p.g.ToHost(gt, got)
	p.c.ToHost(ct, want)
	if err := p.g.Err(); err != nil {
		p.t.Fatalf("%s: %v", name, err)
	}
	e, err := relErr(got, want)
	if err != nil {
		p.t.Errorf("%s: %v", name, err)
		return e
	}
	if e > tol {
		p.t.Errorf("%s: relative error %.3g > %.3g", name, e, tol)
	} else {
		p.t.Logf("%s: relative error %.2g (tol %.0g)", name, e, tol)
	}
	return e
}

func vecInfo(name string, n int) gguf.TensorInfo {
	return gguf.TensorInfo{Name: name, Dims: []uint64{uint64(n)}, Type: gguf.F32}
}

func f32Bytes(v []float32) []byte {
	raw, _ := gguf.Quantize(gguf.F32, v)
	return raw
}

// refMatMul is the float64 reference: y[t][o] = Σ_i deq(W)[o][i] x[t][i].
func refMatMul(t gguf.Type, raw []byte, rows, cols int, x []float32, n int) []float32 {
	w := make([]float32, rows*cols)
	if err := gguf.Dequantize(t, raw, w); err != nil {
		panic(err)
	}
	y := make([]float32, n*rows)
	for tk := 0; tk < n; tk++ {
		for o := 0; o < rows; o++ {
			var s float64
			for i := 0; i < cols; i++ {
				s += float64(w[o*cols+i]) * float64(x[tk*cols+i])
			}
			y[tk*rows+o] = float32(s)
		}
	}
	return y
}

func TestMatMulAllTypes(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 197, 512 // rows not a tile multiple: exercises bounds
	for _, typ := range SupportedTypes() {
		raw := randWeight(r, typ, rows, cols)
		info := gguf.TensorInfo{Name: "w." + typ.String(), Dims: []uint64{cols, rows}, Type: typ}
		gw, cw := p.weight(info, raw)
		for _, n := range []int{1, 3, 8, 13, 77, 150} {
			x := randVec(r, n*cols, 1)
			gx, cx := p.tensor(n, cols, x)
			gy, cy := p.tensor(n, rows, nil)
			p.g.MatMul(gy, gx, gw)
			p.c.MatMul(cy, cx, cw)
			tol := tolF32
			if n >= p.g.opts.GEMMMinTokens || p.g.useGemmq(n, typ, cols) {
				tol = tolBF16 // 16-bit activations on the tensor cores
			}
			name := fmt.Sprintf("%s n=%d", typ, n)
			p.compare(name+" vs cpu", gy, cy, tol)
			got := make([]float32, n*rows)
			p.g.ToHost(gy, got)
			if e, err := relErr(got, refMatMul(typ, raw, rows, cols, x, n)); err != nil || e > tol {
				t.Errorf("%s vs float64 reference: error %.3g (tol %.3g) %v", name, e, tol, err)
			}
		}
	}
}

// TestMatMulGemvPaths covers both decode GEMVs (x staged whole or in
// chunks) and wide rows whose x needs more than 48 KiB of shared memory.
func TestMatMulGemvPaths(t *testing.T) {
	p := newPair(t)
	setGemmq(t, p.g, false) // 2..8 rows of Q4_K would take gemmq
	defer setGemmq(t, p.g, true)
	r := rand.New(rand.NewPCG(15, 16))
	for _, sh := range []struct{ rows, cols int }{{70, 14336}, {300, 1024}} {
		for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q4_0, gguf.F16} {
			raw := randWeight(r, typ, sh.rows, sh.cols)
			gw, cw := p.weight(gguf.TensorInfo{Name: "wide", Dims: []uint64{uint64(sh.cols), uint64(sh.rows)}, Type: typ}, raw)
			for _, chunked := range []bool{false, true} {
				mode := int32(1)
				if chunked {
					mode = 2
				}
				p.g.gemvMode.Store(mode)
				for _, n := range []int{1, 2, 3, 8} {
					x := randVec(r, n*sh.cols, 1)
					gx, cx := p.tensor(n, sh.cols, x)
					gy, cy := p.tensor(n, sh.rows, nil)
					p.g.MatMul(gy, gx, gw)
					p.c.MatMul(cy, cx, cw)
					p.compare(fmt.Sprintf("%s %dx%d n=%d chunked=%v", typ, sh.rows, sh.cols, n, chunked), gy, cy, tolF32)
				}
			}
			p.g.gemvMode.Store(0)
		}
	}
}

func TestMatMulFloatOddWidth(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 33, 100 // not a multiple of 32: the element-wise GEMV
	for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.BF16} {
		raw := randWeight(r, typ, rows, cols)
		gw, cw := p.weight(gguf.TensorInfo{Name: "odd", Dims: []uint64{cols, rows}, Type: typ}, raw)
		for _, n := range []int{1, 20} {
			gx, cx := p.tensor(n, cols, randVec(r, n*cols, 1))
			gy, cy := p.tensor(n, rows, nil)
			p.g.MatMul(gy, gx, gw)
			p.c.MatMul(cy, cx, cw)
			p.compare(fmt.Sprintf("%s odd width n=%d", typ, n), gy, cy, tolF32)
		}
	}
}

func TestEmbedAllTypes(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(5, 6))
	const vocab, dim = 300, 256
	for _, typ := range SupportedTypes() {
		raw := randWeight(r, typ, vocab, dim)
		gw, cw := p.weight(gguf.TensorInfo{Name: "tok_embd", Dims: []uint64{dim, vocab}, Type: typ}, raw)
		toks := []int32{0, 299, 17, 17, 150, 42, 3}
		gd, cd := p.tensor(len(toks), dim, nil)
		p.g.Embed(gd, gw, toks)
		p.c.Embed(cd, cw, toks)
		p.compare("embed "+typ.String(), gd, cd, tolExact)
	}
	if err := p.g.CheckTokens(); err != nil {
		t.Fatalf("valid ids flagged: %v", err)
	}
	// An id outside the vocabulary is reported, not read out of bounds.
	raw := randWeight(r, gguf.Q8_0, vocab, dim)
	gw, _ := p.weight(gguf.TensorInfo{Name: "tok_embd", Dims: []uint64{dim, vocab}, Type: gguf.Q8_0}, raw)
	gd, _ := p.tensor(1, dim, nil)
	p.g.Embed(gd, gw, []int32{vocab})
	if err := p.g.CheckTokens(); err == nil {
		t.Error("out-of-vocabulary token id not reported")
	}
}

func TestNormsAndElementwise(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct{ rows, cols, headDim int }{{1, 576, 64}, {9, 4096, 128}, {5, 2048, 256}} {
		x := randVec(r, sh.rows*sh.cols, 2)
		g := randVec(r, sh.cols, 1)
		gw, cw := p.weight(vecInfo("norm", sh.cols), f32Bytes(g))
		hw, chw := p.weight(vecInfo("head_norm", sh.headDim), f32Bytes(g[:sh.headDim]))
		bw, cbw := p.weight(vecInfo("bias", sh.cols), f32Bytes(randVec(r, sh.cols, 1)))
		tag := fmt.Sprintf("%dx%d", sh.rows, sh.cols)

		gx, cx := p.tensor(sh.rows, sh.cols, x)
		gd, cd := p.tensor(sh.rows, sh.cols, nil)
		p.g.RMSNorm(gd, gx, gw, 1e-6)
		p.c.RMSNorm(cd, cx, cw, 1e-6)
		p.compare("RMSNorm "+tag, gd, cd, tolF32)

		gh, ch := p.tensor(sh.rows, sh.cols, x)
		p.g.HeadRMSNorm(gh, hw, sh.headDim, 1e-5)
		p.c.HeadRMSNorm(ch, chw, sh.headDim, 1e-5)
		p.compare("HeadRMSNorm "+tag, gh, ch, tolF32)

		gb, cb := p.tensor(sh.rows, sh.cols, x)
		p.g.AddBias(gb, bw)
		p.c.AddBias(cb, cbw)
		p.compare("AddBias "+tag, gb, cb, tolExact)

		y := randVec(r, sh.rows*sh.cols, 3)
		gg, cg := p.tensor(sh.rows, sh.cols, x)
		gu, cu := p.tensor(sh.rows, sh.cols, y)
		gs, cs := p.tensor(sh.rows, sh.cols, nil)
		p.g.SwiGLU(gs, gg, gu)
		p.c.SwiGLU(cs, cg, cu)
		p.compare("SwiGLU "+tag, gs, cs, tolF32)

		p.g.Add(gg, gu)
		p.c.Add(cg, cu)
		p.compare("Add "+tag, gg, cg, tolExact)
	}
}

func TestRoPE(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(9, 10))
	factors := make([]float32, 64)
	for i := range factors {
		factors[i] = float32(1 + r.Float64()*7)
	}
	cases := []struct {
		name    string
		heads   int
		headDim int
		rope    model.Rope
	}{
		{"llama adjacent pairs", 4, 64, model.Rope{Dim: 64, Base: 10000}},
		{"neox", 4, 128, model.Rope{Dim: 128, Base: 1e6, NeoX: true}},
		{"llama3 freq factors", 2, 128, model.Rope{Dim: 128, Base: 500000, FreqFactors: factors}},
		{"partial rotary + linear scale", 3, 256, model.Rope{Dim: 64, Base: 10000, NeoX: true, Scale: 0.25}},
	}
	for _, tc := range cases {
		pos := []int32{0, 1, 7, 4095, 32767, 131071}
		rows, cols := len(pos), tc.heads*tc.headDim
		x := randVec(r, rows*cols, 1)
		gx, cx := p.tensor(rows, cols, x)
		p.g.RoPE(gx, pos, tc.headDim, tc.rope)
		p.c.RoPE(cx, pos, tc.headDim, tc.rope)
		p.compare("RoPE "+tc.name, gx, cx, tolF32)
	}
}

func TestMoE(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(11, 12))
	const E, K, dim, ff = 8, 2, 256, 96
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K, gguf.F16} {
		m := func(name string, rows, cols int, tp gguf.Type) (model.Weight, model.Weight) {
			return p.weight(gguf.TensorInfo{Name: name, Dims: []uint64{uint64(cols), uint64(rows)}, Type: tp}, randWeight(r, tp, rows, cols))
		}
		gr, cr := m("router", E, dim, gguf.F32)
		gg, cg := m("gate", E*ff, dim, typ)
		gu, cu := m("up", E*ff, dim, typ)
		downType := typ
		if typ == gguf.Q4_K {
			downType = gguf.Q8_0 // ff=96 is not a multiple of 256
		}
		gd, cd := m("down", E*dim, ff, downType)
		for _, norm := range []bool{false, true} {
			n := 5
			gx, cx := p.tensor(n, dim, randVec(r, n*dim, 1))
			gy, cy := p.tensor(n, dim, nil)
			p.g.MoE(gy, gx, &model.MoE{Router: gr, Gate: gg, Up: gu, Down: gd, Experts: E, TopK: K, NormTopK: norm})
			p.c.MoE(cy, cx, &model.MoE{Router: cr, Gate: cg, Up: cu, Down: cd, Experts: E, TopK: K, NormTopK: norm})
			tol := tolF32 * 5
			if n > moeGemvMaxTok {
				tol = tolMoEGrouped // bf16 tensor-core path (moe_test.go)
			}
			p.compare(fmt.Sprintf("MoE %s norm=%v", typ, norm), gy, cy, tol)
		}
	}
}

func TestArgmax(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(13, 14))
	const rows, vocab = 4, 49152
	x := randVec(r, rows*vocab, 3)
	want := make([]int32, rows)
	for i := range want {
		best := 0
		for j := 1; j < vocab; j++ {
			if x[i*vocab+j] > x[i*vocab+best] {
				best = j
			}
		}
		want[i] = int32(best)
	}
	// Row 3: a tie between two positions must pick the lower index.
	x[3*vocab+40000], x[3*vocab+777] = 100, 100
	want[3] = 777
	gx, _ := p.tensor(rows, vocab, x)
	got, err := p.g.Argmax(gx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: argmax %d, want %d", i, got[i], want[i])
		}
	}
}

// TestMatMulCUBLAS checks the optional cuBLAS prefill path (TF32 tensor
// cores: 10-bit mantissa operands, float32 accumulation; tolerance 5e-3).
// TestMatMulCUBLAS runs MatMuls of 128 and more rows through cuBLAS, both
// ways (bf16 GemmEx, float32 Sgemm in TF32), against the CPU backend, with
// a small weight chunk so W is dequantized in several chunks (the last one
// short) and NaN-poisoned outputs. The bf16 way must really run where it
// can (sm_80+, bf16 compute, linux/amd64), not fall back unseen.
func TestMatMulCUBLAS(t *testing.T) {
	d := openTestDevice(t)
	defer func(n int64) { cublasChunkBytes = n }(cublasChunkBytes)
	cublasChunkBytes = 512 << 10 // 256 bf16 or 128 float32 rows of 768
	for _, tc := range []struct {
		name string
		tf32 bool
		tol  float64
	}{{"bf16", false, tolBF16}, {"tf32", true, 5e-3}} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewBackend(d, BackendOptions{CUBLAS: true, CUBLASTF32: tc.tf32})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			path, err := g.CUBLAS()
			if path == "" {
				t.Skipf("cuBLAS not available: %v", err)
			}
			bf16 := g.blas.bf16
			t.Logf("cuBLAS: %s, bf16 GemmEx: %v", path, bf16)
			if want := !tc.tf32 && d.Compute() == ComputeBF16 && runtime.GOOS == "linux" && runtime.GOARCH == "amd64"; bf16 != want {
				t.Fatalf("bf16 GemmEx path %v, want %v (GemmEx symbol found: %v)", bf16, want, cublas.gemmEx != 0)
			}
			c := cpu.New(cpu.Options{Threads: 2})
			defer c.Close()
			p := &pair{t: t, g: g, c: c}
			defer func() {
				for _, x := range p.gts {
					g.FreeTensor(x)
				}
			}()
			r := rand.New(rand.NewPCG(17, 18))
			const rows, cols = 300, 768
			for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q4_K, gguf.Q8_0, gguf.Q6_K} {
				gw, cw := p.weight(gguf.TensorInfo{Name: "w", Dims: []uint64{cols, rows}, Type: typ}, randWeight(r, typ, rows, cols))
				for _, n := range []int{128, 301} {
					gx, cx := p.tensor(n, cols, randVec(r, n*cols, 1))
					gy, cy := p.tensor(n, rows, nil)
					p.g.MatMul(gy, gx, gw)
					p.c.MatMul(cy, cx, cw)
					tol := tc.tol
					if typ == gguf.F32 {
						tol = 5e-3 // float32 W goes to Sgemm (TF32) either way
					}
					p.compare(fmt.Sprintf("cuBLAS %s n=%d", typ, n), gy, cy, tol)
				}
			}
			// One x for three weights (q, k, v): in bf16 it is rounded once
			// for the set (sharedBF16X).
			var gws, cws []model.Weight
			var gys, cys []model.Tensor
			const n = 200
			gx, cx := p.tensor(n, cols, randVec(r, n*cols, 1))
			for i, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.BF16} {
				out := rows - 50*i
				gw, cw := p.weight(gguf.TensorInfo{Name: "w", Dims: []uint64{cols, uint64(out)}, Type: typ}, randWeight(r, typ, out, cols))
				gy, cy := p.tensor(n, out, nil)
				gws, cws, gys, cys = append(gws, gw), append(cws, cw), append(gys, gy), append(cys, cy)
			}
			p.g.MatMulShared(gys, gx, gws)
			for i := range gys {
				p.c.MatMul(cys[i], cx, cws[i])
				p.compare(fmt.Sprintf("cuBLAS MatMulShared weight %d", i), gys[i], cys[i], tc.tol)
			}
		})
	}
}

func TestGatherRows(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(19, 20))
	const rows, cols = 9, 300
	x := randVec(r, rows*cols, 1)
	gx, _ := p.tensor(rows, cols, x)
	sel := []int{8, 0, 3, 3}
	gd, _ := p.tensor(len(sel), cols, nil)
	p.g.GatherRows(gd, gx, sel)
	got := make([]float32, len(sel)*cols)
	p.g.ToHost(gd, got)
	if err := p.g.Err(); err != nil {
		t.Fatal(err)
	}
	for i, s := range sel {
		for j := 0; j < cols; j++ {
			if got[i*cols+j] != x[s*cols+j] {
				t.Fatalf("row %d (source %d) col %d: %v, want %v", i, s, j, got[i*cols+j], x[s*cols+j])
			}
		}
	}
}
