package gguf

import (
	"math"
	"strings"
)

// The FP4 types store E2M1 elements (1 sign, 2 exponent, 1 mantissa bits)
// as 4-bit codes. ggml decodes them as the doubled values in KValuesFP4
// and halves the block scale to compensate, and so do we: every product
// below is then exact in float32 (a 4-bit integer times a scale with at
// most 4 significant bits), so any decoder that keeps this convention
// agrees bit for bit.

// KValuesFP4 are the E2M1 codes 0..15 times two (ggml's kvalues_mxfp4).
var KValuesFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// UE4M3 is the float32 value of an NVFP4 block-scale byte in ggml's
// convention (unsigned E4M3, bias 7, times 0.5 for the doubled kvalues):
// 0x00 and the NaN code 0x7F decode to 0, bit 7 is ignored by the
// exponent and mantissa (as ggml_ue4m3_to_fp32 does).
func UE4M3(x byte) float32 { return ue4m3Tab[x] }

// E8M0Half is the float32 value of an MXFP4 scale byte in ggml's
// convention: 2^(x-128), i.e. 2^(x-127) halved (ggml_e8m0_to_fp32_half).
func E8M0Half(x byte) float32 { return e8m0Tab[x] }

var ue4m3Tab = func() (t [256]float32) {
	for i := range t {
		x := byte(i)
		if x == 0 || x == 0x7F {
			continue
		}
		exp := int(x>>3) & 0xF
		man := float64(x & 7)
		var raw float64
		if exp == 0 {
			raw = math.Ldexp(man, -9)
		} else {
			raw = math.Ldexp(1+man/8, exp-7)
		}
		t[i] = float32(raw * 0.5)
	}
	return t
}()

var e8m0Tab = func() (t [256]float32) {
	for i := range t {
		if i < 2 {
			t[i] = math.Float32frombits(0x00200000 << uint(i))
		} else {
			t[i] = math.Float32frombits(uint32(i-1) << 23)
		}
	}
	return t
}()

// UE4M3Table and E8M0Table expose the decode tables to kernels that index
// them directly (the AVX2 dot products).
func UE4M3Table() *[256]float32 { return &ue4m3Tab }
func E8M0Table() *[256]float32  { return &e8m0Tab }

// NVFP4: d[4] (UE4M3, one per 16 elements), qs[32]. Sub-block s holds
// elements 16s..16s+15: qs[8s+j] = code(16s+j) | code(16s+j+8)<<4.
func dequantNVFP4(b []byte, y []float32) {
	b = b[:36]
	y = y[:64]
	for s := 0; s < 4; s++ {
		d := ue4m3Tab[b[s]]
		qs := b[4+8*s : 12+8*s]
		yy := y[16*s : 16*s+16]
		for j := 0; j < 8; j++ {
			yy[j] = float32(KValuesFP4[qs[j]&0xF]) * d
			yy[j+8] = float32(KValuesFP4[qs[j]>>4]) * d
		}
	}
}

// MXFP4: e (E8M0), qs[16]; element j is the low nibble of qs[j], j+16 the
// high nibble.
func dequantMXFP4(b []byte, y []float32) {
	b = b[:17]
	y = y[:32]
	d := e8m0Tab[b[0]]
	qs := b[1:17]
	for j := 0; j < 16; j++ {
		y[j] = float32(KValuesFP4[qs[j]&0xF]) * d
		y[j+16] = float32(KValuesFP4[qs[j]>>4]) * d
	}
}

// ScaleTensorName is the name of the float32 second-level scale tensor that
// llama.cpp's converter writes beside an NVFP4 weight (ModelOpt's
// weight_scale_2): "blk.0.ffn_up_exps.weight" -> "blk.0.ffn_up_exps.scale",
// shape [1] for a dense weight, [n_expert] for stacked experts. The
// converter omits trivial (1.0) scales; absent means 1.
func ScaleTensorName(weight string) string {
	if !strings.Contains(weight, ".weight") {
		return weight + ".scale"
	}
	return strings.ReplaceAll(weight, ".weight", ".scale")
}

