package kvcache

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

type storeCase struct {
	dtype  DType
	scales ScaleMode
	vdtype DType // V's dtype when it differs (Layout.VDType); Auto: same as dtype
}

func (c storeCase) String() string {
	name := PairName(c.dtype, c.vdtype)
	if c.dtype.IsFP8() || c.v().IsFP8() {
		return name + "/" + c.scales.String()
	}
	return name
}

func (c storeCase) v() DType {
	if c.vdtype == Auto {
		return c.dtype
	}
	return c.vdtype
}

func (c storeCase) layout(l Layout) Layout {
	l.Scales = c.scales
	return l.WithDTypes(c.dtype, c.v())
}

// mixedCases stores K and V in different dtypes: every ordered pair of
// distinct dtypes with dynamic scales, and the two 16-bit/fp8 pairs with
// static scales (only the fp8 half uses them).
var mixedCases = func() []storeCase {
	all := []DType{BF16, F16, FP8E4M3, FP8E5M2}
	var cs []storeCase
	for _, k := range all {
		for _, v := range all {
			if k != v {
				cs = append(cs, storeCase{k, DynamicScales, v})
			}
		}
	}
	return append(cs, storeCase{BF16, StaticScales, FP8E4M3}, storeCase{FP8E4M3, StaticScales, BF16})
}()

// mixedGeoms is the subset of geoms the mixed pairs run on (GQA, odd
// head_dim, a page of one token's worth of tail).
var mixedGeoms = []int{1, 3, 4}

var storeCases = []storeCase{
	{BF16, DynamicScales, Auto}, {F16, DynamicScales, Auto},
	{FP8E4M3, DynamicScales, Auto}, {FP8E5M2, DynamicScales, Auto},
	{FP8E4M3, StaticScales, Auto}, {FP8E5M2, StaticScales, Auto},
}

type geom struct{ kvHeads, group, headDim, pageSize, n int }

var geoms = []geom{
	{1, 1, 64, 8, 300},
	{2, 4, 128, 16, 500},
	{1, 8, 256, 256, 700},
	{4, 2, 64, 32, 257},
	{2, 3, 80, 64, 129},
	{3, 1, 96, 128, 1},
	{2, 2, 128, 8, 64},
}

// randRows makes n rows of [kvHeads*headDim] with a few outlier channels,
// as real K activations have.
func randRows(r *rand.Rand, n, width int, outliers bool) [][]float32 {
	rows := make([][]float32, n)
	for t := range rows {
		row := make([]float32, width)
		for i := range row {
			x := r.NormFloat64()
			if outliers && i%17 == 3 {
				x *= 8
			}
			row[i] = float32(x)
		}
		rows[t] = row
	}
	return rows
}

// staticScalesFor calibrates per-head scales from the data, optionally
// tightened (factor < 1) so some values saturate.
func staticScalesFor(rows [][]float32, kvHeads, headDim int, fp8Max float32, factor float32) []float32 {
	s := make([]float32, kvHeads)
	for _, row := range rows {
		for h := range kvHeads {
			for _, x := range row[h*headDim : (h+1)*headDim] {
				s[h] = max(s[h], float32(math.Abs(float64(x))))
			}
		}
	}
	for h := range s {
		s[h] = s[h] / fp8Max * factor
	}
	return s
}

// refAttend is the float64 reference: softmax(scale q·k) v over rows.
func refAttend(q []float64, ks, vs [][]float64, heads, kvHeads, d int, scale float64) []float64 {
	out := make([]float64, heads*d)
	group := heads / kvHeads
	n := len(ks)
	s := make([]float64, n)
	for h := range heads {
		kh := h / group
		m := math.Inf(-1)
		for t := range n {
			var dot float64
			for i := range d {
				dot += q[h*d+i] * ks[t][kh*d+i]
			}
			s[t] = dot * scale
			m = math.Max(m, s[t])
		}
		var sum float64
		for t := range n {
			s[t] = math.Exp(s[t] - m)
			sum += s[t]
		}
		for t := range n {
			w := s[t] / sum
			for i := range d {
				out[h*d+i] += w * vs[t][kh*d+i]
			}
		}
	}
	return out
}

