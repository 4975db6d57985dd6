package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// checkQ8Block checks one quantized block against its 256 inputs: codes
// in [-127, 127], |x - d·q| ≤ d/2 (round to nearest; a hair more for the
// float32 rounding of x·(1/d)), bsums the sums of the codes, NaN d for
// non-finite input and zero for an all-zero block.
func checkQ8Block(t *testing.T, what string, b *q8Block, x []float32) {
	t.Helper()
	var amax float64
	finite := true
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			finite = false
		}
		amax = math.Max(amax, math.Abs(float64(v)))
	}
	if !finite {
		if !math.IsNaN(float64(b.d)) {
			t.Errorf("%s: non-finite input gave d = %v, want NaN", what, b.d)
		}
		return
	}
	if amax == 0 && (b.d != 0 || b.qs != [256]int8{} || b.bsums != [16]int16{}) {
		t.Errorf("%s: all-zero block not all zero: d=%v", what, b.d)
	}
	d := float64(b.d)
	for k := 0; k < 16; k++ {
		var s int
		for j := 16 * k; j < 16*k+16; j++ {
			q := b.qs[j]
			if q < -127 {
				t.Fatalf("%s: code %d at %d", what, q, j)
			}
			s += int(q)
			if e := math.Abs(float64(x[j]) - d*float64(q)); !(e <= d*0.50002) {
				t.Fatalf("%s: x[%d]=%v, d=%v, q=%d: error %g > d/2", what, j, x[j], d, q, e)
			}
		}
		if int(b.bsums[k]) != s {
			t.Fatalf("%s: bsums[%d] = %d, want %d", what, k, b.bsums[k], s)
		}
	}
}

// activationCases are rows of 512 values that stress the quantizer.
func activationCases(r *rand.Rand) map[string][]float32 {
	const n = 512
	outl := randVec(r, n, 1)
	for i := 0; i < n; i += 97 {
		outl[i] *= 300 // one outlier dominates its block's scale
	}
	tiny := randVec(r, n, 1e-41) // subnormal float32
	mixed := randVec(r, n, 1)
	clear(mixed[256:])          // second block all zero
	huge := randVec(r, n, 1e34) // dots near 1e36: no float32 overflow
	return map[string][]float32{
		"normal":   randVec(r, n, 1),
		"outliers": outl,
		"zero":     make([]float32, n),
		"tiny":     tiny,
		"mixed":    mixed,
		"huge":     huge,
	}
}

func TestQ8Quantize(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	cases := activationCases(r)
	nan := randVec(r, 512, 1)
	nan[300] = float32(math.NaN())
	inf := randVec(r, 512, 1)
	inf[7] = float32(math.Inf(-1))
	cases["nan"], cases["inf"] = nan, inf
	for name, x := range cases {
		q := make([]q8Block, len(x)/256)
		q8Quantize(q, x)
		for i := range q {
			checkQ8Block(t, fmt.Sprintf("%s/block %d", name, i), &q[i], x[256*i:256*i+256])
		}
	}
	// The tiny case must keep its information, not flush it to zero.
	q := make([]q8Block, 1)
	q8Quantize(q, cases["tiny"][:256])
	if q[0].d == 0 {
		t.Error("subnormal block quantized to d = 0")
	}
}

func FuzzQ8Quantize(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63}, uint8(0))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 192, 127}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, spread uint8) {
		n := (len(data)/4 + 255) / 256 * 256
		if n == 0 || n > 4096 {
			return
		}
		x := make([]float32, n)
		for i := 0; i+4 <= len(data); i += 4 {
			x[i/4] = math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))
		}
		// Repeat the fuzzed values over the row so that blocks are dense.
		for i := len(data) / 4; i < n && len(data) >= 4; i++ {
			x[i] = x[(i*int(spread+1))%(len(data)/4)]
		}
		q := make([]q8Block, n/256)
		q8Quantize(q, x)
		for i := range q {
			checkQ8Block(t, fmt.Sprintf("block %d", i), &q[i], x[256*i:256*i+256])
		}
	})
}

