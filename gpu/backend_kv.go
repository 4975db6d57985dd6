package gpu

import (
	"errors"
	"fmt"
	"os"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

var errNoKV = errors.New("gpu: KV op before AllocKV")

// AllocKV creates the device KV pool for layout (replacing any previous
// one) through the budgeted allocator; the kernels are in attention.go.
func (b *Backend) AllocKV(layout kvcache.Layout) error {
	return b.dev.Do(func(c *Ctx) error {
		if b.kv != nil {
			if err := b.kv.Free(c); err != nil {
				return err
			}
			b.kv = nil
		}
		// Cached activation buffers would otherwise hold budget the pool
		// was planned to get; they are reallocated on the next step.
		b.trim(c)
		kv, err := c.AllocKV(layout)
		if err != nil {
			return fmt.Errorf("gpu: KV pool: %w", err)
		}
		b.kv = kv
		return nil
	})
}

// FreeKV drops the KV pool.
func (b *Backend) FreeKV() {
	err := b.dev.Do(func(c *Ctx) error {
		if b.kv == nil {
			return nil
		}
		err := b.kv.Free(c)
		b.kv = nil
		return err
	})
	if err != nil {
		b.fail(err)
	}
}

// KVCache returns the device pool (nil before AllocKV); use it only on the
// device thread.
func (b *Backend) KVCache() *KVCache { return b.kv }

// postBatch is the batch a posted op may read when it runs: bt itself
// where device ops run inline (the caller waits for them), else a copy,
// since the caller may change bt before the device goroutine gets to it.
func (b *Backend) postBatch(bt *model.Batch) *model.Batch {
	if b.dev.inline {
		return bt
	}
	return copyBatch(bt)
}

// copyBatch deep-copies bt: ops run later on the device thread, after the
// caller may have reused its slices.
func copyBatch(bt *model.Batch) *model.Batch {
	c := &model.Batch{
		Tokens: append([]int32(nil), bt.Tokens...),
		Pos:    append([]int32(nil), bt.Pos...),
		Seqs:   make([]model.SeqSpan, len(bt.Seqs)),
	}
	for i, s := range bt.Seqs {
		s.Pages = append([]int32(nil), s.Pages...)
		c.Seqs[i] = s
	}
	return c
}

// KVWrite applies RoPE to k and stores k and v into the pages of layer in
// the pool's dtype, in one kernel. Unlike the CPU backend, k itself is left
// unrotated (the rotation happens in registers on the way to the pool).
func (b *Backend) KVWrite(layer int, k, v model.Tensor, bt *model.Batch, r model.Rope) {
	kt, ok1 := b.ten(k, "KVWrite")
	vt, ok2 := b.ten(v, "KVWrite")
	if !ok1 || !ok2 {
		return
	}
	if kt.rows != vt.rows || kt.cols != vt.cols {
		b.fail(fmt.Errorf("gpu: KVWrite: k %dx%d, v %dx%d", kt.rows, kt.cols, vt.rows, vt.cols))
		return
	}
	batch := b.postBatch(bt)
	b.post(func(c *Ctx) error {
		if b.kv == nil {
			return errNoKV
		}
		if want := b.kv.Layout.KVHeads * b.kv.Layout.HeadDim; kt.cols != want {
			return fmt.Errorf("gpu: KVWrite: k width %d, the pool holds %d kv heads x %d", kt.cols, b.kv.Layout.KVHeads, b.kv.Layout.HeadDim)
		}
		return b.kv.Write(c, layer, kt.buf.Ptr, vt.buf.Ptr, kt.rows, batch, r)
	})
}

// fuseRoPEKV: RoPEKVWrite takes the op, the default since the H200 run of
// 2026-12-06 (docs/benchmarks.md); FTCHAT_FUSE_ROPE_KV=0 keeps the
// separate launches.
var fuseRoPEKV = os.Getenv("FTCHAT_FUSE_ROPE_KV") != "0"

// RoPEKVWrite implements model.RoPEKVWriter: q's and k's head norms (when
// qNorm is set), RoPE on q and KVWrite of k and v in one kernel
// (KVCache.WriteQK). It takes the op only when the separate ops would
// compute the same: every row belongs to a sequence of bt at its position
// (buildMeta checks each), with RoPE and the pool's head_dim.
func (b *Backend) RoPEKVWrite(layer int, q, k, v model.Tensor, qNorm, kNorm model.Weight, headDim int, eps float32, bt *model.Batch, r model.Rope) bool {
	if !fuseRoPEKV {
		return false
	}
	qt, ok1 := b.ten(q, "RoPEKVWrite")
	kt, ok2 := b.ten(k, "RoPEKVWrite")
	vt, ok3 := b.ten(v, "RoPEKVWrite")
	if !ok1 || !ok2 || !ok3 {
		return true // failed: the error is kept, as the separate ops would keep theirs
	}
	covered := 0
	for _, s := range bt.Seqs {
		covered += s.NewTokens
	}
	if r.Dim <= 0 || headDim <= 0 || qt.cols%headDim != 0 || qt.rows != kt.rows || len(bt.Pos) < qt.rows || covered != qt.rows ||
		(qNorm == nil) != (kNorm == nil) || kt.rows != vt.rows || kt.cols != vt.cols {
		return false
	}
	var qg, kg DevicePtr
	if qNorm != nil {
		gq, ok1 := b.vec(qNorm, headDim, "RoPEKVWrite")
		gk, ok2 := b.vec(kNorm, headDim, "RoPEKVWrite")
		if !ok1 || !ok2 {
			return true
		}
		qg, kg = gq.f32.Ptr, gk.f32.Ptr
	}
	batch := b.postBatch(bt)
	heads := qt.cols / headDim
	b.post(func(c *Ctx) error {
		if b.kv == nil {
			return errNoKV
		}
		l := b.kv.Layout
		if l.HeadDim != headDim || kt.cols != l.KVHeads*l.HeadDim {
			return fmt.Errorf("gpu: RoPEKVWrite: q %d wide, k %d wide, head_dim %d; the pool holds %d kv heads x %d", qt.cols, kt.cols, headDim, l.KVHeads, l.HeadDim)
		}
		return b.kv.WriteQK(c, layer, qt.buf.Ptr, kt.buf.Ptr, vt.buf.Ptr, kt.rows, batch, r, heads, qg, kg, eps)
	})
	return true
}

// Attention computes causal paged attention of q over the pool into dst.
func (b *Backend) Attention(dst, q model.Tensor, layer int, bt *model.Batch, heads int, scale float32) {
	d, ok1 := b.ten(dst, "Attention")
	qt, ok2 := b.ten(q, "Attention")
	if !ok1 || !ok2 {
		return
	}
	if d.rows != qt.rows || d.cols != qt.cols {
		b.fail(fmt.Errorf("gpu: Attention: dst %dx%d, q %dx%d", d.rows, d.cols, qt.rows, qt.cols))
		return
	}
	batch := b.postBatch(bt)
	b.post(func(c *Ctx) error {
		if b.kv == nil {
			return errNoKV
		}
		if want := heads * b.kv.Layout.HeadDim; qt.cols != want {
			return fmt.Errorf("gpu: Attention: q width %d, want %d heads x %d", qt.cols, heads, b.kv.Layout.HeadDim)
		}
		return b.kv.Attend(c, d.buf.Ptr, qt.buf.Ptr, qt.rows, layer, batch, heads, scale)
	})
}