func to64(rows [][]float32) [][]float64 {
	out := make([][]float64, len(rows))
	for i, r := range rows {
		out[i] = make([]float64, len(r))
		for j, x := range r {
			out[i][j] = float64(x)
		}
	}
	return out
}

// storedRows reads back the value the store holds for each token (codes
// decoded times scale), through Raw and the documented layout.
func storedRows(s *HostStore, layer int, pages []int32, n int) (k, v [][]float64) {
	l := s.Layout()
	kc, vc, ksc, vsc := s.Raw(layer)
	read := func(dt DType, codes []byte, scales []float32, t int) []float64 {
		row := make([]float64, l.KVHeads*l.HeadDim)
		page, slot := int(pages[t/l.PageSize]), t%l.PageSize
		for h := range l.KVHeads {
			base := l.CodeIndex(page, h, slot)
			sc := 1.0
			switch {
			case dt.IsFP8() && l.Scales == DynamicScales:
				sc = float64(scales[l.ScaleIndex(page, h, slot)])
			case dt.IsFP8():
				sc = float64(scales[h])
			}
			for i := range l.HeadDim {
				var x float32
				switch dt {
				case BF16:
					x = DecodeBF16(binary.LittleEndian.Uint16(codes[2*(base+i):]))
				case F16:
					x = DecodeF16(binary.LittleEndian.Uint16(codes[2*(base+i):]))
				case FP8E4M3:
					x = DecodeE4M3(codes[base+i])
				case FP8E5M2:
					x = DecodeE5M2(codes[base+i])
				}
				row[h*l.HeadDim+i] = float64(x) * sc
			}
		}
		return row
	}
	for t := range n {
		k = append(k, read(l.KType(), kc, ksc, t))
		v = append(v, read(l.VType(), vc, vsc, t))
	}
	return
}

// elemBound is the largest quantization error allowed for one element x
// stored with row scale sc: half a unit in the last place of the format,
// relative to |x|, or half the smallest subnormal step (times sc).
func elemBound(d DType, x, sc float64) float64 {
	switch d {
	case BF16:
		return math.Abs(x) * 0x1p-8 * 1.0000001
	case F16:
		return math.Abs(x)*0x1p-11*1.0000001 + 0x1p-25
	case FP8E4M3:
		return math.Abs(x)*0x1p-4*1.0000001 + sc*0x1p-10
	case FP8E5M2:
		return math.Abs(x)*0x1p-3*1.0000001 + sc*0x1p-17
	}
	panic("dtype")
}

func TestHostStoreAttend(t *testing.T) {
	for _, sc := range storeCases {
		for gi, g := range geoms {
			t.Run(fmt.Sprintf("%v/%d_kv%d_g%d_d%d_p%d_n%d", sc, gi, g.kvHeads, g.group, g.headDim, g.pageSize, g.n), func(t *testing.T) {
				testAttend(t, sc, g, uint64(gi))
			})
		}
	}
}

// K and V in different dtypes: each half is stored, bounded and read in
// its own dtype, with the same float64 references and tolerances as the
// single-dtype cases (2e-5·max|v| over the stored values; the
// quantization bound from the actual K and V errors over the inputs).
func TestHostStoreAttendMixed(t *testing.T) {
	for _, sc := range mixedCases {
		for _, gi := range mixedGeoms {
			g := geoms[gi]
			t.Run(fmt.Sprintf("%v/%d_kv%d_g%d_d%d_p%d_n%d", sc, gi, g.kvHeads, g.group, g.headDim, g.pageSize, g.n), func(t *testing.T) {
				testAttend(t, sc, g, uint64(gi))
			})
		}
	}
}

