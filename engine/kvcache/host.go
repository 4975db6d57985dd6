package kvcache

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// HostStore is the KV pool in host memory, laid out exactly as Layout
// documents, with the CPU reference write (quantize + scatter) and paged
// attention. It holds no page-allocation state: page ids come from a Pool.
//
// WriteRow calls for different (layer, page, slot) are independent; Attend
// only reads and may run concurrently with other Attend calls and with
// writes to slots it does not read.
type HostStore struct {
	l      Layout
	layers []hostLayer
}

type hostLayer struct {
	k, v   []byte    // codes, [page][kv_head][slot][head_dim], 16-bit little-endian
	ks, vs []float32 // dynamic FP8 scales, [page][kv_head][slot]; nil otherwise
	// static FP8 scales of this layer, [kv_head]; nil otherwise
	kStatic, vStatic []float32
}

// NewHostStore allocates a zeroed pool for l (all codes 0, all scales 0).
func NewHostStore(l Layout) (*HostStore, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := CheckHostMemory(l); err != nil {
		return nil, err
	}
	s := &HostStore{l: l, layers: make([]hostLayer, l.Layers)}
	kt, vt := l.KType(), l.VType()
	for i := range s.layers {
		hl := &s.layers[i]
		hl.k, hl.v = make([]byte, l.LayerElems()*kt.ElemBytes()), make([]byte, l.LayerElems()*vt.ElemBytes())
		if n := l.LayerScales(); n > 0 {
			if l.KHasScales() {
				hl.ks = make([]float32, n)
			}
			if l.VHasScales() {
				hl.vs = make([]float32, n)
			}
		}
		if l.Scales == StaticScales {
			if kt.IsFP8() {
				hl.kStatic = l.KScale[i*l.KVHeads : (i+1)*l.KVHeads]
			}
			if vt.IsFP8() {
				hl.vStatic = l.VScale[i*l.KVHeads : (i+1)*l.KVHeads]
			}
		}
	}
	return s, nil
}

// Layout returns the geometry the store was built with.
func (s *HostStore) Layout() Layout { return s.l }

// Raw returns views (not copies) of one layer's storage: the K and V codes
// exactly as laid out (16-bit codes little-endian), and the K and V scales:
// per (page, kv head, slot) for dynamic FP8, the layer's [kv_head] static
// scales for static FP8, nil for a 16-bit half. Treat them as read-only.
func (s *HostStore) Raw(layer int) (kCodes, vCodes []byte, kScales, vScales []float32) {
	hl := &s.layers[layer]
	kScales, vScales = hl.ks, hl.vs
	if kScales == nil {
		kScales = hl.kStatic
	}
	if vScales == nil {
		vScales = hl.vStatic
	}
	return hl.k, hl.v, kScales, vScales
}

func (s *HostStore) checkSlot(layer, page, slot int) {
	if layer < 0 || layer >= s.l.Layers || page < 0 || page >= s.l.Pages || slot < 0 || slot >= s.l.PageSize {
		panic(fmt.Sprintf("kvcache: (layer %d, page %d, slot %d) outside the pool (%d layers, %d pages of %d)",
			layer, page, slot, s.l.Layers, s.l.Pages, s.l.PageSize))
	}
}

// WriteRow stores one token's K and V (each [KVHeads*HeadDim] float32, K
// already rotated) at (page, slot) of layer, quantizing per (token, kv head).
//
// Dynamic FP8: scale = amax/FP8_MAX (float32 division), codes =
// Encode(x/scale) (float32 division, RNE, saturating); an all-zero row
// stores scale 0 and codes 0. Static FP8: codes = Encode(x/static_scale).
// 16-bit: codes = Encode(x), RNE.
func (s *HostStore) WriteRow(layer, page, slot int, k, v []float32) {
	s.checkSlot(layer, page, slot)
	hw := s.l.KVHeads * s.l.HeadDim
	if len(k) != hw || len(v) != hw {
		panic(fmt.Sprintf("kvcache: WriteRow got k %d, v %d values; want kv_heads*head_dim = %d", len(k), len(v), hw))
	}
	hl := &s.layers[layer]
	d := s.l.HeadDim
	for h := range s.l.KVHeads {
		idx := s.l.CodeIndex(page, h, slot)
		si := s.l.ScaleIndex(page, h, slot)
		encodeRow(s.l.KType(), hl.k, hl.ks, hl.kStatic, idx, si, h, k[h*d:(h+1)*d])
		encodeRow(s.l.VType(), hl.v, hl.vs, hl.vStatic, idx, si, h, v[h*d:(h+1)*d])
	}
}

