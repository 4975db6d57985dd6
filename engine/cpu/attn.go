package cpu

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// AllocKV creates the host KV pool for layout, replacing any previous one.
func (b *Backend) AllocKV(layout kvcache.Layout) error {
	b.kv = nil
	if b.f32kv {
		if err := layout.Validate(); err != nil {
			return fmt.Errorf("cpu: KV pool: %w", err)
		}
		f32 := layout.WithDTypes(kvcache.F16, kvcache.F16) // float32 rows, K and V: what fp16 needs, twice
		f32.Pages = layout.Pages * 2
		if err := kvcache.CheckHostMemory(f32); err != nil {
			return fmt.Errorf("cpu: KV pool: %w", err)
		}
		b.kv, b.layout = newF32Store(layout), layout
		return nil
	}
	s, err := kvcache.NewHostStore(layout)
	if err != nil {
		return fmt.Errorf("cpu: KV pool: %w", err)
	}
	b.kv, b.layout = s, layout
	return nil
}

// FreeKV drops the KV pool.
func (b *Backend) FreeKV() { b.kv = nil }

// kvStore is what KVWrite and Attention need from a pool.
type kvStore interface {
	WriteRow(layer, page, slot int, k, v []float32)
	Attend(out, q []float32, layer int, pages []int32, n, heads int, scale float32)
	// AttendRows: rows consecutive query rows at positions first, first+1, ...
	AttendRows(out, q []float32, rows, layer int, pages []int32, first, heads int, scale float32)
}

// KVStore returns the host KV pool, or nil when there is none or it is the
// float32 reference store.
func (b *Backend) KVStore() *kvcache.HostStore {
	s, _ := b.kv.(*kvcache.HostStore)
	return s
}

func (b *Backend) store() kvStore {
	if b.kv == nil {
		panic("cpu: KV op before AllocKV")
	}
	return b.kv
}

// KVWrite rotates k in place and stores each row's k and v at its position
// in its sequence's pages.
func (b *Backend) KVWrite(layer int, k, v model.Tensor, bt *model.Batch, r model.Rope) {
	st := b.store()
	kt, vt := ten(k), ten(v)
	l := b.layout
	for i := range bt.Seqs {
		checkPages(&bt.Seqs[i], l)
	}
	b.RoPE(kt, bt.Pos, l.HeadDim, r)
	for _, sq := range bt.Seqs {
		b.pool.parallel(sq.NewTokens, 4, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := sq.Offset + i
				p := int(bt.Pos[row])
				st.WriteRow(layer, int(sq.Pages[p/l.PageSize]), p%l.PageSize, kt.row(row), vt.row(row))
			}
		})
	}
}

// Attention runs causal paged attention for every row: row at position p
// attends to tokens 0..p of its sequence.
func (b *Backend) Attention(dst, q model.Tensor, layer int, bt *model.Batch, heads int, scale float32) {
	st := b.store()
	d, qt := ten(dst), ten(q)
	for i := range bt.Seqs {
		checkPages(&bt.Seqs[i], b.layout)
	}
	w := qt.cols
	for _, sq := range bt.Seqs {
		if sq.NewTokens == 1 {
			row := sq.Offset
			n := int(bt.Pos[row]) + 1
			if hs, ok := st.(*kvcache.HostStore); ok {
				// Decode: spread the KV heads over the threads.
				b.pool.parallel(b.layout.KVHeads, 1, func(lo, hi int) {
					hs.AttendKVHeads(d.row(row), qt.row(row), layer, sq.Pages, n, heads, lo, hi, scale)
				})
				continue
			}
			st.Attend(d.row(row), qt.row(row), layer, sq.Pages, n, heads, scale)
			continue
		}
		// Prefill: contiguous row ranges per thread; AttendRows decodes each
		// K/V row once per tile of query rows.
		b.pool.parallel(sq.NewTokens, 16, func(lo, hi int) {
			r0, r1 := sq.Offset+lo, sq.Offset+hi
			st.AttendRows(d.Data[r0*w:r1*w], qt.Data[r0*w:r1*w], hi-lo, layer, sq.Pages, int(bt.Pos[r0]), heads, scale)
		})
	}
}

// checkPages panics (on the calling goroutine, where Model.Forward turns it
// into an error) when a sequence's page table cannot hold its positions.
func checkPages(sq *model.SeqSpan, l kvcache.Layout) {
	end := sq.Cached + sq.NewTokens
	if need := (end + l.PageSize - 1) / l.PageSize; need > len(sq.Pages) {
		panic(fmt.Sprintf("cpu: sequence of %d tokens needs %d pages of %d tokens, its page table has %d", end, need, l.PageSize, len(sq.Pages)))
	}
	for _, p := range sq.Pages[:(end+l.PageSize-1)/l.PageSize] {
		if p < 0 || int(p) >= l.Pages {
			panic(fmt.Sprintf("cpu: page id %d outside the pool of %d pages", p, l.Pages))
		}
	}
}