func testAttend(t *testing.T, sc storeCase, g geom, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(sc.dtype)*10+uint64(sc.scales)+100*uint64(sc.vdtype)))
	const layers = 2
	const layer = 1
	heads := g.kvHeads * g.group
	width := g.kvHeads * g.headDim
	npages := (g.n + g.pageSize - 1) / g.pageSize
	l := sc.layout(Layout{Layers: layers, KVHeads: g.kvHeads, HeadDim: g.headDim, PageSize: g.pageSize,
		Pages: npages*2 + 3})
	kd, vd := sc.dtype, sc.v()

	ks := randRows(r, g.n, width, true)
	vs := randRows(r, g.n, width, false)
	if sc.scales == StaticScales && l.AnyFP8() {
		// layer 0 gets arbitrary scales; layer 1 is calibrated on the data,
		// V deliberately too tight so some values saturate. A 16-bit half
		// ignores its scales.
		kst := staticScalesFor(ks, g.kvHeads, g.headDim, max(kd.FP8Max(), 1), 1)
		vst := staticScalesFor(vs, g.kvHeads, g.headDim, max(vd.FP8Max(), 1), 0.7)
		for range g.kvHeads {
			l.KScale = append(l.KScale, 1)
			l.VScale = append(l.VScale, 2)
		}
		l.KScale = append(l.KScale, kst...)
		l.VScale = append(l.VScale, vst...)
	}
	s, err := NewHostStore(l)
	if err != nil {
		t.Fatal(err)
	}
	// Non-contiguous page table: a random choice of distinct page ids.
	perm := r.Perm(l.Pages)
	pages := make([]int32, npages)
	for i := range pages {
		pages[i] = int32(perm[i])
	}
	// Fill the other layer and unused pages with junk that must not be read.
	junk := randRows(r, 1, width, false)[0]
	for _, p := range perm[npages:] {
		for slot := range g.pageSize {
			s.WriteRow(layer, p, slot, junk, junk)
		}
	}
	for t := range g.n {
		s.WriteRow(0, int(pages[t/g.pageSize]), t%g.pageSize, junk, junk)
		s.WriteRow(layer, int(pages[t/g.pageSize]), t%g.pageSize, ks[t], vs[t])
	}
	// Tail slots of the last page hold junk too.
	for slot := g.n % g.pageSize; slot != 0 && slot < g.pageSize; slot++ {
		s.WriteRow(layer, int(pages[npages-1]), slot, junk, junk)
	}

	// Stored values are within the format's quantization bound of the input.
	sk, sv := storedRows(s, layer, pages, g.n)
	for tok := range g.n {
		for h := range g.kvHeads {
			rowScale := func(dt DType, rows [][]float32, static []float32) float64 {
				switch {
				case dt.IsFP8() && sc.scales == DynamicScales:
					return float64(DynamicScale(rows[tok][h*g.headDim:(h+1)*g.headDim], dt.FP8Max()))
				case dt.IsFP8():
					return float64(static[layer*g.kvHeads+h])
				}
				return 1
			}
			kscale, vscale := rowScale(kd, ks, l.KScale), rowScale(vd, vs, l.VScale)
			for i := h * g.headDim; i < (h+1)*g.headDim; i++ {
				x := float64(ks[tok][i])
				if e := math.Abs(sk[tok][i] - x); e > elemBound(kd, x, kscale) {
					t.Fatalf("token %d k[%d] = %g stored as %g (error %g > bound)", tok, i, x, sk[tok][i], e)
				}
				x = float64(vs[tok][i])
				lim := elemBound(vd, x, vscale)
				if vd.IsFP8() && sc.scales == StaticScales {
					lim = max(lim, math.Abs(x)-vscale*float64(vd.FP8Max())) // saturation
				}
				if e := math.Abs(sv[tok][i] - x); e > lim {
					t.Fatalf("token %d v[%d] = %g stored as %g (error %g > bound %g)", tok, i, x, sv[tok][i], e, lim)
				}
			}
		}
	}

	// ReadRow returns the stored values (to float32 rounding of code*scale).
	rk, rv := make([]float32, width), make([]float32, width)
	for tok := range g.n {
		s.ReadRow(layer, int(pages[tok/g.pageSize]), tok%g.pageSize, rk, rv)
		for i := range rk {
			if math.Abs(float64(rk[i])-sk[tok][i]) > 0x1p-23*math.Abs(sk[tok][i]) ||
				math.Abs(float64(rv[i])-sv[tok][i]) > 0x1p-23*math.Abs(sv[tok][i]) {
				t.Fatalf("ReadRow token %d [%d] = %g, %g; stored %g, %g", tok, i, rk[i], rv[i], sk[tok][i], sv[tok][i])
			}
		}
	}

	scale := float32(1 / math.Sqrt(float64(g.headDim)))
	for qi := range 3 {
		q := randRows(r, 1, heads*g.headDim, false)[0]
		for i := range q {
			q[i] *= float32(qi + 1) // sharper softmax for later queries
		}
		out := make([]float32, heads*g.headDim)
		for i := range out {
			out[i] = float32(math.NaN())
		}
		s.Attend(out, q, layer, pages, g.n, heads, scale)
		q64 := to64([][]float32{q})[0]

		// 1. Arithmetic: against float64 attention over the stored values.
		ref := refAttend(q64, sk, sv, heads, g.kvHeads, g.headDim, float64(scale))
		vmax := 0.0
		for _, row := range sv {
			for _, x := range row {
				vmax = math.Max(vmax, math.Abs(x))
			}
		}
		for i := range out {
			if e := math.Abs(float64(out[i]) - ref[i]); !(e <= 2e-5*vmax) {
				t.Fatalf("query %d out[%d] = %g, float64 reference over stored values %g (error %g > %g)",
					qi, i, out[i], ref[i], e, 2e-5*vmax)
			}
		}

		// 2. Quantization: against float64 attention over the exact inputs,
		// within the bound implied by the actual per-element errors: with
		// D = max score perturbation, |Δout| ≤ (e^{2D}-1)·max|v'| + max|δv|.
		exact := refAttend(q64, to64(ks), to64(vs), heads, g.kvHeads, g.headDim, float64(scale))
		for h := range heads {
			kh := h / g.group
			var dScore, dv float64
			for tok := range g.n {
				var ds float64
				for i := range g.headDim {
					j := kh*g.headDim + i
					ds += q64[h*g.headDim+i] * (sk[tok][j] - float64(ks[tok][j]))
					dv = math.Max(dv, math.Abs(sv[tok][j]-float64(vs[tok][j])))
				}
				dScore = math.Max(dScore, math.Abs(ds)*float64(scale))
			}
			bound := math.Expm1(2*dScore)*vmax + dv + 2e-5*vmax
			for i := h * g.headDim; i < (h+1)*g.headDim; i++ {
				if e := math.Abs(float64(out[i]) - exact[i]); !(e <= bound) {
					t.Fatalf("query %d head %d out[%d] = %g, exact %g: error %g > quantization bound %g",
						qi, h, i, out[i], exact[i], e, bound)
				}
			}
		}
	}
}