// encodeRow stores one row of one half (K or V) in dtype dt at code index
// idx: 16-bit codes, or FP8 codes with the row's dynamic scale at
// tokScales[si] (when tokScales is set) or against static[kvHead].
func encodeRow(dt DType, codes []byte, tokScales, static []float32, idx, si, kvHead int, src []float32) {
	d := len(src)
	switch dt {
	case BF16:
		putRow16(codes[2*idx:2*(idx+d)], src, EncodeBF16)
	case F16:
		putRow16(codes[2*idx:2*(idx+d)], src, EncodeF16)
	case FP8E4M3, FP8E5M2:
		enc := EncodeE4M3
		if dt == FP8E5M2 {
			enc = EncodeE5M2
		}
		if tokScales != nil {
			tokScales[si] = quantizeDynamic(codes[idx:idx+d], src, dt.FP8Max(), enc)
		} else {
			quantizeStatic(codes[idx:idx+d], src, static[kvHead], enc)
		}
	}
}

func putRow16(dst []byte, src []float32, enc func(float32) uint16) {
	for i, x := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], enc(x))
	}
}

// DynamicScale is the per-row scale rule: amax/fp8Max in float32; 0 for
// an all-zero row. Exported so kernel tests can state the rule once.
func DynamicScale(row []float32, fp8Max float32) float32 {
	var amax float32
	for _, x := range row {
		// NaN is not ordered, so a NaN row keeps the finite amax; its NaN
		// values still encode to the NaN code.
		if a := float32(math.Abs(float64(x))); a > amax {
			amax = a
		}
	}
	return amax / fp8Max
}

func quantizeDynamic(dst []byte, src []float32, fp8Max float32, enc func(float32) uint8) float32 {
	scale := DynamicScale(src, fp8Max)
	if scale == 0 {
		clear(dst)
		return 0
	}
	for i, x := range src {
		dst[i] = enc(x / scale)
	}
	return scale
}

func quantizeStatic(dst []byte, src []float32, scale float32, enc func(float32) uint8) {
	for i, x := range src {
		dst[i] = enc(x / scale)
	}
}

// attendBufs is per-call scratch so Attend needs no locks.
type attendBufs struct {
	scores []float32 // [group][n]
	row    []float32 // decoded rows of one page, [page_size][head_dim]
	rs     []float32 // their scales, [page_size]
}

var attendPool = sync.Pool{New: func() any { return new(attendBufs) }}

// Attend computes attention of one query row q ([heads*HeadDim], already
// rotated) over the first n tokens of a sequence whose page table is
// pages (token t at page pages[t/PageSize], slot t%PageSize), writing out
// [heads*HeadDim]. Query head h reads kv head h/(heads/KVHeads) (GQA).
// scores = scale * q·k; softmax is max-subtracted, all in float32.
//
// Codes are dequantized row by row as they are read (value = code value *
// row scale; the scale is applied to the dot product and to the softmax
// weight rather than to each element, which is the same number up to
// float32 rounding); no 16-bit copy of the cache is made. n == 0 writes
// zeros.
func (s *HostStore) Attend(out, q []float32, layer int, pages []int32, n, heads int, scale float32) {
	s.AttendKVHeads(out, q, layer, pages, n, heads, 0, s.l.KVHeads, scale)
}

