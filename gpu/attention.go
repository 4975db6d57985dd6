package gpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// Kernel modules of the paged KV cache (kernels/kvwrite.cu, kernels/attention.cu).
const (
	kvWriteModule   = "kvwrite"
	attentionModule = "attention"
)

// attnHeadDims are the head dimensions attention.cu is instantiated for.
var attnHeadDims = []int{64, 80, 96, 128, 256}

// maxGroup is the largest GQA ratio one warp covers; larger groups are
// split into slices of maxGroup query heads (each slice reads the KV once).
const maxGroup = 8

// KVCache is the paged KV pool in device memory, laid out exactly as
// kvcache.Layout documents (codes [page][kv_head][slot][head_dim], dynamic
// FP8 scales [page][kv_head][slot] float32), plus the per-batch metadata
// and scratch its kernels use. All methods run on the device thread (*Ctx).
type KVCache struct {
	Layout kvcache.Layout

	// Splits forces the number of key chunks per sequence in Attend (0:
	// chosen from the batch and the device, see chooseSplits).
	Splits int
	// MinSplitTokens is the smallest key chunk auto-splitting makes (0: 256).
	MinSplitTokens int
	// Waves sizes auto-splitting to this many waves of resident CTAs (0: 1).
	Waves int
	// Prefill picks the kernel for sequences with at least faMinTokens new
	// tokens (PrefillDefault: $FTCHAT_PREFILL_ATTN, see attention_fa.go).
	Prefill PrefillKernel
	// FAWarps is the warps of an FA CTA, 4 or 8 (16 query rows each; other
	// values: $FTCHAT_FA_WARPS, else 8 where the shared memory holds them).
	FAWarps int

	layers []kvLayer
	static Buffer // static FP8 scales: K [Layers*KVHeads] then V

	meta     Buffer  // device copy of metaHost
	metaHost []int32 // seqs | page table | rowSeq | blocks, as last uploaded
	metaHpw  int     // heads per warp the uploaded blocks were built for
	metaFA   int     // tokens per FA tile the uploaded metadata was built for (0: none)
	scratch  []int32
	ws       Buffer // split partials: acc then (max, sum)

	faSmem   map[*Function]int // dynamic shared memory each FA kernel was opened up to
	lastFA   int               // FA tiles the last Attend launched (tests check the kernel ran)
	lastFAsp int               // and its key splits (benchmarks report them)

	attnName string // the decode kernel's name for Layout (attn_<dtypes>_d<dim>), made once

	ropeBuf Buffer
	ropeKey []float64 // Dim, Base, NeoX, Scale, FreqFactors... of ropeBuf
}

type kvLayer struct {
	buf              Buffer
	k, v, ks, vs     DevicePtr
	kBytes, vBytes   int64 // codes of each half
	ksBytes, vsBytes int64 // per-token scales of each half (dynamic FP8 only)
}

