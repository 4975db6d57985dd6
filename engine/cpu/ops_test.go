package cpu

import (
	"fmt"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

func randVec(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// tensorOf returns a backend tensor holding data (rows×cols).
func tensorOf(b *Backend, rows, cols int, data []float32) *Tensor {
	t := b.NewTensor(rows, cols).(*Tensor)
	copy(t.Data, data)
	return t
}

// poisoned returns a tensor full of NaN: any element an op forgets to
// write fails the comparison.
func poisoned(b *Backend, rows, cols int) *Tensor {
	t := b.NewTensor(rows, cols).(*Tensor)
	for i := range t.Data {
		t.Data[i] = float32(math.NaN())
	}
	return t
}

// makeWeight quantizes data (rows×cols) as typ and loads it; it returns the
// weight and the dequantized values the reference uses.
func makeWeight(t *testing.T, b *Backend, name string, typ gguf.Type, dims []uint64, data []float32) (model.Weight, []float64) {
	t.Helper()
	raw, err := gguf.Quantize(typ, data)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.LoadWeight(gguf.TensorInfo{Name: name, Dims: dims, Type: typ}, raw)
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, len(data))
	if err := gguf.Dequantize(typ, raw, deq); err != nil {
		t.Fatal(err)
	}
	ref := make([]float64, len(deq))
	for i, v := range deq {
		ref[i] = float64(v)
	}
	return w, ref
}

// closeTo checks got against a float64 reference: |got-want| ≤ rel·scale + abs,
// where scale is the magnitude that bounds float32 rounding (e.g. Σ|w·x|).
func closeTo(t *testing.T, what string, got float32, want, scale, rel float64) {
	t.Helper()
	if d := math.Abs(float64(got) - want); !(d <= rel*scale+1e-30) {
		t.Errorf("%s: got %v, want %v (diff %.3g > %.3g)", what, got, want, d, rel*scale)
	}
}

var matmulTypes = []gguf.Type{gguf.F32, gguf.F16, gguf.BF16, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1,
	gguf.Q8_0, gguf.Q8_1, gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K, gguf.MXFP4, gguf.NVFP4}

func TestMatMulEveryType(t *testing.T) {
	b := New(Options{Threads: 3})
	defer b.Close()
	r := rand.New(rand.NewPCG(1, 2))
	const cols, rows = 512, 37
	for _, typ := range matmulTypes {
		if !gguf.QuantizeSupported(typ) {
			t.Logf("%s: no quantizer in gguf to make test data; skipped", typ)
			continue
		}
		for _, n := range []int{1, 3, 11} {
			t.Run(fmt.Sprintf("%s/rows=%d", typ, n), func(t *testing.T) {
				// Offsets in the weights exercise the min/offset terms of Q4_1/Q5_1/K-quants.
				wdata := randVec(r, rows*cols, 1)
				for i := range wdata {
					wdata[i] += 0.3
				}
				w, wref := makeWeight(t, b, "w", typ, []uint64{cols, rows}, wdata)
				xd := randVec(r, n*cols, 1)
				x := tensorOf(b, n, cols, xd)
				dst := poisoned(b, n, rows)
				b.MatMul(dst, x, w)
				for i := 0; i < n; i++ {
					for o := 0; o < rows; o++ {
						var want, scale float64
						for c := 0; c < cols; c++ {
							p := wref[o*cols+c] * float64(xd[i*cols+c])
							want += p
							scale += math.Abs(p)
						}
						closeTo(t, fmt.Sprintf("dst[%d][%d]", i, o), dst.Data[i*rows+o], want, scale, 2e-6)
					}
				}
			})
		}
	}
}

func TestMatMulThreadsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const cols, rows, n = 256, 301, 5
	wd, xd := randVec(r, rows*cols, 1), randVec(r, n*cols, 1)
	var first []float32
	for _, th := range []int{1, 2, 7} {
		b := New(Options{Threads: th})
		w, _ := makeWeight(t, b, "w", gguf.Q4_K, []uint64{cols, rows}, wd)
		dst := poisoned(b, n, rows)
		b.MatMul(dst, tensorOf(b, n, cols, xd), w)
		b.Close()
		if first == nil {
			first = dst.Data
			continue
		}
		for i := range first {
			if first[i] != dst.Data[i] {
				t.Fatalf("threads=%d: element %d = %v, threads=1 gave %v", th, i, dst.Data[i], first[i])
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 5, 96
	const eps = 1e-6
	xd := randVec(r, rows*cols, 2)
	g, gref := makeWeight(t, b, "g", gguf.F32, []uint64{cols}, randVec(r, cols, 1))
	dst := poisoned(b, rows, cols)
	b.RMSNorm(dst, tensorOf(b, rows, cols, xd), g, eps)
	for i := 0; i < rows; i++ {
		var ss float64
		for c := 0; c < cols; c++ {
			ss += float64(xd[i*cols+c]) * float64(xd[i*cols+c])
		}
		inv := 1 / math.Sqrt(ss/cols+eps)
		for c := 0; c < cols; c++ {
			want := float64(xd[i*cols+c]) * inv * gref[c]
			closeTo(t, "rmsnorm", dst.Data[i*cols+c], want, math.Abs(want), 1e-6)
		}
	}

	// HeadRMSNorm: each 16-wide head separately, in place.
	const hd = 16
	hg, hgref := makeWeight(t, b, "hg", gguf.F32, []uint64{hd}, randVec(r, hd, 1))
	x := tensorOf(b, rows, cols, xd)
	b.HeadRMSNorm(x, hg, hd, eps)
	for i := 0; i < rows; i++ {
		for h := 0; h < cols/hd; h++ {
			v := xd[i*cols+h*hd : i*cols+(h+1)*hd]
			var ss float64
			for _, e := range v {
				ss += float64(e) * float64(e)
			}
			inv := 1 / math.Sqrt(ss/hd+eps)
			for c := range v {
				want := float64(v[c]) * inv * hgref[c]
				closeTo(t, "headrmsnorm", x.Data[i*cols+h*hd+c], want, math.Abs(want), 1e-6)
			}
		}
	}
}

func TestRoPE(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(7, 8))
	ff := make([]float32, 16)
	for i := range ff {
		ff[i] = 1 + float32(i)/3
	}
	tests := []struct {
		name string
		rope model.Rope
		hd   int
	}{
		{"adjacent", model.Rope{Dim: 32, Base: 10000}, 32},
		{"neox", model.Rope{Dim: 32, Base: 1e6, NeoX: true}, 32},
		{"freq factors", model.Rope{Dim: 32, Base: 500000, FreqFactors: ff}, 32},
		{"linear scale", model.Rope{Dim: 32, Base: 10000, Scale: 0.25, NeoX: true}, 32},
		{"partial rotary", model.Rope{Dim: 16, Base: 10000, NeoX: true}, 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const rows, heads = 4, 3
			cols := heads * tc.hd
			xd := randVec(r, rows*cols, 1)
			pos := []int32{0, 1, 77, 4095}
			x := tensorOf(b, rows, cols, xd)
			b.RoPE(x, pos, tc.hd, tc.rope)
			half := tc.rope.Dim / 2
			for i := 0; i < rows; i++ {
				for h := 0; h < heads; h++ {
					in := xd[i*cols+h*tc.hd : i*cols+(h+1)*tc.hd]
					want := make([]float64, tc.hd)
					for c := range in {
						want[c] = float64(in[c])
					}
					for k := 0; k < half; k++ {
						theta := float64(pos[i]) * math.Pow(tc.rope.Base, -2*float64(k)/float64(tc.rope.Dim))
						if tc.rope.Scale != 0 {
							theta *= float64(tc.rope.Scale)
						}
						if tc.rope.FreqFactors != nil {
							theta /= float64(tc.rope.FreqFactors[k])
						}
						a, c := k, k+half // NeoX pairs
						if !tc.rope.NeoX {
							a, c = 2*k, 2*k+1
						}
						z := complex(want[a], want[c]) * cmplx.Exp(complex(0, theta))
						want[a], want[c] = real(z), imag(z)
					}
					for c := range want {
						closeTo(t, fmt.Sprintf("row %d head %d dim %d", i, h, c), x.Data[i*cols+h*tc.hd+c], want[c], 1, 2e-6)
					}
				}
			}
		})
	}
}

func TestElementwise(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 3, 5000
	gd, ud := randVec(r, rows*cols, 3), randVec(r, rows*cols, 1)
	dst := poisoned(b, rows, cols)
	b.SwiGLU(dst, tensorOf(b, rows, cols, gd), tensorOf(b, rows, cols, ud))
	for i := range gd {
		g := float64(gd[i])
		want := g / (1 + math.Exp(-g)) * float64(ud[i])
		closeTo(t, "swiglu", dst.Data[i], want, math.Abs(want), 1e-6)
	}
	x := tensorOf(b, rows, cols, gd)
	b.Add(x, tensorOf(b, rows, cols, ud))
	bias, bref := makeWeight(t, b, "b", gguf.F32, []uint64{cols}, randVec(r, cols, 1))
	b.AddBias(x, bias)
	for i := range gd {
		want := float64(gd[i]) + float64(ud[i]) + bref[i%cols]
		mag := math.Abs(float64(gd[i])) + math.Abs(float64(ud[i])) + math.Abs(bref[i%cols])
		closeTo(t, "add", x.Data[i], want, mag, 2.5e-7)
	}
}

func TestEmbed(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(11, 12))
	const vocab, dim = 50, 64
	table, ref := makeWeight(t, b, "token_embd.weight", gguf.Q8_0, []uint64{dim, vocab}, randVec(r, vocab*dim, 1))
	toks := []int32{3, 0, 49, 3}
	dst := poisoned(b, len(toks), dim)
	b.Embed(dst, table, toks)
	for i, tok := range toks {
		for c := 0; c < dim; c++ {
			if float64(dst.Data[i*dim+c]) != ref[int(tok)*dim+c] {
				t.Fatalf("row %d col %d: %v, want %v", i, c, dst.Data[i*dim+c], ref[int(tok)*dim+c])
			}
		}
	}
}