// AttendKVHeads is Attend restricted to KV heads [kh0, kh1): it writes only
// the query heads of those groups in out. Calls on disjoint ranges may run
// concurrently, so one decode row can be spread over threads; the result
// is bitwise the same as Attend's.
func (s *HostStore) AttendKVHeads(out, q []float32, layer int, pages []int32, n, heads, kh0, kh1 int, scale float32) {
	l := s.l
	if kh0 < 0 || kh1 > l.KVHeads || kh0 >= kh1 {
		panic(fmt.Sprintf("kvcache: AttendKVHeads over kv heads [%d, %d) of %d", kh0, kh1, l.KVHeads))
	}
	d := l.HeadDim
	if heads <= 0 || heads%l.KVHeads != 0 {
		panic(fmt.Sprintf("kvcache: Attend with %d query heads over %d kv heads; heads must be a positive multiple", heads, l.KVHeads))
	}
	if len(q) != heads*d || len(out) != heads*d {
		panic(fmt.Sprintf("kvcache: Attend got q %d, out %d values; want heads*head_dim = %d", len(q), len(out), heads*d))
	}
	if n < 0 || n > len(pages)*l.PageSize {
		panic(fmt.Sprintf("kvcache: Attend over %d tokens with a page table of %d pages of %d", n, len(pages), l.PageSize))
	}
	if layer < 0 || layer >= l.Layers {
		panic(fmt.Sprintf("kvcache: layer %d outside 0..%d", layer, l.Layers-1))
	}
	for _, p := range pages[:(n+l.PageSize-1)/l.PageSize] {
		if p < 0 || int(p) >= l.Pages {
			panic(fmt.Sprintf("kvcache: page id %d outside the pool of %d pages", p, l.Pages))
		}
	}
	group := heads / l.KVHeads
	if n == 0 {
		clear(out[kh0*group*d : kh1*group*d])
		return
	}
	bufs := attendPool.Get().(*attendBufs)
	defer attendPool.Put(bufs)
	if cap(bufs.scores) < group*n {
		bufs.scores = make([]float32, group*n)
	}
	if cap(bufs.row) < l.PageSize*d {
		bufs.row = make([]float32, l.PageSize*d)
	}
	if cap(bufs.rs) < l.PageSize {
		bufs.rs = make([]float32, l.PageSize)
	}
	scores, blk, rsb := bufs.scores[:group*n], bufs.row[:l.PageSize*d], bufs.rs[:l.PageSize]
	hl := &s.layers[layer]
	shift := pageShift(l.PageSize)

	for kh := kh0; kh < kh1; kh++ {
		q0 := kh * group // first query head of this group
		// Pass 1: scores for all tokens, each K row decoded once per group,
		// a page's rows at a time.
		for t0 := 0; t0 < n; t0 += l.PageSize {
			cnt := min(l.PageSize, n-t0)
			s.decodeRows(blk[:cnt*d], rsb[:cnt], l.KType(), hl.k, hl.ks, hl.kStatic, int(pages[t0>>shift]), kh, 0)
			for i := range cnt {
				row, t := blk[i*d:(i+1)*d], t0+i
				for g := range group {
					scores[g*n+t] = dot(q[(q0+g)*d:(q0+g+1)*d], row) * rsb[i] * scale
				}
			}
		}
		// Softmax per query head, float32, max-subtracted.
		for g := range group {
			sc := scores[g*n : (g+1)*n]
			m := float32(math.Inf(-1))
			for _, x := range sc {
				if x > m {
					m = x
				}
			}
			var sum float32
			for t, x := range sc {
				e := float32(math.Exp(float64(x - m)))
				sc[t] = e
				sum += e
			}
			inv := 1 / sum
			for t := range sc {
				sc[t] *= inv
			}
			clear(out[(q0+g)*d : (q0+g+1)*d])
		}
		// Pass 2: weighted sum of V rows, each decoded once per group.
		for t0 := 0; t0 < n; t0 += l.PageSize {
			cnt := min(l.PageSize, n-t0)
			s.decodeRows(blk[:cnt*d], rsb[:cnt], l.VType(), hl.v, hl.vs, hl.vStatic, int(pages[t0>>shift]), kh, 0)
			for i := range cnt {
				row, t := blk[i*d:(i+1)*d], t0+i
				for g := range group {
					axpy(out[(q0+g)*d:(q0+g+1)*d], row, scores[g*n+t]*rsb[i])
				}
			}
		}
	}
}

// decodeRow widens the codes of (page, kvHead, slot) of one half (K or V,
// stored in dt) into row and returns the row's scale (1 for 16-bit
// dtypes). K and V go through it separately, each in its own dtype, so
// the dot and axpy loops of Attend are the same for every K/V pairing.
func (s *HostStore) decodeRow(row []float32, dt DType, codes []byte, tokScales, static []float32, page, kvHead, slot int) float32 {
	var rs [1]float32
	s.decodeRows(row, rs[:], dt, codes, tokScales, static, page, kvHead, slot)
	return rs[0]
}