// A tiny example whose bytes are computed by hand.
func TestWriteRowBytesByHand(t *testing.T) {
	l := Layout{Layers: 1, KVHeads: 2, HeadDim: 4, PageSize: 2, Pages: 2, DType: FP8E4M3}
	s, err := NewHostStore(l)
	if err != nil {
		t.Fatal(err)
	}
	// head 0: amax 448 -> scale 1; codes of 448, -1, 0.5, 3 =
	//   0x7e (1.1110.110), 0xb8 (sign, exp 7 => 1.0), 0x30 (exp 6), 0x44 (exp 8, mant 100 => 1.5*2).
	// head 1: all zero -> scale 0, codes 0.
	k := []float32{448, -1, 0.5, 3, 0, 0, 0, 0}
	// v head 0: amax 0.875 -> scale 0.875/448; 0.875 -> 448 (0x7e); 0.4375 -> 224 (0x76); -0.875 -> 0xfe; 0 -> 0.
	// v head 1: amax 7 -> scale 7/448 = 1/64; 7 -> 0x7e; 1 -> 64 = 2^6 (exp 13: 0x68); 0.015625 -> 1 (0x38); -2 -> -128 = -2^7 (0xf0).
	v := []float32{0.875, 0.4375, -0.875, 0, 7, 1, 0.015625, -2}
	s.WriteRow(0, 1, 1, k, v) // page 1, slot 1
	kc, vc, ksc, vsc := s.Raw(0)
	// page 1 starts at code 1*2*2*4 = 16; head 0 slot 1 at 16+4 = 20; head 1 slot 1 at 16+8+4 = 28.
	wantK := map[int]byte{20: 0x7e, 21: 0xb8, 22: 0x30, 23: 0x44}
	wantV := map[int]byte{20: 0x7e, 21: 0x76, 22: 0xfe, 23: 0, 28: 0x7e, 29: 0x68, 30: 0x38, 31: 0xf0}
	for i := range kc {
		if kc[i] != wantK[i] {
			t.Errorf("k code[%d] = 0x%02x, want 0x%02x", i, kc[i], wantK[i])
		}
		if vc[i] != wantV[i] {
			t.Errorf("v code[%d] = 0x%02x, want 0x%02x", i, vc[i], wantV[i])
		}
	}
	// scales [page][kv_head][slot]: page 1 head 0 slot 1 = 5, head 1 slot 1 = 7.
	wantKS := map[int]float32{5: 1, 7: 0}
	wantVS := map[int]float32{5: float32(0.875) / 448, 7: float32(1) / 64}
	for i := range ksc {
		if ksc[i] != wantKS[i] || vsc[i] != wantVS[i] {
			t.Errorf("scale[%d] = k %g v %g, want k %g v %g", i, ksc[i], vsc[i], wantKS[i], wantVS[i])
		}
	}

	// bf16: 1.0 = 0x3f80, -2 = 0xc000, little-endian at byte 2*index.
	l.DType = BF16
	s, err = NewHostStore(l)
	if err != nil {
		t.Fatal(err)
	}
	s.WriteRow(0, 0, 1, []float32{1, -2, 0, 0, 0, 0, 0, 3}, make([]float32, 8))
	kc, _, ksc, _ = s.Raw(0)
	if ksc != nil {
		t.Error("bf16 store has scales")
	}
	// head 0 slot 1 at index 4 -> bytes 8..; head 1 slot 1 at index 12 -> bytes 24..; 3.0 = 0x4040 at index 15.
	want := map[int]byte{8: 0x80, 9: 0x3f, 10: 0x00, 11: 0xc0, 30: 0x40, 31: 0x40}
	for i := range kc {
		if kc[i] != want[i] {
			t.Errorf("bf16 byte[%d] = 0x%02x, want 0x%02x", i, kc[i], want[i])
		}
	}
}

