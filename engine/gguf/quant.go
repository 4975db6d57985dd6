package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src as tensor type t. len(src) must be a multiple of t's
// block size. The legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) follow ggml's
// reference quantizers and produce the same bytes; the k-quants use a
// simple deterministic scale choice (no search), so their bytes differ from
// llama.cpp's but decode with the standard block layout.
func Quantize(t Type, src []float32) ([]byte, error) {
	q, ok := blockEncoders[t]
	if !ok {
		return nil, fmt.Errorf("gguf: quantize: unsupported tensor type %s", t)
	}
	be, bb := t.BlockElems(), t.BlockBytes()
	if len(src)%be != 0 {
		return nil, fmt.Errorf("gguf: quantize %s: %d elements is not a multiple of the block size %d", t, len(src), be)
	}
	out := make([]byte, len(src)/be*bb)
	QuantizeInto(t, src, out, q)
	return out, nil
}

// QuantizeInto is Quantize writing into dst, which must hold exactly the
// encoded size; enc must be from QuantizeSupported's encoder table (pass nil
// to look it up). It exists so that large generators can reuse buffers.
func QuantizeInto(t Type, src []float32, dst []byte, enc func(x []float32, b []byte)) {
	if enc == nil {
		enc = blockEncoders[t]
	}
	be, bb := t.BlockElems(), t.BlockBytes()
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
		return
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
		return
	}
	for i := 0; i < len(src)/be; i++ {
		enc(src[i*be:(i+1)*be], dst[i*bb:(i+1)*bb])
	}
}

// QuantizeSupported reports whether Quantize handles t.
func QuantizeSupported(t Type) bool { _, ok := blockEncoders[t]; return ok }

var blockEncoders = map[Type]func(x []float32, b []byte){
	F32:  func(x []float32, b []byte) { binary.LittleEndian.PutUint32(b, math.Float32bits(x[0])) },
	F16:  func(x []float32, b []byte) { binary.LittleEndian.PutUint16(b, F32ToF16(x[0])) },
	BF16: func(x []float32, b []byte) { binary.LittleEndian.PutUint16(b, F32ToBF16(x[0])) },
	Q4_0: quantQ4_0, Q4_1: quantQ4_1, Q5_0: quantQ5_0, Q5_1: quantQ5_1, Q8_0: quantQ8_0,
	Q4_K: quantQ4_K, Q5_K: quantQ5_K, Q6_K: quantQ6_K,
	MXFP4: quantMXFP4, NVFP4: quantNVFP4,
}

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, F32ToF16(f)) }

// inv is 1/d, or 0 when d is 0 (an all-zero block).
func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// roundAway rounds half away from zero, like C's roundf.
func roundAway(x float32) float32 { return float32(math.Round(float64(x))) }

// clampTrunc converts x (already offset to be non-negative in range) to an
// integer in [0, hi], truncating like the C reference's (int) cast.
func clampTrunc(x float32, hi int) byte {
	v := int(x)
	if x < 0 {
		v = 0
	}
	return byte(min(max(v, 0), hi))
}

// signedAbsMax returns the element with the largest magnitude (first on ties).
func signedAbsMax(x []float32) float32 {
	var amax, m float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, m = a, v
		}
	}
	return m
}