// decodeRows is decodeRow for len(rs) consecutive slots from slot0 of one
// (page, kvHead), contiguous in the pool: rows gets len(rs) rows of
// head_dim values, rs their scales. One call per page instead of one per
// token keeps the per-call work (the kernels' constant set-up, the checks)
// off the per-token path of decode attention; the values are the same.
func (s *HostStore) decodeRows(rows, rs []float32, dt DType, codes []byte, tokScales, static []float32, page, kvHead, slot0 int) {
	idx := s.l.CodeIndex(page, kvHead, slot0)
	d := len(rows)
	switch dt {
	case BF16:
		decodeBF16(rows, codes[2*idx:2*(idx+d)])
	case F16:
		src := codes[2*idx : 2*(idx+d)]
		lut := f16Table()
		for i := range rows {
			rows[i] = lut[binary.LittleEndian.Uint16(src[2*i:])]
		}
	default:
		decodeFP8(rows, codes[idx:idx+d], dt == FP8E4M3)
		if tokScales != nil {
			si := s.l.ScaleIndex(page, kvHead, slot0)
			copy(rs, tokScales[si:si+len(rs)])
		} else {
			for i := range rs {
				rs[i] = static[kvHead]
			}
		}
		return
	}
	for i := range rs {
		rs[i] = 1
	}
}

func pageShift(p int) int {
	sh := 0
	for 1<<sh < p {
		sh++
	}
	return sh
}

// CopyPage copies page src to page dst in every layer: K and V codes and,
// with dynamic FP8, their scales. It implements PageCopier.
func (s *HostStore) CopyPage(dst, src int32) {
	l := s.l
	if src < 0 || int(src) >= l.Pages || dst < 0 || int(dst) >= l.Pages {
		panic(fmt.Sprintf("kvcache: CopyPage(%d, %d) outside the pool of %d pages", dst, src, l.Pages))
	}
	kb, vb := l.PageElems()*l.KType().ElemBytes(), l.PageElems()*l.VType().ElemBytes()
	sn := l.KVHeads * l.PageSize
	for i := range s.layers {
		hl := &s.layers[i]
		copy(hl.k[int(dst)*kb:int(dst+1)*kb], hl.k[int(src)*kb:int(src+1)*kb])
		copy(hl.v[int(dst)*vb:int(dst+1)*vb], hl.v[int(src)*vb:int(src+1)*vb])
		if hl.ks != nil {
			copy(hl.ks[int(dst)*sn:int(dst+1)*sn], hl.ks[int(src)*sn:int(src+1)*sn])
		}
		if hl.vs != nil {
			copy(hl.vs[int(dst)*sn:int(dst+1)*sn], hl.vs[int(src)*sn:int(src+1)*sn])
		}
	}
}

// dotGo is a float32 dot product with four partial sums (more accurate and
// faster than one running sum).
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpyGo adds w*x to y.
func axpyGo(y, x []float32, w float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += w * x[i]
		y[i+1] += w * x[i+1]
		y[i+2] += w * x[i+2]
		y[i+3] += w * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += w * x[i]
	}
}

func decodeBF16Go(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

func decodeLUTGo(dst []float32, src []byte, lut *[256]float32) {
	src = src[:len(dst)]
	for i, c := range src {
		dst[i] = lut[c]
	}
}

// ReadRow dequantizes the K and V rows stored at (layer, page, slot) into
// k and v ([KVHeads*HeadDim] each): code value times its scale, exactly
// the values Attend uses. With it a 16-bit pool can feed a Calibrator, or
// be re-encoded into a pool of another dtype without recomputing.
func (s *HostStore) ReadRow(layer, page, slot int, k, v []float32) {
	s.checkSlot(layer, page, slot)
	d := s.l.HeadDim
	if len(k) != s.l.KVHeads*d || len(v) != s.l.KVHeads*d {
		panic(fmt.Sprintf("kvcache: ReadRow got k %d, v %d values; want kv_heads*head_dim = %d", len(k), len(v), s.l.KVHeads*d))
	}
	hl := &s.layers[layer]
	for h := range s.l.KVHeads {
		for _, x := range [2]struct {
			dst          []float32
			dt           DType
			codes        []byte
			tok, statics []float32
		}{{k[h*d : (h+1)*d], s.l.KType(), hl.k, hl.ks, hl.kStatic}, {v[h*d : (h+1)*d], s.l.VType(), hl.v, hl.vs, hl.vStatic}} {
			sc := s.decodeRow(x.dst, x.dt, x.codes, x.tok, x.statics, page, h, slot)
			if sc != 1 {
				for i := range x.dst {
					x.dst[i] *= sc
				}
			}
		}
	}
}