// AllocKV allocates a zeroed pool for l through the budgeted allocator
// (one allocation per layer: K codes, V codes, then the K and V per-token
// scales of the halves stored in dynamic FP8, as kvcache.HostStore has
// them). K and V may differ in dtype where kvcache.GPUPairSupported says
// so (a 16-bit K with an FP8 V).
func (c *Ctx) AllocKV(l kvcache.Layout) (*KVCache, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	kt, vt := l.KType(), l.VType()
	if !kvcache.GPUPairSupported(kt, vt) {
		// Every pair is its own set of attention kernels (attn_<k>_<v>_d<dim>);
		// attention.cu builds only the pairs kvcache.GPUPairs lists.
		return nil, fmt.Errorf("gpu: %w", kvcache.MixedOnGPUError(kt, vt))
	}
	if !slices.Contains(attnHeadDims, l.HeadDim) {
		return nil, fmt.Errorf("gpu: head_dim %d has no CUDA attention kernel; supported: %v", l.HeadDim, attnHeadDims)
	}
	if l.PageSize&(l.PageSize-1) != 0 {
		return nil, fmt.Errorf("gpu: page size %d is not a power of two", l.PageSize)
	}
	kCodes, vCodes, kScales, vScales := kvHalfBytes(l)
	if max(kCodes, vCodes)/int64(l.HeadDim) > math.MaxInt32 {
		return nil, fmt.Errorf("gpu: KV pool of %d pages x %d kv heads x %d tokens has more rows than the kernels index (2^31)", l.Pages, l.KVHeads, l.PageSize)
	}
	align := func(n int64) int64 { return (n + 255) &^ 255 }
	per := align(kCodes) + align(vCodes) + align(kScales) + align(vScales)
	kv := &KVCache{Layout: l}
	for i := range l.Layers {
		b, err := c.Alloc(per, fmt.Sprintf("KV cache layer %d (%s)", i, kvcache.FormatBytes(per)))
		if err != nil {
			kv.Free(c)
			return nil, err
		}
		if err := c.Memset8(b.Ptr, 0, per); err != nil {
			kv.Free(c)
			return nil, err
		}
		ly := kvLayer{buf: b, kBytes: kCodes, vBytes: vCodes, ksBytes: kScales, vsBytes: vScales}
		ly.k = b.Ptr
		ly.v = ly.k.Add(align(kCodes))
		next := ly.v.Add(align(vCodes))
		if kScales > 0 {
			ly.ks = next
			next = next.Add(align(kScales))
		}
		if vScales > 0 {
			ly.vs = next
		}
		kv.layers = append(kv.layers, ly)
	}
	if l.AnyFP8() && l.Scales == kvcache.StaticScales {
		// One [Layers*KVHeads] table per FP8 half (kvcache.PoolBytes counts
		// the same); a 16-bit half has none.
		var tables []float32
		kOff, vOff := -1, -1
		if kt.IsFP8() {
			kOff = len(tables)
			tables = append(tables, l.KScale...)
		}
		if vt.IsFP8() {
			vOff = len(tables)
			tables = append(tables, l.VScale...)
		}
		b, err := c.Alloc(int64(4*len(tables)), "KV static scales")
		if err != nil {
			kv.Free(c)
			return nil, err
		}
		kv.static = b
		if err := Upload(c, b.Ptr, tables); err != nil {
			kv.Free(c)
			return nil, err
		}
		for i := range kv.layers {
			if kOff >= 0 {
				kv.layers[i].ks = b.Ptr.Add(int64(4 * (kOff + i*l.KVHeads)))
			}
			if vOff >= 0 {
				kv.layers[i].vs = b.Ptr.Add(int64(4 * (vOff + i*l.KVHeads)))
			}
		}
	}
	return kv, nil
}

// kvHalfBytes is the size of one layer's K and V codes, each in its own
// dtype, and of their per-token scales (0 for a 16-bit or static half).
func kvHalfBytes(l kvcache.Layout) (kCodes, vCodes, kScales, vScales int64) {
	kCodes = int64(l.LayerElems()) * int64(l.KType().ElemBytes())
	vCodes = int64(l.LayerElems()) * int64(l.VType().ElemBytes())
	if l.KHasScales() {
		kScales = int64(l.LayerScales()) * 4
	}
	if l.VHasScales() {
		vScales = int64(l.LayerScales()) * 4
	}
	return kCodes, vCodes, kScales, vScales
}

// Free releases the pool and its scratch buffers.
func (kv *KVCache) Free(c *Ctx) error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, ly := range kv.layers {
		keep(c.Free(ly.buf))
	}
	kv.layers = nil
	for _, b := range []*Buffer{&kv.static, &kv.meta, &kv.ws, &kv.ropeBuf} {
		keep(c.Free(*b))
		*b = Buffer{}
	}
	kv.metaHost, kv.ropeKey = nil, nil
	return first
}

// LayerPtrs returns the device addresses of one layer's K codes, V codes
// and K, V scales (per token for dynamic FP8, the layer's [kv_head] static
// scales for static FP8, 0 for a 16-bit half), for copies and tests.
func (kv *KVCache) LayerPtrs(layer int) (k, v, ks, vs DevicePtr) {
	ly := kv.layers[layer]
	return ly.k, ly.v, ly.ks, ly.vs
}

// LayerBytes returns the sizes of one layer's K codes and of its K
// per-token scales (0 unless dynamic FP8); a pool of one dtype has V's
// the same (LayerHalfBytes gives both halves).
func (kv *KVCache) LayerBytes() (codes, scales int64) {
	return kv.layers[0].kBytes, kv.layers[0].ksBytes
}