// refAttention is causal multi-head attention in float64 over dense K/V.
func refAttention(q, k, v []float32, pos []int32, heads, kvHeads, hd int, scale float64) []float64 {
	rows := len(pos)
	out := make([]float64, rows*heads*hd)
	g := heads / kvHeads
	for i := 0; i < rows; i++ {
		for h := 0; h < heads; h++ {
			kh := h / g
			n := int(pos[i]) + 1
			s := make([]float64, n)
			mx := math.Inf(-1)
			for j := 0; j < n; j++ {
				var d float64
				for c := 0; c < hd; c++ {
					d += float64(q[(i*heads+h)*hd+c]) * float64(k[(j*kvHeads+kh)*hd+c])
				}
				s[j] = d * scale
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for j := 0; j < n; j++ {
				for c := 0; c < hd; c++ {
					out[(i*heads+h)*hd+c] += s[j] / sum * float64(v[(j*kvHeads+kh)*hd+c])
				}
			}
		}
	}
	return out
}

// TestKVWriteAttention writes a sequence in two batches (prefill, then
// one decode row) through KVWrite and checks Attention against float64
// attention over the rotated keys, for the float32 reference store and the
// kvcache pool dtypes (whose tolerance reflects their rounding).
func TestKVWriteAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const heads, kvh, hd, n = 4, 2, 16, 21
	rope := model.Rope{Dim: hd, Base: 10000, NeoX: true}
	qd, kd, vd := randVec(r, n*heads*hd, 1), randVec(r, n*kvh*hd, 1), randVec(r, n*kvh*hd, 1)
	pos := make([]int32, n)
	for i := range pos {
		pos[i] = int32(i)
	}
	// Reference keys: rotated by the (separately tested) RoPE op.
	ref := New(Options{Threads: 1})
	kr := tensorOf(ref, n, kvh*hd, kd)
	ref.RoPE(kr, pos, hd, rope)
	qr := tensorOf(ref, n, heads*hd, qd)
	ref.RoPE(qr, pos, hd, rope)
	ref.Close()
	scale := 1 / math.Sqrt(hd)
	want := refAttention(qr.Data, kr.Data, vd, pos, heads, kvh, hd, scale)

	for _, tc := range []struct {
		name string
		f32  bool
		dt   kvcache.DType
		tol  float64
	}{
		{"f32 reference", true, kvcache.F16, 2e-6},
		{"fp16", false, kvcache.F16, 2e-3},
		{"bf16", false, kvcache.BF16, 1.5e-2},
		{"fp8_e4m3", false, kvcache.FP8E4M3, 1e-1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{Threads: 3, F32KV: tc.f32})
			defer b.Close()
			if err := b.AllocKV(kvcache.Layout{Layers: 2, KVHeads: kvh, HeadDim: hd, PageSize: 8, Pages: 5, DType: tc.dt}); err != nil {
				t.Fatal(err)
			}
			pages := []int32{4, 1, 3}
			split := n - 1
			for _, part := range [][2]int{{0, split}, {split, n}} {
				lo, hi := part[0], part[1]
				bt := &model.Batch{Tokens: make([]int32, hi-lo), Pos: pos[lo:hi],
					Seqs: []model.SeqSpan{{Offset: 0, Cached: lo, NewTokens: hi - lo, Pages: pages}}}
				k := tensorOf(b, hi-lo, kvh*hd, kd[lo*kvh*hd:hi*kvh*hd])
				v := tensorOf(b, hi-lo, kvh*hd, vd[lo*kvh*hd:hi*kvh*hd])
				b.KVWrite(1, k, v, bt, rope)
				dst := poisoned(b, hi-lo, heads*hd)
				b.Attention(dst, tensorOf(b, hi-lo, heads*hd, qr.Data[lo*heads*hd:hi*heads*hd]), 1, bt, heads, float32(scale))
				for i := range dst.Data {
					closeTo(t, fmt.Sprintf("row %d elem %d", lo+i/(heads*hd), i%(heads*hd)), dst.Data[i], want[lo*heads*hd+i], 1, tc.tol)
				}
			}
		})
	}
}

