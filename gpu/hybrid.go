package gpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Hybrid models (Gated DeltaNet layers): model.StateBackend on the GPU.
// Kernels are in kernels/gdn.cu (conv, recurrence, norms) and
// kernels/gdn_chunk.cu (the chunked prefill form).
//
// State storage is one budgeted allocation, laid out
// [slot][layer]{conv [K-1][ConvChannels] | delta [ValueHeads][KeyDim][ValueDim]}
// float32, so a slot is one contiguous range: ClearState is one memset and
// CopyState one device copy.

var _ model.StateBackend = (*Backend)(nil)

const (
	gdnModule      = "gdn"
	gdnChunkModule = "gdn_chunk"
	// gdnMaxDim bounds KeyDim and ValueDim: the recurrence keeps 16 state
	// rows per warp of 8 (128) and the value columns in blocks of 32.
	gdnMaxDim = 128
	// gdnConvMaxK is CONV_KMAX in gdn.cu.
	gdnConvMaxK = 8
	// gdnConvChunk is the token run one conv thread walks in prefill.
	gdnConvChunk = 64
)

// gdnChunkedMinTokens is the longest sequence of a batch from which
// GatedDeltaRule uses the chunked form instead of the recurrence; tests and
// benchmarks set it. Measured on the H200 at the 35B-A3B shape
// (docs/benchmarks.md), the chunked kernel (fp32 CUDA cores, no tensor
// cores yet) is no faster than the recurrence, which spreads each head's
// state over 4 CTAs: 720 against 597 us for 512 tokens, 6.0 against 6.1 ms
// for 4096. So the recurrence runs every batch until the chunked form
// gets faster.
var gdnChunkedMinTokens = math.MaxInt32

// hybridState is the device state storage and the batch metadata of its kernels.
type hybridState struct {
	l        model.StateLayout
	buf      Buffer
	slot     int64 // floats per slot
	layer    int64 // floats per layer of a slot
	meta     Buffer
	metaHost []int32
	chunkL   int // forced chunk length of the chunked form (tests); 0: by device
}

// AllocState allocates zeroed state storage for l through the budgeted
// allocator (replacing any previous one).
func (b *Backend) AllocState(l model.StateLayout) error {
	if l.Layers <= 0 || l.Slots <= 0 || l.ConvChannels <= 0 || l.ConvKernel <= 0 || l.ValueHeads <= 0 || l.KeyDim <= 0 || l.ValueDim <= 0 {
		return fmt.Errorf("gpu: state layout %+v: every dimension must be positive", l)
	}
	if l.ConvKernel > gdnConvMaxK {
		return fmt.Errorf("gpu: conv kernel width %d: the CUDA conv supports up to %d", l.ConvKernel, gdnConvMaxK)
	}
	if l.KeyDim > gdnMaxDim || l.ValueDim > gdnMaxDim {
		return fmt.Errorf("gpu: delta-rule head dims %dx%d: the CUDA kernels support up to %d", l.KeyDim, l.ValueDim, gdnMaxDim)
	}
	return b.dev.Do(func(c *Ctx) error {
		if b.hs != nil {
			b.freeState(c)
		}
		b.trim(c) // as AllocKV: cached activations must not hold the state's budget
		n := l.Bytes()
		buf, err := c.Alloc(n, fmt.Sprintf("recurrent state (%d slots x %d layers)", l.Slots, l.Layers))
		if err != nil {
			return fmt.Errorf("gpu: recurrent state: %w", err)
		}
		if err := c.Memset8(buf.Ptr, 0, n); err != nil {
			c.Free(buf)
			return err
		}
		per := int64(l.ConvFloats()) + int64(l.DeltaFloats())
		b.hs = &hybridState{l: l, buf: buf, layer: per, slot: per * int64(l.Layers)}
		return nil
	})
}

// FreeState releases the state storage.
func (b *Backend) FreeState() {
	b.dev.Do(func(c *Ctx) error {
		b.freeState(c)
		return nil
	})
}