// LayerHalfBytes returns the sizes of one layer's K and V codes and of
// their per-token scales (0 for a half that has none).
func (kv *KVCache) LayerHalfBytes() (kCodes, vCodes, kScales, vScales int64) {
	ly := kv.layers[0]
	return ly.kBytes, ly.vBytes, ly.ksBytes, ly.vsBytes
}

// batchMeta is the host form of a batch's kernel metadata: one int32 slice
// holding seqs (4 per sequence: first row, cached, new tokens, page-table
// offset), rowSeq (sequence of each row, -1 for none) and blocks (2 per row
// block: sequence, first new token). With FA tiles (faTok > 0 and a
// sequence of at least faMinTokens new tokens) it adds the FA tiles (2 per
// tile: sequence, first new token) and two rowSeq-like lists that name only
// the rows of the old kernel's blocks (oldRowOff) or of the FA tiles
// (faRowOff), for their split merges; without, both are rowOff. The
// concatenated page tables come last: every other offset then depends only
// on the batch's sequences, rows and blocks, not on how many pages they
// hold, so the kernels' pointer arguments stay the same from one decode
// step to the next (a sequence gaining a page no longer changes them) and
// the step's CUDA graphs replay instead of being captured again (issue 14:
// 16 sequences, one of which crosses a page boundary nearly every step,
// captured 3.4 graph chunks a step).
type batchMeta struct {
	words                          []int32
	seqOff, ptOff, rowOff, blkOff  int
	nseq, nblocks, rows, maxK, hpw int

	faTok, faOff, nfa, maxKFA int
	oldRowOff, faRowOff       int
}

// buildMeta validates b against the pool and rows and lays out its
// metadata for row blocks of 8/hpw tokens and, when faTok > 0, FA tiles of
// faTok tokens for the sequences of at least faMinTokens new tokens.
func (kv *KVCache) buildMeta(dst []int32, b *model.Batch, rows, hpw, faTok int) (batchMeta, error) {
	l := kv.Layout
	m := batchMeta{nseq: len(b.Seqs), rows: rows, hpw: hpw, faTok: faTok}
	isFA := func(s model.SeqSpan) bool { return faTok > 0 && s.NewTokens >= faMinTokens }
	if rows <= 0 {
		return m, fmt.Errorf("gpu: batch of %d rows", rows)
	}
	if len(b.Seqs) == 0 {
		return m, fmt.Errorf("gpu: batch has no sequences")
	}
	if len(b.Pos) != 0 && len(b.Pos) != rows {
		return m, fmt.Errorf("gpu: batch has %d positions for %d rows", len(b.Pos), rows)
	}
	tpb := maxGroup / hpw
	words := dst[:0]
	m.seqOff = 0
	ptLen := 0
	for i, s := range b.Seqs {
		if s.Offset < 0 || s.NewTokens < 0 || s.Cached < 0 || s.Offset+s.NewTokens > rows {
			return m, fmt.Errorf("gpu: sequence %d (offset %d, %d new tokens, %d cached) does not fit the batch of %d rows", i, s.Offset, s.NewTokens, s.Cached, rows)
		}
		total := s.Cached + s.NewTokens
		if need := (total + l.PageSize - 1) / l.PageSize; len(s.Pages) < need {
			return m, fmt.Errorf("gpu: sequence %d holds %d tokens but its page table has %d pages of %d", i, total, len(s.Pages), l.PageSize)
		}
		words = append(words, int32(s.Offset), int32(s.Cached), int32(s.NewTokens), int32(ptLen))
		ptLen += len(s.Pages)
		if isFA(s) {
			m.maxKFA = max(m.maxKFA, total)
		} else {
			m.maxK = max(m.maxK, total)
		}
		for _, p := range s.Pages {
			if p < 0 || int(p) >= l.Pages {
				return m, fmt.Errorf("gpu: sequence %d: page id %d outside the pool of %d pages", i, p, l.Pages)
			}
		}
	}
	m.rowOff = len(words)
	for range rows {
		words = append(words, -1)
	}
	for i, s := range b.Seqs {
		for r := s.Offset; r < s.Offset+s.NewTokens; r++ {
			if words[m.rowOff+r] != -1 {
				return m, fmt.Errorf("gpu: batch row %d belongs to two sequences", r)
			}
			if len(b.Pos) != 0 && int(b.Pos[r]) != s.Cached+r-s.Offset {
				return m, fmt.Errorf("gpu: batch row %d has position %d, but sequence %d puts it at %d", r, b.Pos[r], i, s.Cached+r-s.Offset)
			}
			words[m.rowOff+r] = int32(i)
		}
	}
	if len(words)%2 != 0 {
		words = append(words, 0) // blocks are read as int2: 8-byte aligned
	}
	m.blkOff = len(words)
	for i, s := range b.Seqs {
		if isFA(s) {
			continue
		}
		for t := 0; t < s.NewTokens; t += tpb {
			words = append(words, int32(i), int32(t))
			m.nblocks++
		}
	}
	m.faOff = len(words)
	for i, s := range b.Seqs {
		if !isFA(s) {
			continue
		}
		for t := 0; t < s.NewTokens; t += faTok {
			words = append(words, int32(i), int32(t))
			m.nfa++
		}
	}
	m.oldRowOff, m.faRowOff = m.rowOff, m.rowOff
	if m.nfa > 0 {
		m.oldRowOff = len(words)
		for r := range rows {
			si := words[m.rowOff+r]
			if si >= 0 && isFA(b.Seqs[si]) {
				si = -1
			}
			words = append(words, si)
		}
		m.faRowOff = len(words)
		for r := range rows {
			si := words[m.rowOff+r]
			if si >= 0 && !isFA(b.Seqs[si]) {
				si = -1
			}
			words = append(words, si)
		}
	}
	m.ptOff = len(words)
	for _, s := range b.Seqs {
		words = append(words, s.Pages...)
	}
	m.words = words
	return m, nil
}

