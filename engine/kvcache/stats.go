package kvcache

// PoolStats are the pool numbers the UI shows (engine.Stats copies them).
type PoolStats struct {
	DType    DType // K's dtype (and V's unless VDType differs)
	VDType   DType // V's dtype (always set, == DType when they agree)
	Scales   ScaleMode
	PageSize int

	PagesTotal, PagesUsed, PagesFree int
	PagesShared                      int // held by more than one sequence
	TokensCapacity                   int // PagesTotal * PageSize
	// TokensUsed counts the token slots holding K/V (a prefix shared by
	// forked sequences counts once); TokensFree = PagesFree * PageSize.
	TokensUsed, TokensFree int
	SeqTokens              int // sum of the live sequences' lengths
	Sequences              int

	BytesPerToken int     // data + scales, all attention layers, K and V
	PoolBytes     int64   // whole pool
	BytesReserved int64   // PagesUsed whole pages
	BytesUsed     int64   // TokensUsed * BytesPerToken
	BytesBF16     int64   // what TokensUsed would take in bf16
	CapacityRatio float64 // bf16 bytes per token / this dtype's

	CowCopies int64 // shared pages copied before a write
	CowDrops  int64 // shared pages replaced by recomputing their tokens

	// ReusedTokens: prompt tokens Reuse kept from the cache (not
	// recomputed); ComputedTokens: tokens Append/Reuse asked callers to
	// compute. Both count over the pool's life.
	ReusedTokens, ComputedTokens int64
}

// Stats returns a consistent snapshot.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.l
	bpt := l.BytesPerToken()
	bf16 := BytesPerToken(l.Layers, l.KVHeads, l.HeadDim, BF16, DynamicScales)
	used := l.Pages - len(p.free)
	return PoolStats{
		DType: l.DType, VDType: l.VType(), Scales: l.Scales, PageSize: l.PageSize,
		PagesTotal: l.Pages, PagesUsed: used, PagesFree: len(p.free), PagesShared: p.shared,
		TokensCapacity: l.Tokens(), TokensUsed: p.tokens, TokensFree: len(p.free) * l.PageSize,
		SeqTokens: p.seqTokens, Sequences: len(p.seqs),
		BytesPerToken: bpt, PoolBytes: PoolBytes(l),
		BytesReserved: int64(used) * l.BytesPerPage(),
		BytesUsed:     int64(p.tokens) * int64(bpt),
		BytesBF16:     int64(p.tokens) * int64(bf16),
		CapacityRatio: float64(bf16) / float64(bpt),
		CowCopies:     p.cowCopies, CowDrops: p.cowDrops,
		ReusedTokens: p.reused, ComputedTokens: p.computed,
	}
}