// FP32ToUE4M3 encodes x as an NVFP4 block-scale byte, rounding as
// ggml_fp32_to_ue4m3 does (non-positive and NaN give 0, saturating at 448
// = 0x7E; never the NaN code 0x7F).
func FP32ToUE4M3(x float32) byte {
	if !(x > 0) {
		return 0
	}
	x = min(x, 448)
	bits := math.Float32bits(x)
	exp := int(bits>>23&0xFF) - 127 + 7
	if exp <= 0 {
		m := int(x*512 + 0.5)
		return byte(min(m, 7)) // m < 1 gives 0
	}
	if exp >= 15 {
		return 0x7E
	}
	man := int(bits>>20&7) + int(bits>>19&1)
	if man > 7 {
		man = 0
		exp++
		if exp >= 15 {
			return 0x7E
		}
	}
	return byte(exp<<3 | man)
}

// fp4Mids are the midpoints between consecutive doubled E2M1 magnitudes.
var fp4Mids = [7]float32{0.5, 1.5, 2.5, 3.5, 5, 7, 10}

// bestFP4 is the code whose doubled value times d is nearest x, ties to
// the smaller magnitude, and 0 for zero, NaN, ±Inf or d = 0: ggml's
// best_index_mxfp4 (a search over the 16 codes, first wins) by thresholds.
// m·d is exact for every UE4M3/E8M0 scale, so the two agree except where
// the reference's rounded errors tie within an ulp of a midpoint.
func bestFP4(x, d float32) byte {
	var thr fp4Thresholds
	thr.set(d)
	return thr.code(x)
}

// fp4Thresholds are the midpoints times one block scale (all +Inf when the
// scale is not positive, so every element gets code 0).
type fp4Thresholds [7]float32

func (t *fp4Thresholds) set(d float32) {
	for i, m := range fp4Mids {
		if d > 0 {
			t[i] = m * d
		} else {
			t[i] = float32(math.Inf(1))
		}
	}
}

func (t *fp4Thresholds) code(x float32) byte {
	a := abs32(x)
	if a > math.MaxFloat32 { // every error ties (or is NaN): code 0
		return 0
	}
	// The thresholds increase, so the count of those below a is the
	// magnitude's index (branch-free: the compiler emits SETcc).
	j := b2u(a > t[0]) + b2u(a > t[1]) + b2u(a > t[2]) + b2u(a > t[3]) +
		b2u(a > t[4]) + b2u(a > t[5]) + b2u(a > t[6])
	if j > 0 && x < 0 {
		j |= 8
	}
	return j
}

func b2u(b bool) byte {
	var x byte
	if b {
		x = 1
	}
	return x
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// quantNVFP4 follows ggml's quantize_row_nvfp4_ref: per 16 elements the
// scale encodes amax/6 and each element takes the nearest code.
func quantNVFP4(x []float32, b []byte) {
	x = x[:64]
	b = b[:36]
	for s := 0; s < 4; s++ {
		xb := x[16*s : 16*s+16]
		var amax float32
		for _, v := range xb {
			amax = max(amax, abs32(v))
		}
		ue := FP32ToUE4M3(amax / 6)
		b[s] = ue
		var thr fp4Thresholds
		thr.set(ue4m3Tab[ue])
		for j := 0; j < 8; j++ {
			b[4+8*s+j] = thr.code(xb[j]) | thr.code(xb[j+8])<<4
		}
	}
}

// quantMXFP4 follows ggml's quantize_row_mxfp4_ref: e = floor(log2 amax) - 2
// + 127 (0 for an all-zero block), nearest codes.
func quantMXFP4(x []float32, b []byte) {
	x = x[:32]
	b = b[:17]
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	var e byte
	if amax > 0 {
		// floorf(log2f(amax)): log2 rounded to float32 first, as in C
		e = byte(int(math.Floor(float64(float32(math.Log2(float64(amax)))))) - 2 + 127)
	}
	b[0] = e
	var thr fp4Thresholds
	thr.set(e8m0Tab[e])
	for j := 0; j < 16; j++ {
		b[1+j] = thr.code(x[j]) | thr.code(x[j+16])<<4
	}
}