// upload puts m's words on the device unless they equal the last upload
// (every layer of a step shares one batch).
func (kv *KVCache) upload(c *Ctx, m batchMeta) error {
	if slices.Equal(m.words, kv.metaHost) && kv.meta.Ptr != 0 {
		return nil
	}
	need := int64(len(m.words)) * 4
	if kv.meta.Size < need {
		if err := c.Free(kv.meta); err != nil {
			return err
		}
		kv.meta = Buffer{}
		b, err := c.Alloc(max(2*need, 4096), "attention batch metadata")
		if err != nil {
			return err
		}
		kv.meta = b
	}
	if err := Upload(c, kv.meta.Ptr, m.words); err != nil {
		kv.metaHost = nil
		return err
	}
	kv.metaHost = append(kv.metaHost[:0], m.words...)
	kv.metaHpw = m.hpw
	kv.metaFA = m.faTok
	return nil
}

// Prepare uploads the metadata of batch b (rows rows, heads query heads)
// now, so that the Write and Attend calls of a step that follow (or a
// captured CUDA graph of them, whose kernels read the same device buffer)
// need no upload. Keep Splits fixed while replaying a graph.
func (kv *KVCache) Prepare(c *Ctx, b *model.Batch, rows, heads int) error {
	l := kv.Layout
	if heads <= 0 || heads%l.KVHeads != 0 {
		return fmt.Errorf("gpu: %d query heads over %d kv heads; heads must be a positive multiple", heads, l.KVHeads)
	}
	hpw, faTok := kv.attnShape(c, heads)
	m, err := kv.buildMeta(kv.scratch, b, rows, hpw, faTok)
	kv.scratch = m.words
	if err != nil {
		return err
	}
	return kv.upload(c, m)
}

func (kv *KVCache) metaPtrs(m batchMeta) (seqs, pt, rowSeq, blocks DevicePtr) {
	p := kv.meta.Ptr
	return p.Add(int64(4 * m.seqOff)), p.Add(int64(4 * m.ptOff)), p.Add(int64(4 * m.rowOff)), p.Add(int64(4 * m.blkOff))
}

func (kv *KVCache) checkLayer(layer int) error {
	if layer < 0 || layer >= len(kv.layers) {
		return fmt.Errorf("gpu: KV layer %d outside 0..%d", layer, len(kv.layers)-1)
	}
	return nil
}