func TestMoE(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	const dim, ff, E, K, n = 64, 32, 6, 2, 7
	b := New(Options{Threads: 3})
	defer b.Close()
	router, rref := makeWeight(t, b, "router", gguf.F32, []uint64{dim, E}, randVec(r, E*dim, 0.5))
	gate, gref := makeWeight(t, b, "gate", gguf.Q8_0, []uint64{dim, ff, E}, randVec(r, E*ff*dim, 0.2))
	up, uref := makeWeight(t, b, "up", gguf.F16, []uint64{dim, ff, E}, randVec(r, E*ff*dim, 0.2))
	down, dref := makeWeight(t, b, "down", gguf.Q5_0, []uint64{ff, dim, E}, randVec(r, E*dim*ff, 0.2))
	xd := randVec(r, n*dim, 1)
	for _, norm := range []bool{true, false} {
		m := &model.MoE{Router: router, Gate: gate, Up: up, Down: down, Experts: E, TopK: K, NormTopK: norm}
		dst := poisoned(b, n, dim)
		b.MoE(dst, tensorOf(b, n, dim, xd), m)
		for i := 0; i < n; i++ {
			x := xd[i*dim : (i+1)*dim]
			lg := make([]float64, E)
			for e := range lg {
				for c := 0; c < dim; c++ {
					lg[e] += rref[e*dim+c] * float64(x[c])
				}
			}
			mx := lg[0]
			for _, v := range lg {
				mx = math.Max(mx, v)
			}
			var sum float64
			p := make([]float64, E)
			for e := range p {
				p[e] = math.Exp(lg[e] - mx)
				sum += p[e]
			}
			// top-K by repeated maximum
			used := map[int]bool{}
			var chosen []int
			var tot float64
			for range K {
				best := -1
				for e := range p {
					if !used[e] && (best < 0 || p[e] > p[best]) {
						best = e
					}
				}
				used[best] = true
				chosen = append(chosen, best)
				tot += p[best] / sum
			}
			want := make([]float64, dim)
			for _, e := range chosen {
				w := p[e] / sum
				if norm {
					w /= tot
				}
				h := make([]float64, ff)
				for j := 0; j < ff; j++ {
					var g, u float64
					for c := 0; c < dim; c++ {
						g += gref[(e*ff+j)*dim+c] * float64(x[c])
						u += uref[(e*ff+j)*dim+c] * float64(x[c])
					}
					h[j] = g / (1 + math.Exp(-g)) * u
				}
				for c := 0; c < dim; c++ {
					var y float64
					for j := 0; j < ff; j++ {
						y += dref[(e*dim+c)*ff+j] * h[j]
					}
					want[c] += w * y
				}
			}
			for c := range want {
				closeTo(t, fmt.Sprintf("norm=%v row %d col %d", norm, i, c), dst.Data[i*dim+c], want[c], 1, 1e-5)
			}
		}
	}
}