// randQ4K returns nb Q4_K blocks: the first half from gguf.Quantize of
// random data, the rest random bytes (every 6-bit scale and min, every
// nibble) with finite random d and dmin.
func randQ4K(t *testing.T, r *rand.Rand, nb int) []byte {
	t.Helper()
	half := nb / 2
	raw, err := gguf.Quantize(gguf.Q4_K, randVec(r, half*256, 1))
	if err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, (nb-half)*144)
	for i := range rest {
		rest[i] = byte(r.Uint32())
	}
	for i := 0; i < len(rest); i += 144 {
		binary.LittleEndian.PutUint16(rest[i:], gguf.F32ToF16(float32(r.NormFloat64()*0.01)))
		binary.LittleEndian.PutUint16(rest[i+2:], gguf.F32ToF16(float32(r.NormFloat64()*0.01)))
	}
	return append(raw, rest...)
}

// randWeights returns nb blocks of typ: the first half from gguf.Quantize
// of random data, the rest random bytes (every code, and for Q4_K every
// 6-bit scale and min) with finite random f16 scales.
func randWeights(t *testing.T, r *rand.Rand, typ gguf.Type, nb int) []byte {
	t.Helper()
	switch typ {
	case gguf.Q4_K:
		return randQ4K(t, r, nb)
	case gguf.Q6_K:
		half := nb / 2
		raw, err := gguf.Quantize(typ, randVec(r, half*256, 1))
		if err != nil {
			t.Fatal(err)
		}
		rest := make([]byte, (nb-half)*210)
		for i := range rest {
			rest[i] = byte(r.Uint32()) // codes and int8 scales, -128 included
		}
		for i := 0; i < len(rest); i += 210 {
			binary.LittleEndian.PutUint16(rest[i+208:], gguf.F32ToF16(float32(r.NormFloat64()*0.01)))
		}
		return append(raw, rest...)
	}
	half := nb / 2
	raw, err := gguf.Quantize(typ, randVec(r, half*typ.BlockElems(), 1))
	if err != nil {
		t.Fatal(err)
	}
	bb := typ.BlockBytes()
	rest := make([]byte, (nb-half)*bb)
	for i := range rest {
		rest[i] = byte(r.Uint32())
	}
	scales := 1 // f16 fields at the block start: d, and m for Q4_1
	if typ == gguf.Q4_1 {
		scales = 2
	}
	for i := 0; i < len(rest); i += bb {
		for k := 0; k < scales; k++ {
			binary.LittleEndian.PutUint16(rest[i+2*k:], gguf.F32ToF16(float32(r.NormFloat64()*0.05)))
		}
	}
	return append(raw, rest...)
}

// extremeCodes sets every code of qs to ±127.
func extremeCodes(r *rand.Rand, qs []int8) {
	for j := range qs {
		qs[j] = int8(127 - 254*int(r.Uint32()&1))
	}
}