// dtypeCode is the KV_* code of d in kernels/kvwrite.cu and attention.cu.
func dtypeCode(d kvcache.DType) int {
	switch d {
	case kvcache.F16:
		return 1
	case kvcache.FP8E4M3:
		return 2
	case kvcache.FP8E5M2:
		return 3
	}
	return 0
}

// kernelDTypes is the dtype part of the attention kernels' names:
// attn_<dtype>_d<dim> when K and V agree, attn_<k>_<v>_d<dim> when not.
func kernelDTypes(l kvcache.Layout) string {
	names := [...]string{"bf16", "f16", "e4m3", "e5m2"}
	k, v := names[dtypeCode(l.KType())], names[dtypeCode(l.VType())]
	if k == v {
		return k
	}
	return k + "_" + v
}

func log2(n int) int {
	s := 0
	for 1<<s < n {
		s++
	}
	return s
}

func (kv *KVCache) ropeTable(c *Ctx, r model.Rope) (DevicePtr, error) {
	if r.Dim == 0 {
		return 0, nil
	}
	if r.Dim < 0 || r.Dim%2 != 0 || r.Dim > kv.Layout.HeadDim {
		return 0, fmt.Errorf("gpu: RoPE over %d dims of head_dim %d; need an even count up to head_dim", r.Dim, kv.Layout.HeadDim)
	}
	if r.FreqFactors != nil && len(r.FreqFactors) != r.Dim/2 {
		return 0, fmt.Errorf("gpu: RoPE has %d frequency factors; need dim/2 = %d", len(r.FreqFactors), r.Dim/2)
	}
	neox := 0.0
	if r.NeoX {
		neox = 1
	}
	key := []float64{float64(r.Dim), r.Base, neox, float64(r.Scale)}
	for _, f := range r.FreqFactors {
		key = append(key, float64(f))
	}
	if slices.Equal(key, kv.ropeKey) {
		return kv.ropeBuf.Ptr, nil
	}
	inv := r.InvFreqs()
	if kv.ropeBuf.Size < int64(8*len(inv)) {
		if err := c.Free(kv.ropeBuf); err != nil {
			return 0, err
		}
		kv.ropeBuf = Buffer{}
		b, err := c.Alloc(int64(8*len(inv)), "RoPE table")
		if err != nil {
			return 0, err
		}
		kv.ropeBuf = b
	}
	if err := Upload(c, kv.ropeBuf.Ptr, inv); err != nil {
		kv.ropeKey = nil
		return 0, err
	}
	kv.ropeKey = key
	return kv.ropeBuf.Ptr, nil
}

// Write is Backend.KVWrite: RoPE on k, then k and v (each [rows][kv_heads
// *head_dim] float32 on the device) are quantized to the pool's dtypes and
// stored at the pages and slots b gives each row, in one kernel.
func (kv *KVCache) Write(c *Ctx, layer int, k, v DevicePtr, rows int, b *model.Batch, rope model.Rope) error {
	return kv.write(c, layer, k, v, rows, b, rope, qkPart{})
}

// qkPart is what a fused write (WriteQK) does besides Write: q's heads
// rotated in place, and q's and k's head RMSNorms applied before the
// rotation (zero pointers: no norm).
type qkPart struct {
	q            DevicePtr
	heads        int
	qNorm, kNorm DevicePtr
	eps          float32
}

// WriteQK is Write that also rotates q ([rows][heads*head_dim] float32, in
// place) at the rows' positions and, when qNorm and kNorm are set, first
// applies those head RMSNorms (head_dim float32 weights, eps) to q and k:
// a block's q/k norms, RoPE and KV write as one launch. Each row must
// belong to a sequence of b (rows of none are left as they are).
func (kv *KVCache) WriteQK(c *Ctx, layer int, q, k, v DevicePtr, rows int, b *model.Batch, rope model.Rope,
	heads int, qNorm, kNorm DevicePtr, eps float32) error {
	if heads <= 0 || q == 0 || (qNorm == 0) != (kNorm == 0) {
		return fmt.Errorf("gpu: fused KV write: %d q heads (q %#x), q norm %#x, k norm %#x", heads, q, qNorm, kNorm)
	}
	if rope.Dim == 0 {
		return fmt.Errorf("gpu: fused KV write without RoPE")
	}
	return kv.write(c, layer, k, v, rows, b, rope, qkPart{q: q, heads: heads, qNorm: qNorm, kNorm: kNorm, eps: eps})
}

