package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// hostKVSwap is a backend whose KV pool lives in host memory (the CPU
// backend): its pages can be read and a new pool installed whole.
type hostKVSwap interface {
	KVStore() *kvcache.HostStore
	SetKVStore(*kvcache.HostStore)
}

// SwitchKV switches the KV dtype of the live pool like Reconfigure, for
// the chat's /kvdtype. Unlike Reconfigure it can be cancelled without
// loss, and it avoids the model pass where it can:
//
//   - When the pool is in host memory (the CPU backend) and every layer
//     keeps K/V in it, the stored rows are converted directly: decoded
//     (code times scale, as attention reads them) and re-encoded in the
//     new dtype (bf16 → fp8 requantizes with fresh per-row scales, fp8 →
//     bf16 widens the codes), each half (K, V) into its own dtype, into a
//     new pool built beside the old one.
//     The old pool is dropped only once every row is converted, so a
//     cancelled switch leaves it untouched.
//   - Otherwise it re-prefills (Reconfigure). A switch cancelled during the
//     re-prefill goes back to the old dtype and re-prefills the
//     conversation there, so the cache holds what it held before.
//
// progress first reports (0, total), total being the tokens the sessions
// hold, then the tokens converted or re-prefilled so far. A cancelled
// switch returns an error wrapping context.Canceled.
func (e *Engine) SwitchKV(ctx context.Context, kvDType string, progress func(done, total int)) error {
	if progress == nil {
		progress = func(int, int) {}
	}
	converted, err := e.convertKV(ctx, kvDType, progress)
	if converted || err != nil {
		return err
	}
	return e.switchByPrefill(ctx, kvDType, progress)
}

// switchByPrefill is Reconfigure with the restore on cancellation.
func (e *Engine) switchByPrefill(ctx context.Context, kvDType string, progress func(done, total int)) error {
	e.mu.Lock()
	oldName, oldScales := e.layout.DTypeName(), e.opts.KVScales
	saved := e.sessionTokens()
	total := 0
	for _, st := range saved {
		total += len(st.tokens)
	}
	e.mu.Unlock()
	progress(0, total)
	err := e.Reconfigure(ctx, kvDType, progress)
	if err == nil || ctx.Err() == nil {
		return err
	}
	// Cancelled: the new pool may hold part of the conversation. Go back to
	// the old dtype and rebuild what the sessions held.
	e.mu.Lock()
	unchanged := e.layout.DTypeName() == oldName && e.opts.KVScales == oldScales
	e.opts.KVScales = oldScales
	e.mu.Unlock()
	if unchanged {
		return err // refused before anything moved
	}
	if rerr := e.Reconfigure(context.Background(), oldName, nil); rerr != nil {
		return fmt.Errorf("/kvdtype %s cancelled; going back to %s failed: %v", kvDType, oldName, rerr)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var live []sessionTokens
	for _, st := range saved {
		if _, ok := e.sessions[st.s]; ok {
			live = append(live, st)
		}
	}
	if rerr := e.refill(context.Background(), live, nil); rerr != nil {
		return fmt.Errorf("/kvdtype %s cancelled; back on %s, but re-prefilling the conversation failed (the next message re-prefills it): %v", kvDType, oldName, rerr)
	}
	return fmt.Errorf("/kvdtype %s cancelled; the cache is %s as before: %w", kvDType, oldName, ctx.Err())
}

// sessionTokens lists every session with a copy of its token history.
// e.mu must be held.
func (e *Engine) sessionTokens() []sessionTokens {
	out := make([]sessionTokens, 0, len(e.sessions))
	for s := range e.sessions {
		out = append(out, sessionTokens{s, append([]int32(nil), s.seq.Tokens()...)})
	}
	return out
}

// errNoConvert says the pool cannot be converted directly; the caller
// re-prefills instead.
var errNoConvert = errors.New("engine: KV pool not convertible in place")

// convertKV does the direct conversion of SwitchKV. It reports false,
// with a nil error, when this backend or model needs the re-prefill.
func (e *Engine) convertKV(ctx context.Context, kvDType string, progress func(done, total int)) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	hk, ok := e.be.(hostKVSwap)
	if !ok || hk.KVStore() == nil || e.mdl.Config.AttnLayers != e.mdl.Config.Layers {
		return false, nil
	}
	dt, err := e.resolveKVSpec(kvDType)
	if err != nil {
		return true, err
	}
	if e.storedAs(dt) {
		return true, nil // already stored this way
	}
	saved := e.opts.KVScales
	if !dt.anyFP8() {
		e.opts.KVScales = ""
	}
	restore := func() { e.opts.KVScales = saved }
	nl, err := e.planLayout(dt)
	if err != nil {
		restore()
		return true, err
	}
	sessions := e.sessionTokens()
	pagesNeeded, total := 0, 0
	for _, st := range sessions {
		pagesNeeded += kvcache.PagesForTokens(len(st.tokens), nl.PageSize)
		total += len(st.tokens)
	}
	if pagesNeeded > nl.Pages {
		restore()
		return true, fmt.Errorf("/kvdtype %s: the conversation holds %d tokens (%d pages) but a %s pool in the same %s holds %d tokens (%d pages); nothing changed — /clear first, or keep %s",
			dt, total, pagesNeeded, dt, kvcache.FormatBytes(e.kvBudget), nl.Tokens(), nl.Pages, e.layout.DTypeName())
	}
	progress(0, total)
	seqs, store, pool, err := convertPool(ctx, hk.KVStore(), e.layout, nl, sessions, e.be, func(done int) { progress(done, total) })
	if err != nil {
		restore()
		if errors.Is(err, errNoConvert) {
			return false, nil
		}
		if ctx.Err() != nil {
			return true, fmt.Errorf("/kvdtype %s cancelled; the cache is %s as before: %w", dt, e.layout.DTypeName(), ctx.Err())
		}
		return true, fmt.Errorf("/kvdtype %s: %w; nothing changed", dt, err)
	}
	e.poolMu.Lock()
	hk.SetKVStore(store)
	e.pool, e.layout = pool, nl
	for i, st := range sessions {
		st.s.seq = seqs[i]
	}
	e.poolMu.Unlock()
	return true, nil
}