// Concurrent Attend calls give identical results (no shared scratch).
func TestAttendConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	l := Layout{Layers: 1, KVHeads: 2, HeadDim: 64, PageSize: 16, Pages: 20, DType: FP8E4M3}
	s, err := NewHostStore(l)
	if err != nil {
		t.Fatal(err)
	}
	pages := make([]int32, 20)
	for i := range pages {
		pages[i] = int32(19 - i)
	}
	rows := randRows(r, 320, 128, true)
	for tok, row := range rows {
		s.WriteRow(0, int(pages[tok/16]), tok%16, row, row)
	}
	q := randRows(r, 8, 4*64, false)
	want := make([][]float32, len(q))
	for i := range q {
		want[i] = make([]float32, 4*64)
		s.Attend(want[i], q[i], 0, pages, 100+25*i, 4, 0.125)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for w := range 8 {
		wg.Go(func() {
			out := make([]float32, 4*64)
			for rep := range 20 {
				i := (w + rep) % len(q)
				s.Attend(out, q[i], 0, pages, 100+25*i, 4, 0.125)
				for j := range out {
					if out[j] != want[i][j] {
						errs <- fmt.Sprintf("worker %d query %d: out[%d] %g != %g", w, i, j, out[j], want[i][j])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestNewHostStoreRejects(t *testing.T) {
	ok := Layout{Layers: 1, KVHeads: 1, HeadDim: 64, PageSize: 16, Pages: 4, DType: FP8E4M3}
	for _, tc := range []struct {
		name string
		mod  func(*Layout)
		want string
	}{
		{"auto", func(l *Layout) { l.DType = Auto }, "resolved"},
		{"page size", func(l *Layout) { l.PageSize = 24 }, "power of two"},
		{"no pages", func(l *Layout) { l.Pages = 0 }, "pages"},
		{"static count", func(l *Layout) { l.Scales = StaticScales; l.KScale = []float32{1}; l.VScale = nil }, "static scales need 1"},
		{"static zero", func(l *Layout) { l.Scales = StaticScales; l.KScale = []float32{1}; l.VScale = []float32{0} }, "positive"},
	} {
		l := ok
		tc.mod(&l)
		_, err := NewHostStore(l)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want mention of %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewHostStore(ok); err != nil {
		t.Fatal(err)
	}
}

// The write rule the CUDA kernel must match bit for bit: scale =
// amax/FP8_MAX and codes = Encode(x/scale), both IEEE float32 divisions
// (not a multiplication by a reciprocal).
func TestWriteRowDivisionRule(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, d := range []DType{FP8E4M3, FP8E5M2} {
		l := Layout{Layers: 1, KVHeads: 2, HeadDim: 64, PageSize: 4, Pages: 2, DType: d}
		s, _ := NewHostStore(l)
		enc := map[DType]func(float32) uint8{FP8E4M3: EncodeE4M3, FP8E5M2: EncodeE5M2}[d]
		recipDiffers := 0
		for range 200 {
			k := randRows(r, 1, 128, true)[0]
			for i := range k {
				k[i] *= float32(math.Ldexp(1, r.IntN(30)-15))
			}
			s.WriteRow(0, 1, 3, k, k)
			kc, _, ks, _ := s.Raw(0)
			for h := range 2 {
				row := k[h*64 : (h+1)*64]
				var amax float32
				for _, x := range row {
					amax = max(amax, float32(math.Abs(float64(x))))
				}
				scale := amax / d.FP8Max()
				if got := ks[l.ScaleIndex(1, h, 3)]; got != scale {
					t.Fatalf("%v scale %g want %g", d, got, scale)
				}
				base := l.CodeIndex(1, h, 3)
				for i, x := range row {
					if kc[base+i] != enc(x/scale) {
						t.Fatalf("%v code %d = 0x%02x want 0x%02x", d, i, kc[base+i], enc(x/scale))
					}
					if enc(x*(1/scale)) != enc(x/scale) {
						recipDiffers++
					}
				}
			}
		}
		t.Logf("%v: %d of %d codes would differ with x*(1/scale)", d, recipDiffers, 200*128)
	}
}

func BenchmarkWriteRow(b *testing.B) {
	for _, d := range []DType{BF16, FP8E4M3} {
		b.Run(d.String(), func(b *testing.B) {
			l := Layout{Layers: 1, KVHeads: 8, HeadDim: 128, PageSize: 64, Pages: 4, DType: d}
			s, _ := NewHostStore(l)
			row := randRows(rand.New(rand.NewPCG(1, 1)), 1, 1024, true)[0]
			b.SetBytes(int64(l.BytesPerToken()))
			for i := 0; b.Loop(); i++ {
				s.WriteRow(0, i&3, i&63, row, row)
			}
		})
	}
}

// Decode attention over 4096 tokens, Llama-3.1-8B head shapes (32 q / 8 kv
// heads, head_dim 128), one layer, per dtype and page size. Bytes/s counts
// the KV bytes read.
func BenchmarkAttend(b *testing.B) {
	const n = 4096
	for _, d := range []DType{BF16, FP8E4M3} {
		for _, ps := range []int{16, 64, 256} {
			b.Run(fmt.Sprintf("%v/page%d", d, ps), func(b *testing.B) {
				l := Layout{Layers: 1, KVHeads: 8, HeadDim: 128, PageSize: ps, Pages: n / ps, DType: d}
				s, _ := NewHostStore(l)
				r := rand.New(rand.NewPCG(2, 2))
				pages := make([]int32, l.Pages)
				for i, p := range r.Perm(l.Pages) {
					pages[i] = int32(p)
				}
				row := randRows(r, 1, 1024, true)[0]
				for tok := range n {
					s.WriteRow(0, int(pages[tok/ps]), tok%ps, row, row)
				}
				q := randRows(r, 1, 32*128, false)[0]
				out := make([]float32, len(q))
				b.SetBytes(int64(n * l.BytesPerToken()))
				for b.Loop() {
					s.Attend(out, q, 0, pages, n, 32, 0.088)
				}
			})
		}
	}
}

// TestAttendKVHeadsSplitsExactly: each KV-head range written concurrently
// gives exactly Attend's output, and only its own query heads are touched.
func TestAttendKVHeadsSplitsExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 3))
	for _, dt := range []DType{BF16, FP8E4M3, FP8E5M2} {
		l := Layout{Layers: 2, KVHeads: 4, HeadDim: 64, PageSize: 16, Pages: 24, DType: dt}
		s, err := NewHostStore(l)
		if err != nil {
			t.Fatal(err)
		}
		pages := make([]int32, 24)
		for i := range pages {
			pages[i] = int32((i * 7) % 24)
		}
		rows := randRows(r, 300, 4*64, true)
		for tok, row := range rows {
			s.WriteRow(1, int(pages[tok/16]), tok%16, row, rows[len(rows)-1-tok])
		}
		const heads = 8 // GQA 2
		q := randRows(r, 1, heads*64, false)[0]
		want := make([]float32, heads*64)
		s.Attend(want, q, 1, pages, 277, heads, 0.125)
		for _, split := range [][2]int{{0, 4}, {0, 1}, {1, 3}, {3, 4}} {
			got := make([]float32, heads*64)
			for i := range got {
				got[i] = float32(math.NaN())
			}
			var wg sync.WaitGroup
			for kh := split[0]; kh < split[1]; kh++ {
				wg.Go(func() { s.AttendKVHeads(got, q, 1, pages, 277, heads, kh, kh+1, 0.125) })
			}
			wg.Wait()
			for i := range got {
				inRange := i/64/2 >= split[0] && i/64/2 < split[1]
				if inRange && got[i] != want[i] {
					t.Fatalf("%s split %v: out[%d] = %v, Attend gives %v", dt, split, i, got[i], want[i])
				}
				if !inRange && !math.IsNaN(float64(got[i])) {
					t.Fatalf("%s split %v: wrote out[%d] outside its heads", dt, split, i)
				}
			}
		}
	}
	s, _ := NewHostStore(Layout{Layers: 1, KVHeads: 2, HeadDim: 64, PageSize: 16, Pages: 1, DType: BF16})
	for _, bad := range [][2]int{{-1, 1}, {1, 1}, {0, 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AttendKVHeads(%v) did not panic", bad)
				}
			}()
			s.AttendKVHeads(make([]float32, 128), make([]float32, 128), 0, []int32{0}, 1, 2, bad[0], bad[1], 1)
		}()
	}
}