func (b *Backend) freeState(c *Ctx) {
	if b.hs == nil {
		return
	}
	c.Free(b.hs.buf)
	c.Free(b.hs.meta)
	b.hs = nil
}

// ClearState zeroes every layer of slot (one memset, queued).
func (b *Backend) ClearState(slot int) {
	b.post(func(c *Ctx) error {
		hs, err := b.stateSlot(slot, "ClearState")
		if err != nil {
			return err
		}
		return c.Memset32(hs.buf.Ptr.Add(4*int64(slot)*hs.slot), 0, hs.slot)
	})
}

// CopyState copies every layer of slot src into slot dst (one device copy, queued).
func (b *Backend) CopyState(dst, src int) {
	b.post(func(c *Ctx) error {
		hs, err := b.stateSlot(dst, "CopyState")
		if err != nil {
			return err
		}
		if _, err := b.stateSlot(src, "CopyState"); err != nil {
			return err
		}
		if dst == src {
			return nil
		}
		return c.CopyDevice(hs.buf.Ptr.Add(4*int64(dst)*hs.slot), hs.buf.Ptr.Add(4*int64(src)*hs.slot), 4*hs.slot)
	})
}

func (b *Backend) stateSlot(slot int, op string) (*hybridState, error) {
	if b.hs == nil {
		return nil, fmt.Errorf("gpu: %s before AllocState", op)
	}
	if slot < 0 || slot >= b.hs.l.Slots {
		return nil, fmt.Errorf("gpu: %s: state slot %d outside 0..%d", op, slot, b.hs.l.Slots-1)
	}
	return b.hs, nil
}

// stateLayer returns the conv and delta state of layer in slot 0.
func (hs *hybridState) stateLayer(layer int) (conv, delta DevicePtr) {
	conv = hs.buf.Ptr.Add(4 * int64(layer) * hs.layer)
	return conv, conv.Add(4 * int64(hs.l.ConvFloats()))
}

// seqMeta checks the batch against rows and the state and uploads its
// sequence table ({first row, rows, slot, 0} per sequence) unless it equals
// the last one (every recurrent layer of a step, and every decode step of
// the same sequences, reuse it: a replayed CUDA graph reads the same
// buffer). It returns the table, the number of sequences that have rows
// and their longest run.
func (b *Backend) seqMeta(c *Ctx, bt *model.Batch, rows, layer int, op string) (DevicePtr, int, int, error) {
	hs := b.hs
	if hs == nil {
		return 0, 0, 0, fmt.Errorf("gpu: %s before AllocState", op)
	}
	if layer < 0 || layer >= hs.l.Layers {
		return 0, 0, 0, fmt.Errorf("gpu: %s: recurrent layer %d outside 0..%d", op, layer, hs.l.Layers-1)
	}
	words := make([]int32, 0, 4*len(bt.Seqs))
	longest := 0
	used := make([]bool, rows)
	for i, s := range bt.Seqs {
		if s.NewTokens == 0 {
			continue
		}
		if s.Offset < 0 || s.NewTokens < 0 || s.Offset+s.NewTokens > rows {
			return 0, 0, 0, fmt.Errorf("gpu: %s: sequence %d (offset %d, %d rows) does not fit the batch of %d rows", op, i, s.Offset, s.NewTokens, rows)
		}
		if s.State < 0 || s.State >= hs.l.Slots {
			return 0, 0, 0, fmt.Errorf("gpu: %s: sequence %d uses state slot %d outside 0..%d", op, i, s.State, hs.l.Slots-1)
		}
		for r := s.Offset; r < s.Offset+s.NewTokens; r++ {
			if used[r] {
				return 0, 0, 0, fmt.Errorf("gpu: %s: batch row %d belongs to two sequences", op, r)
			}
			used[r] = true
		}
		words = append(words, int32(s.Offset), int32(s.NewTokens), int32(s.State), 0)
		longest = max(longest, s.NewTokens)
	}
	n := len(words) / 4
	for i := 0; i < n; i++ {
		for k := 0; k < i; k++ {
			if words[4*k+2] == words[4*i+2] {
				return 0, 0, 0, fmt.Errorf("gpu: %s: two sequences of one batch share state slot %d", op, words[4*i+2])
			}
		}
	}
	if n == 0 {
		return 0, 0, 0, nil
	}
	if n > 65535 {
		return 0, 0, 0, fmt.Errorf("gpu: %s: %d sequences in one batch (at most 65535)", op, n)
	}
	if hs.meta.Ptr == 0 || !slices.Equal(words, hs.metaHost) {
		need := int64(len(words)) * 4
		if hs.meta.Size < need {
			if err := c.Free(hs.meta); err != nil {
				return 0, 0, 0, err
			}
			hs.meta = Buffer{}
			m, err := c.Alloc(max(2*need, 1024), "recurrent-state batch metadata")
			if err != nil {
				return 0, 0, 0, err
			}
			hs.meta = m
		}
		if err := Upload(c, hs.meta.Ptr, words); err != nil {
			hs.metaHost = nil
			return 0, 0, 0, err
		}
		hs.metaHost = append(hs.metaHost[:0], words...)
	}
	return hs.meta.Ptr, n, longest, nil
}