func (kv *KVCache) write(c *Ctx, layer int, k, v DevicePtr, rows int, b *model.Batch, rope model.Rope, qk qkPart) error {
	if err := kv.checkLayer(layer); err != nil {
		return err
	}
	// Write reads no blocks; building them as the last Attend did keeps the
	// metadata identical, so a step uploads it once for all layers.
	m, err := kv.buildMeta(kv.scratch, b, rows, max(kv.metaHpw, 1), kv.metaFA)
	kv.scratch = m.words
	if err != nil {
		return err
	}
	inv, err := kv.ropeTable(c, rope)
	if err != nil {
		return err
	}
	if err := kv.upload(c, m); err != nil {
		return err
	}
	f, err := c.Function(kvWriteModule, "kv_write")
	if err != nil {
		return err
	}
	l := kv.Layout
	seqs, pt, rowSeq, _ := kv.metaPtrs(m)
	ly := kv.layers[layer]
	dyn := l.HasTokenScales()
	warps := rows * (l.KVHeads*2 + qk.heads)
	neox := 0
	if rope.NeoX {
		neox = 1
	}
	return c.Launch(f, Dim3{X: (warps + 3) / 4}, Dim3{X: 128}, 0, c.Stream(),
		k, v, rows, l.KVHeads, l.HeadDim, rowSeq, seqs, pt, log2(l.PageSize),
		ly.k, ly.v, ly.ks, ly.vs, dtypeCode(l.KType()), dtypeCode(l.VType()), dyn, inv, rope.Dim, neox,
		qk.q, qk.heads, qk.qNorm, qk.kNorm, qk.eps)
}

// chooseSplits picks how many key chunks each (row block, kv head) is
// split into. A CTA of 4 warps handles one chunk; with slots CTAs resident
// on the device at once, fill one wave (fewer CTAs leave SMs idle, a
// partial second wave leaves them idle at the end) with chunks of at least
// minTok keys.
// attnSplitMax bounds the split-K partials of one attention call (float32
// accumulators and max/sum pairs per split, row and head), so the memory
// plan can reserve them: decode rows never reach it (1024 splits of one row
// of 32 heads of 128 dims are 17 MB); a prefill chunk over a long context
// takes fewer splits instead.
const attnSplitMax = 64 << 20

// AttnSplitBytes is the most the attention split workspace (kept by the
// KV cache, grown to the largest call with a quarter of slack) takes for
// batches of up to rows rows: what the memory plan reserves for it.
func AttnSplitBytes(rows, heads, headDim int) int64 {
	need := min(int64(1024)*int64(rows)*int64(heads)*(int64(headDim)*4+8), attnSplitMax)
	return need + need/4
}

func chooseSplits(slots, ctas, maxK, minTok int) int {
	if minTok <= 0 {
		minTok = 256
	}
	s := min(slots/max(ctas, 1), (maxK+minTok-1)/minTok, 1024)
	return max(s, 1)
}

// Attend is Backend.Attention: causal paged attention of q ([rows][heads*
// head_dim] float32, rotated) over everything the pool holds for each row's
// sequence up to and including the row's position, into dst (same shape).
// scale is the softmax scale (usually 1/sqrt(head_dim)).
func (kv *KVCache) Attend(c *Ctx, dst, q DevicePtr, rows, layer int, b *model.Batch, heads int, scale float32) error {
	if err := kv.checkLayer(layer); err != nil {
		return err
	}
	l := kv.Layout
	if heads <= 0 || heads%l.KVHeads != 0 {
		return fmt.Errorf("gpu: %d query heads over %d kv heads; heads must be a positive multiple", heads, l.KVHeads)
	}
	hpw, faTok := kv.attnShape(c, heads)
	m, err := kv.buildMeta(kv.scratch, b, rows, hpw, faTok)
	kv.scratch = m.words
	if err != nil {
		return err
	}
	if err := kv.upload(c, m); err != nil {
		return err
	}
	kv.lastFA = 0
	if m.nblocks > 0 {
		if err := kv.attendBlocks(c, dst, q, rows, layer, m, heads, scale); err != nil {
			return err
		}
	}
	if m.nfa > 0 {
		kv.lastFA = m.nfa
		return kv.attendFA(c, dst, q, rows, layer, m, heads, scale)
	}
	return nil
}