func TestLoadWeightErrors(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	tests := []struct {
		info gguf.TensorInfo
		raw  int
		want string
	}{
		{gguf.TensorInfo{Name: "blk.0.x", Dims: []uint64{32, 2}, Type: gguf.Type(99)}, 64, `tensor "blk.0.x" has type type(99)`},
		{gguf.TensorInfo{Name: "w", Dims: []uint64{33, 2}, Type: gguf.Q4_0}, 64, "not a multiple"},
		{gguf.TensorInfo{Name: "w", Dims: []uint64{32, 2}, Type: gguf.Q4_0}, 20, "bytes of data"},
	}
	for _, tc := range tests {
		_, err := b.LoadWeight(tc.info, make([]byte, tc.raw))
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("LoadWeight(%v): error %v, want it to mention %q", tc.info, err, tc.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestKernelsAgree checks every SIMD kernel against the portable Go kernel
// of the same type and a float64 reference, on rows whose lengths leave
// tails for the vector loops.
func TestKernelsAgree(t *testing.T) {
	if len(fastKernels) == 0 {
		t.Skip("no SIMD kernels on this CPU/build")
	}
	r := rand.New(rand.NewPCG(17, 18))
	for typ, fast := range fastKernels {
		for _, cols := range []int{32, 96, 256, 2816, 4128} {
			if cols%typ.BlockElems() != 0 {
				continue
			}
			wd := randVec(r, cols, 1)
			for i := range wd {
				wd[i] -= 0.2
			}
			raw, err := gguf.Quantize(typ, wd)
			if err != nil {
				t.Fatal(err)
			}
			deq := make([]float32, cols)
			if err := gguf.Dequantize(typ, raw, deq); err != nil {
				t.Fatal(err)
			}
			x := randVec(r, cols, 1)
			xs := make([]float32, cols/32)
			blockSums(xs, x)
			var want, scale float64
			for i := range x {
				want += float64(deq[i]) * float64(x[i])
				scale += math.Abs(float64(deq[i]) * float64(x[i]))
			}
			closeTo(t, fmt.Sprintf("%s/%d fast", typ, cols), fast(raw, x, xs), want, scale, 2e-6)
			closeTo(t, fmt.Sprintf("%s/%d go", typ, cols), kernels[typ](raw, x, xs), want, scale, 2e-6)
		}
	}
	for _, n := range []int{1, 31, 32, 100, 1000} {
		a, b := randVec(r, n, 1), randVec(r, n, 1)
		var want, scale float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			scale += math.Abs(float64(a[i]) * float64(b[i]))
		}
		closeTo(t, fmt.Sprintf("dotF32/%d", n), dotF32(a, b), want, scale, 2e-6)
		closeTo(t, fmt.Sprintf("dotF32Go/%d", n), dotF32Go(a, b), want, scale, 2e-6)
	}
}

// TestFourRowKernels checks every four-row kernel against the float64
// reference, with row strides larger than the row and more blocks than
// one k-quant batch.
func TestFourRowKernels(t *testing.T) {
	if len(fastKernels4) == 0 {
		t.Skip("no four-row kernels on this CPU/build")
	}
	r := rand.New(rand.NewPCG(19, 20))
	for typ, k4 := range fastKernels4 {
		for _, cols := range []int{256, 2816} {
			wd := randVec(r, cols, 1)
			raw, err := gguf.Quantize(typ, wd)
			if err != nil {
				t.Fatal(err)
			}
			deq := make([]float32, cols)
			if err := gguf.Dequantize(typ, raw, deq); err != nil {
				t.Fatal(err)
			}
			stride, xsStride := cols+64, cols/32+3
			x := randVec(r, 4*stride, 1)
			xs := make([]float32, 4*xsStride)
			for row := 0; row < 4; row++ {
				blockSums(xs[row*xsStride:row*xsStride+cols/32], x[row*stride:row*stride+cols])
			}
			var out [4]float32
			k4(raw, x, stride, xs, xsStride, &out)
			for row := 0; row < 4; row++ {
				var want, scale float64
				for i := 0; i < cols; i++ {
					p := float64(deq[i]) * float64(x[row*stride+i])
					want += p
					scale += math.Abs(p)
				}
				closeTo(t, fmt.Sprintf("%s/%d row %d", typ, cols, row), out[row], want, scale, 2e-6)
			}
		}
	}
}

// TestMatMulGenericTypes covers the types without a fused kernel (decoded
// row by row through gguf.Dequantize) using random block bits with finite
// f16 scales, since gguf has no quantizer for them.
func TestMatMulGenericTypes(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	r := rand.New(rand.NewPCG(21, 22))
	scaleAt := map[gguf.Type][]int{gguf.Q8_1: {0, 2}, gguf.Q2_K: {80, 82}, gguf.Q3_K: {108}}
	const cols, rows, n = 512, 19, 5
	for typ, offs := range scaleAt {
		if kernelFor(typ) != nil {
			t.Fatalf("%s has a fused kernel; this test expects the generic path", typ)
		}
		bb := typ.BlockBytes()
		raw := make([]byte, rows*cols/typ.BlockElems()*bb)
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		for blk := 0; blk < len(raw)/bb; blk++ {
			for _, o := range offs {
				h := gguf.F32ToF16(float32(0.01 + 0.1*r.Float64()))
				raw[blk*bb+o], raw[blk*bb+o+1] = byte(h), byte(h>>8)
			}
		}
		w, err := b.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{cols, rows}, Type: typ}, raw)
		if err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, rows*cols)
		if err := gguf.Dequantize(typ, raw, deq); err != nil {
			t.Fatal(err)
		}
		xd := randVec(r, n*cols, 1)
		dst := poisoned(b, n, rows)
		b.MatMul(dst, tensorOf(b, n, cols, xd), w)
		for i := 0; i < n; i++ {
			for o := 0; o < rows; o++ {
				var want, scale float64
				for c := 0; c < cols; c++ {
					p := float64(deq[o*cols+c]) * float64(xd[i*cols+c])
					want += p
					scale += math.Abs(p)
				}
				closeTo(t, fmt.Sprintf("%s dst[%d][%d]", typ, i, o), dst.Data[i*rows+o], want, scale, 2e-6)
			}
		}
	}
}