// gdnLaunch runs kernel name of module mod on the work stream.
func (b *Backend) gdnLaunch(c *Ctx, mod, name string, grid, block Dim3, shmem int, args ...any) error {
	key := mod + "." + name
	f, ok := b.fns[key]
	if !ok {
		var err error
		if f, err = c.Function(mod, name); err != nil {
			return err
		}
		b.fns[key] = f
	}
	if shmem > 48<<10 && b.smemSet[f] < shmem {
		if err := c.SetMaxDynamicShared(f, shmem); err != nil {
			return err
		}
		b.smemSet[f] = shmem
	}
	return c.Launch(f, grid, block, shmem, c.Stream(), args...)
}

// CausalConv: dst = silu(depthwise causal conv of x), each sequence's
// inputs before its first row from its slot's conv state, which then holds
// the last K-1 inputs. One fused kernel when every sequence has at most
// gdnConvChunk rows; otherwise runs of gdnConvChunk tokens per thread and a
// second kernel that updates the state.
func (b *Backend) CausalConv(dst, x model.Tensor, w model.Weight, layer int, bt *model.Batch) {
	d, ok1 := b.ten(dst, "CausalConv")
	s, ok2 := b.ten(x, "CausalConv")
	gw, ok3 := b.wt(w, "CausalConv")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	if d.rows != s.rows || d.cols != s.cols {
		b.fail(fmt.Errorf("gpu: CausalConv: dst %dx%d, x %dx%d", d.rows, d.cols, s.rows, s.cols))
		return
	}
	if gw.info.Type != gguf.F32 {
		b.fail(fmt.Errorf("gpu: CausalConv: weight %q is %s; the conv reads f32", gw.info.Name, gw.info.Type))
		return
	}
	batch := b.postBatch(bt)
	b.post(func(c *Ctx) error {
		hs := b.hs
		if hs == nil {
			return fmt.Errorf("gpu: CausalConv before AllocState")
		}
		C, K := hs.l.ConvChannels, hs.l.ConvKernel
		if s.cols != C || gw.cols != K || gw.rows != C {
			return fmt.Errorf("gpu: CausalConv: x width %d, weight %q %dx%d; the state has %d channels, kernel %d", s.cols, gw.info.Name, gw.rows, gw.cols, C, K)
		}
		meta, nseq, longest, err := b.seqMeta(c, batch, s.rows, layer, "CausalConv")
		if err != nil || nseq == 0 {
			return err
		}
		conv, _ := hs.stateLayer(layer)
		chunks := cdiv(longest, gdnConvChunk)
		fused := chunks == 1
		if err := b.gdnLaunch(c, gdnModule, "gdn_conv", Dim3{X: cdiv(C, 128), Y: chunks, Z: nseq}, Dim3{X: 128}, 0,
			s.buf, gw.raw, d.buf, conv, hs.slot, meta, C, K, gdnConvChunk, fused); err != nil {
			return err
		}
		if fused {
			return nil
		}
		return b.gdnLaunch(c, gdnModule, "gdn_conv_state", Dim3{X: cdiv(C, 128), Y: nseq}, Dim3{X: 128}, 0,
			s.buf, conv, hs.slot, meta, C, K)
	})
}