// attendBlocks runs attn_<dtype>_d<dim> (attn_<k>_<v>_d<dim> for a mixed
// pool; and attn_merge) over m's row
// blocks: decode and short prefill chunks, or every sequence when FA is off.
func (kv *KVCache) attendBlocks(c *Ctx, dst, q DevicePtr, rows, layer int, m batchMeta, heads int, scale float32) error {
	l := kv.Layout
	group := heads / l.KVHeads
	hpw := m.hpw
	hslices := (group + hpw - 1) / hpw
	base := m.nblocks * l.KVHeads * hslices
	d := l.HeadDim
	if kv.attnName == "" {
		kv.attnName = fmt.Sprintf("attn_%s_d%d", kernelDTypes(l), d)
	}
	f, err := c.Function(attentionModule, kv.attnName)
	if err != nil {
		return err
	}
	splits := kv.Splits
	if splits <= 0 {
		occ, err := c.Occupancy(f, 128)
		if err != nil {
			return err
		}
		splits = chooseSplits(occ*c.d.info.SMs*max(kv.Waves, 1), base, m.maxK, kv.MinSplitTokens)
	}
	splits = capSplits(splits, rows, heads, d)
	part, partML, err := kv.splitWorkspace(c, splits, rows, heads)
	if err != nil {
		return err
	}
	seqs, pt, _, blocks := kv.metaPtrs(m)
	rowSeq := kv.meta.Ptr.Add(int64(4 * m.oldRowOff))
	ly := kv.layers[layer]
	scaleLog2 := scale * float32(math.Log2E)
	if err := c.Launch(f, Dim3{X: base * splits}, Dim3{X: 128}, 0, c.Stream(),
		q, dst, part, partML, ly.k, ly.v, ly.ks, ly.vs, l.HasTokenScales(),
		seqs, pt, blocks, m.nblocks, l.KVHeads, group, hpw, hslices, log2(l.PageSize), splits, rows, scaleLog2); err != nil {
		return err
	}
	if splits == 1 {
		return nil
	}
	return kv.merge(c, part, partML, dst, rowSeq, rows, heads, splits)
}

// splitWorkspace returns the partial accumulators and (max, sum) pairs of
// splits key chunks (zero pointers for one), growing the shared workspace.
func (kv *KVCache) splitWorkspace(c *Ctx, splits, rows, heads int) (part, partML DevicePtr, err error) {
	if splits <= 1 {
		return 0, 0, nil
	}
	accBytes := int64(splits) * int64(rows) * int64(heads) * int64(kv.Layout.HeadDim) * 4
	need := accBytes + int64(splits)*int64(rows)*int64(heads)*8
	if kv.ws.Size < need {
		if err := c.Free(kv.ws); err != nil {
			return 0, 0, err
		}
		kv.ws = Buffer{}
		ws, err := c.Alloc(need+need/4, "attention split workspace")
		if err != nil {
			return 0, 0, err
		}
		kv.ws = ws
	}
	return kv.ws.Ptr, kv.ws.Ptr.Add(accBytes), nil
}

// capSplits bounds splits so the partials stay inside attnSplitMax (the
// planned workspace): a long-context prefill takes fewer splits instead.
func capSplits(splits, rows, heads, d int) int {
	if per := int64(rows) * int64(heads) * (int64(d)*4 + 8); splits > 1 && int64(splits)*per > attnSplitMax {
		return max(int(attnSplitMax/per), 1)
	}
	return splits
}

// merge runs attn_merge over the rows rowSeq names (>= 0).
func (kv *KVCache) merge(c *Ctx, part, partML, dst, rowSeq DevicePtr, rows, heads, splits int) error {
	mf, err := c.Function(attentionModule, "attn_merge")
	if err != nil {
		return err
	}
	rh := rows * heads
	return c.Launch(mf, Dim3{X: rh}, Dim3{X: 256}, 0, c.Stream(), part, partML, dst, rowSeq, heads, rh, kv.Layout.HeadDim, splits)
}