// convertPool builds a pool of layout nl holding every session's tokens,
// converted row by row from old (of layout ol). Nothing of the old pool
// changes. step reports the tokens converted so far.
func convertPool(ctx context.Context, old *kvcache.HostStore, ol, nl kvcache.Layout, sessions []sessionTokens, be any, step func(done int)) ([]*kvcache.Sequence, *kvcache.HostStore, *kvcache.Pool, error) {
	if ol.Layers != nl.Layers || ol.KVHeads != nl.KVHeads || ol.HeadDim != nl.HeadDim {
		return nil, nil, nil, errNoConvert
	}
	store, err := kvcache.NewHostStore(nl)
	if err != nil {
		// No room for both pools at once: the re-prefill needs only one.
		return nil, nil, nil, errNoConvert
	}
	copier, _ := be.(kvcache.PageCopier)
	pool, err := kvcache.NewPool(nl, copier)
	if err != nil {
		return nil, nil, nil, err
	}
	seqs := make([]*kvcache.Sequence, len(sessions))
	rows := 0
	for i, st := range sessions {
		seqs[i] = pool.NewSequence()
		if len(st.tokens) == 0 {
			continue
		}
		if _, err := seqs[i].Append(st.tokens...); err != nil {
			return nil, nil, nil, err
		}
		rows += len(st.tokens)
	}
	// Layers are independent (WriteRow of different layers never touch the
	// same bytes): convert them in parallel, reporting tokens as the rows
	// done over the layers.
	var converted atomic.Int64
	var failed atomic.Value
	workers := min(runtime.GOMAXPROCS(0), nl.Layers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hw := nl.KVHeads * nl.HeadDim
			k, v := make([]float32, hw), make([]float32, hw)
			for {
				layer := int(next.Add(1)) - 1
				if layer >= nl.Layers {
					return
				}
				for i, st := range sessions {
					op, np := st.s.seq.Pages(), seqs[i].Pages()
					for pos := range st.tokens {
						if pos%nl.PageSize == 0 {
							if err := ctx.Err(); err != nil {
								failed.CompareAndSwap(nil, err)
								return
							}
							if pos > 0 {
								converted.Add(int64(nl.PageSize))
							}
						}
						old.ReadRow(layer, int(op[pos/ol.PageSize]), pos%ol.PageSize, k, v)
						store.WriteRow(layer, int(np[pos/nl.PageSize]), pos%nl.PageSize, k, v)
					}
					converted.Add(int64((len(st.tokens)-1)%nl.PageSize + 1))
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for loop := true; loop; {
		select {
		case <-finished:
			loop = false
		case <-tick.C:
			step(int(converted.Load()) / nl.Layers)
		}
	}
	if err, _ := failed.Load().(error); err != nil {
		return nil, nil, nil, err
	}
	step(rows)
	return seqs, store, pool, nil
}