// gdnChunkSmem is the dynamic shared memory of gdn_chunked for chunk
// length L and key dim dk (gdn_chunk.cu's layout).
func gdnChunkSmem(L, dk int) int {
	return 4 * (2*L*(dk+1) + dk*32 + 2*L*(L+1) + L*32 + 3*L)
}

// GatedDeltaRule runs the gated delta rule of every sequence of the batch
// from its slot's state, leaving the state after its last row. The
// recurrence reads and writes the state once per call; batches with a
// sequence of gdnChunkedMinTokens rows or more use the chunked form (64
// tokens per chunk where the device has the shared memory, else 32).
func (b *Backend) GatedDeltaRule(dst, qkv, alpha, beta model.Tensor, g *model.GatedDeltaNet, layer int, bt *model.Batch) {
	d, ok1 := b.ten(dst, "GatedDeltaRule")
	x, ok2 := b.ten(qkv, "GatedDeltaRule")
	a, ok3 := b.ten(alpha, "GatedDeltaRule")
	be, ok4 := b.ten(beta, "GatedDeltaRule")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return
	}
	Hk, Hv, Dk, Dv := g.KeyHeads, g.ValueHeads, g.KeyDim, g.ValueDim
	if Hk <= 0 || Hv <= 0 || Hv%Hk != 0 || Dk <= 0 || Dv <= 0 || Dk > gdnMaxDim || Dv > gdnMaxDim {
		b.fail(fmt.Errorf("gpu: GatedDeltaRule: %d key heads, %d value heads, dims %dx%d: need value heads a multiple of key heads and dims up to %d", Hk, Hv, Dk, Dv, gdnMaxDim))
		return
	}
	n := x.rows
	if x.cols != 2*Hk*Dk+Hv*Dv || d.rows != n || d.cols != Hv*Dv || a.rows != n || a.cols != Hv || be.rows != n || be.cols != Hv {
		b.fail(fmt.Errorf("gpu: GatedDeltaRule shapes: qkv %dx%d, alpha %dx%d, beta %dx%d, dst %dx%d for %d/%d heads of %dx%d",
			x.rows, x.cols, a.rows, a.cols, be.rows, be.cols, d.rows, d.cols, Hk, Hv, Dk, Dv))
		return
	}
	wa, ok5 := b.vec(g.A, Hv, "GatedDeltaRule A")
	wb, ok6 := b.vec(g.DtBias, Hv, "GatedDeltaRule dt_bias")
	if !ok5 || !ok6 {
		return
	}
	batch := b.postBatch(bt)
	minChunked := gdnChunkedMinTokens
	b.post(func(c *Ctx) error {
		hs := b.hs
		if hs == nil {
			return fmt.Errorf("gpu: GatedDeltaRule before AllocState")
		}
		if hs.l.ValueHeads != Hv || hs.l.KeyDim != Dk || hs.l.ValueDim != Dv {
			return fmt.Errorf("gpu: GatedDeltaRule: %d value heads of %dx%d, the state holds %d of %dx%d", Hv, Dk, Dv, hs.l.ValueHeads, hs.l.KeyDim, hs.l.ValueDim)
		}
		meta, nseq, longest, err := b.seqMeta(c, batch, n, layer, "GatedDeltaRule")
		if err != nil || nseq == 0 {
			return err
		}
		_, delta := hs.stateLayer(layer)
		grid := Dim3{X: Hv, Y: cdiv(Dv, 32), Z: nseq}
		if longest < minChunked {
			return b.gdnLaunch(c, gdnModule, "gdn_recurrent", grid, Dim3{X: 256}, 0,
				x.buf, a.buf, be.buf, wa.f32, wb.f32, d.buf, delta, hs.slot, meta, Hk, Hv, Dk, Dv, g.Tiled)
		}
		L := hs.chunkL
		if L == 0 {
			L = 32
			if gdnChunkSmem(64, Dk) <= c.Device().Info().SharedMemOptin {
				L = 64
			}
		}
		return b.gdnLaunch(c, gdnChunkModule, "gdn_chunked", grid, Dim3{X: 256}, gdnChunkSmem(L, Dk),
			x.buf, a.buf, be.buf, wa.f32, wb.f32, d.buf, delta, hs.slot, meta, Hk, Hv, Dk, Dv, g.Tiled, L)
	})
}