// TestIntKernelsBitExact: the assembly kernels equal the Go reference to
// the last bit (their integer sums are exact and the float ops run in the
// same order), including blocks of extreme ±127 codes.
func TestIntKernelsBitExact(t *testing.T) {
	if len(fastIntKernels) == 0 {
		t.Skip("no SIMD integer kernels on this CPU/build")
	}
	r := rand.New(rand.NewPCG(43, 44))
	for typ, fast := range fastIntKernels {
		ref := intKernels[typ]
		for _, nb := range []int{1, 2, 7, 16, 18} {
			raw := randWeights(t, r, typ, nb)
			cols := nb * typ.BlockElems()
			xv := randVec(r, cols, 1)
			xs := make([]float32, cols/32)
			blockSums(xs, xv)
			var got, want float32
			if fast.k256 != nil {
				x := make([]q8Block, nb)
				q8Quantize(x, xv)
				last := &x[nb-1]
				extremeCodes(r, last.qs[:])
				for k := range last.bsums {
					var s int16
					for _, q := range last.qs[16*k : 16*k+16] {
						s += int16(q)
					}
					last.bsums[k] = s
				}
				got, want = fast.k256(raw, x, xs), ref.k256(raw, x, xs)
			} else {
				x := make([]q8Block32, nb)
				q8Quantize32(x, xv)
				extremeCodes(r, x[nb-1].qs[:])
				got, want = fast.k32(raw, x, xs), ref.k32(raw, x, xs)
			}
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("%s/%d blocks: asm %v (%#x), Go %v (%#x)", typ, nb, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
}

// actScales returns, per element of x, the scale d8 its code got on typ's
// integer path.
func actScales(typ gguf.Type, x []float32) []float64 {
	d := make([]float64, len(x))
	if ip := intKernels[typ]; ip.k256 != nil {
		q := make([]q8Block, len(x)/256)
		q8Quantize(q, x)
		for i := range d {
			d[i] = float64(q[i/256].d)
		}
	} else {
		q := make([]q8Block32, len(x)/32)
		q8Quantize32(q, x)
		for i := range d {
			d[i] = float64(q[i/32].d)
		}
	}
	return d
}

// TestMatMulIntDot checks the integer path of MatMul against the float64
// dot of the dequantized weights with the unquantized activations. The
// tolerance is the activation rounding's worst case, Σ_blocks (d8/2)·Σ|w|
// over the block (each code is within d8/2 of x/d8, plus 2⁻¹⁶ for the
// float32 product x·(1/d8)), plus float32
// rounding of the block sums (1e-6 of Σ|w|·(|x|+d8)).
func TestMatMulIntDot(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	const rowsW = 12
	for typ := range intKernels {
		for name, xv := range activationCases(r) {
			cols := len(xv)
			b := New(Options{Threads: 3, IntDot: true})
			wd := randVec(r, rowsW*cols, 1)
			for i := range wd {
				wd[i] -= 0.3
			}
			w, ref := makeWeight(t, b, "w", typ, []uint64{uint64(cols), rowsW}, wd)
			// Two activation rows: the case and its negation times 0.5.
			x2 := append(append([]float32(nil), xv...), xv...)
			for i := cols; i < 2*cols; i++ {
				x2[i] *= -0.5
			}
			x := tensorOf(b, 2, cols, x2)
			dst := poisoned(b, 2, rowsW)
			b.MatMul(dst, x, w)
			for row := 0; row < 2; row++ {
				xr := x2[row*cols : (row+1)*cols]
				d8s := actScales(typ, xr)
				for o := 0; o < rowsW; o++ {
					var want, bound, scale float64
					for i, xi := range xr {
						wi := ref[o*cols+i]
						d8 := d8s[i]
						want += wi * float64(xi)
						bound += math.Abs(wi) * d8 * 0.50002
						scale += math.Abs(wi) * (math.Abs(float64(xi)) + d8)
					}
					got := float64(dst.Data[row*rowsW+o])
					if e := math.Abs(got - want); !(e <= bound+1e-6*scale) {
						t.Errorf("%s/%s row %d out %d: got %g, want %g: error %.3g > bound %.3g", typ, name, row, o, got, want, e, bound+1e-6*scale)
					}
				}
			}
			b.Close()
		}
	}
}

// TestMatMulIntDotNaN: a NaN activation makes its row's outputs NaN, as
// on the float path, and leaves the other rows alone.
func TestMatMulIntDotNaN(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 48))
	b := New(Options{Threads: 2, IntDot: true})
	defer b.Close()
	const cols, rowsW = 512, 8
	w, _ := makeWeight(t, b, "w", gguf.Q4_K, []uint64{cols, rowsW}, randVec(r, rowsW*cols, 1))
	xv := randVec(r, 2*cols, 1)
	xv[cols+5] = float32(math.NaN())
	dst := poisoned(b, 2, rowsW)
	b.MatMul(dst, tensorOf(b, 2, cols, xv), w)
	for o := 0; o < rowsW; o++ {
		if v := dst.Data[o]; math.IsNaN(float64(v)) {
			t.Errorf("row 0 out %d is NaN", o)
		}
		if v := dst.Data[rowsW+o]; !math.IsNaN(float64(v)) {
			t.Errorf("row 1 (NaN input) out %d = %v, want NaN", o, v)
		}
	}
}