func minMax(x []float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

func quantQ8_0(x []float32, b []byte) {
	var amax float32
	for _, v := range x[:32] {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	id := inv(d)
	putF16(b, d)
	for j, v := range x[:32] {
		b[2+j] = byte(int8(roundAway(v * id)))
	}
}

func quantQ4_0(x []float32, b []byte) {
	d := signedAbsMax(x[:32]) / -8
	id := inv(d)
	putF16(b, d)
	qs := b[2:18]
	for j := 0; j < 16; j++ {
		q0 := clampTrunc(float32(x[j]*id)+8.5, 15)
		q1 := clampTrunc(float32(x[j+16]*id)+8.5, 15)
		qs[j] = q0 | q1<<4
	}
}

func quantQ4_1(x []float32, b []byte) {
	lo, hi := minMax(x[:32])
	d := (hi - lo) / 15
	id := inv(d)
	putF16(b, d)
	putF16(b[2:], lo)
	qs := b[4:20]
	for j := 0; j < 16; j++ {
		q0 := clampTrunc(float32((x[j]-lo)*id)+0.5, 15)
		q1 := clampTrunc(float32((x[j+16]-lo)*id)+0.5, 15)
		qs[j] = q0 | q1<<4
	}
}

func quantQ5_0(x []float32, b []byte) {
	d := signedAbsMax(x[:32]) / -16
	id := inv(d)
	putF16(b, d)
	var qh uint32
	qs := b[6:22]
	for j := 0; j < 16; j++ {
		q0 := clampTrunc(float32(x[j]*id)+16.5, 31)
		q1 := clampTrunc(float32(x[j+16]*id)+16.5, 31)
		qs[j] = q0&0xf | q1<<4
		qh |= uint32(q0>>4)<<uint(j) | uint32(q1>>4)<<uint(j+16)
	}
	binary.LittleEndian.PutUint32(b[2:], qh)
}

func quantQ5_1(x []float32, b []byte) {
	lo, hi := minMax(x[:32])
	d := (hi - lo) / 31
	id := inv(d)
	putF16(b, d)
	putF16(b[2:], lo)
	var qh uint32
	qs := b[8:24]
	for j := 0; j < 16; j++ {
		q0 := clampTrunc(float32((x[j]-lo)*id)+0.5, 31)
		q1 := clampTrunc(float32((x[j+16]-lo)*id)+0.5, 31)
		qs[j] = q0&0xf | q1<<4
		qh |= uint32(q0>>4)<<uint(j) | uint32(q1>>4)<<uint(j+16)
	}
	binary.LittleEndian.PutUint32(b[4:], qh)
}

// kScales chooses the 6-bit scales and mins of the eight 32-element
// sub-blocks of a Q4_K/Q5_K super-block with nmax quant levels (15 or 31):
// each sub-block maps [min(lo,0), hi] onto [0, nmax]. Mins are rounded to
// nearest, then each scale is rounded up so that the sub-block's maximum
// stays representable. It returns the fp16-rounded super scales too.
func kScales(x []float32, nmax float32) (d, dmin float32, sc, mn [8]byte) {
	var scale, neg [8]float32
	var maxScale, maxNeg float32
	for j := 0; j < 8; j++ {
		lo, hi := minMax(x[32*j : 32*j+32])
		lo = min(lo, 0)
		neg[j] = -lo
		scale[j] = (hi - lo) / nmax
		maxScale, maxNeg = max(maxScale, scale[j]), max(maxNeg, neg[j])
	}
	d = F16ToF32(F32ToF16(maxScale / 63))
	dmin = F16ToF32(F32ToF16(maxNeg / 63))
	for j := 0; j < 8; j++ {
		m := float32(0)
		if dmin > 0 {
			m = min(roundAway(neg[j]/dmin), 63)
		}
		mn[j] = byte(m)
		if d > 0 {
			hi := scale[j]*nmax - neg[j] // the sub-block maximum
			need := (hi + dmin*m) / nmax
			sc[j] = byte(min(max(float32(math.Ceil(float64(need/d))), 0), 63))
		}
	}
	return d, dmin, sc, mn
}

// packScalesK4 stores eight 6-bit scales and mins in the 12-byte k-quant layout.
func packScalesK4(b []byte, sc, mn [8]byte) {
	for j := 0; j < 4; j++ {
		b[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		b[j+4] = mn[j]&63 | (mn[j+4]>>4)<<6
		b[j+8] = sc[j+4]&0xf | (mn[j+4]&0xf)<<4
	}
}

// kQuants computes the level of every element for Q4_K/Q5_K.
func kQuants(x []float32, d, dmin float32, sc, mn [8]byte, nmax int, q *[256]byte) {
	for j := 0; j < 8; j++ {
		dl := d * float32(sc[j])
		ml := dmin * float32(mn[j])
		id := inv(dl)
		for l := 0; l < 32; l++ {
			v := roundAway(float32(x[32*j+l]+ml) * id)
			q[32*j+l] = byte(min(max(int(v), 0), nmax))
		}
	}
}

func quantQ4_K(x []float32, b []byte) {
	d, dmin, sc, mn := kScales(x[:256], 15)
	putF16(b, d)
	putF16(b[2:], dmin)
	packScalesK4(b[4:16], sc, mn)
	var q [256]byte
	kQuants(x, d, dmin, sc, mn, 15, &q)
	qs := b[16:144]
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			qs[32*j+l] = q[64*j+l] | q[64*j+l+32]<<4
		}
	}
}

func quantQ5_K(x []float32, b []byte) {
	d, dmin, sc, mn := kScales(x[:256], 31)
	putF16(b, d)
	putF16(b[2:], dmin)
	packScalesK4(b[4:16], sc, mn)
	var q [256]byte
	kQuants(x, d, dmin, sc, mn, 31, &q)
	qh := b[16:48]
	qs := b[48:176]
	clear(qh)
	for j := 0; j < 4; j++ {
		for l := 0; l < 32; l++ {
			lo, hi := q[64*j+l], q[64*j+l+32]
			qs[32*j+l] = lo&0xf | hi<<4
			qh[l] |= (lo>>4)<<uint(2*j) | (hi>>4)<<uint(2*j+1)
		}
	}
}

// quantQ6_K: sixteen 16-element sub-blocks with int8 scales, levels -32..31.
func quantQ6_K(x []float32, b []byte) {
	var amax [16]float32
	var top float32
	for j := 0; j < 16; j++ {
		for _, v := range x[16*j : 16*j+16] {
			amax[j] = max(amax[j], float32(math.Abs(float64(v))))
		}
		top = max(top, amax[j])
	}
	// Levels run -32..31; using 31 for both signs keeps the scale symmetric.
	d := F16ToF32(F32ToF16(top / 31 / 127))
	ql := b[0:128]
	qh := b[128:192]
	scales := b[192:208]
	putF16(b[208:], d)
	var q [256]byte
	for j := 0; j < 16; j++ {
		s := float32(0)
		if d > 0 {
			s = min(float32(math.Ceil(float64(amax[j]/31/d))), 127)
		}
		scales[j] = byte(int8(s))
		id := inv(d * s)
		for l := 0; l < 16; l++ {
			v := roundAway(x[16*j+l] * id)
			q[16*j+l] = byte(min(max(int(v), -32), 31) + 32)
		}
	}
	clear(qh)
	for n := 0; n < 2; n++ {
		Q := q[128*n : 128*n+128]
		L := ql[64*n : 64*n+64]
		H := qh[32*n : 32*n+32]
		for l := 0; l < 32; l++ {
			L[l] = Q[l]&0xf | (Q[l+64]&0xf)<<4
			L[l+32] = Q[l+32]&0xf | (Q[l+96]&0xf)<<4
			H[l] = Q[l]>>4 | (Q[l+32]>>4)<<2 | (Q[l+64]>>4)<<4 | (Q[l+96]>>4)<<6
		}
	}
}