// GatedRMSNorm: dst = rmsnorm(x) * w * silu(z) over each headDim slice
// (dst may be x).
func (b *Backend) GatedRMSNorm(dst, x, z model.Tensor, w model.Weight, headDim int, eps float32) {
	d, ok1 := b.ten(dst, "GatedRMSNorm")
	s, ok2 := b.ten(x, "GatedRMSNorm")
	zt, ok3 := b.ten(z, "GatedRMSNorm")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	gw, ok := b.vec(w, headDim, "GatedRMSNorm")
	if !ok {
		return
	}
	if headDim <= 0 || s.cols%headDim != 0 || d.rows != s.rows || d.cols != s.cols || zt.rows != s.rows || zt.cols != s.cols {
		b.fail(fmt.Errorf("gpu: GatedRMSNorm: dst %dx%d, x %dx%d, z %dx%d, head_dim %d", d.rows, d.cols, s.rows, s.cols, zt.rows, zt.cols, headDim))
		return
	}
	n := s.rows * s.cols / headDim
	if n == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.gdnLaunch(c, gdnModule, "gated_rmsnorm", Dim3{X: cdiv(n, 8)}, Dim3{X: 256}, 0, d.buf, s.buf, zt.buf, gw.f32, n, headDim, eps)
	})
}

// SigmoidMul: x *= sigmoid(gate), gate of x's shape or [rows][1].
func (b *Backend) SigmoidMul(x, gate model.Tensor) {
	s, ok1 := b.ten(x, "SigmoidMul")
	g, ok2 := b.ten(gate, "SigmoidMul")
	if !ok1 || !ok2 {
		return
	}
	if g.rows != s.rows || (g.cols != s.cols && g.cols != 1) {
		b.fail(fmt.Errorf("gpu: SigmoidMul: x %dx%d, gate %dx%d (want the same shape or %dx1)", s.rows, s.cols, g.rows, g.cols, s.rows))
		return
	}
	n := s.rows * s.cols
	if n == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.gdnLaunch(c, gdnModule, "sigmoid_mul", Dim3{X: cdiv(n, 256)}, Dim3{X: 256}, 0, s.buf, g.buf, s.rows, s.cols, g.cols)
	})
}

// SplitHeads: src [rows][heads][first|second halves of headDim] into dst1, dst2 [rows][heads*headDim].
func (b *Backend) SplitHeads(dst1, dst2, src model.Tensor, heads, headDim int) {
	d1, ok1 := b.ten(dst1, "SplitHeads")
	d2, ok2 := b.ten(dst2, "SplitHeads")
	s, ok3 := b.ten(src, "SplitHeads")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	w := heads * headDim
	if heads <= 0 || headDim <= 0 || s.cols != 2*w || d1.rows != s.rows || d2.rows != s.rows || d1.cols != w || d2.cols != w {
		b.fail(fmt.Errorf("gpu: SplitHeads: src %dx%d, dst %dx%d and %dx%d, %d heads of %d", s.rows, s.cols, d1.rows, d1.cols, d2.rows, d2.cols, heads, headDim))
		return
	}
	n := s.rows * w
	if n == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.gdnLaunch(c, gdnModule, "split_heads", Dim3{X: cdiv(n, 256)}, Dim3{X: 256}, 0, d1.buf, d2.buf, s.buf, s.rows, heads, headDim)
	})
}
