package kvcache

import (
	"errors"
	"sync"
)

// PageCopier copies the contents of one page id to another in every layer
// (K and V codes and their per-token scales). Storage that implements it
// lets the pool copy a shared page before a sequence writes into it.
type PageCopier interface {
	CopyPage(dst, src int32)
}

// Pool allocates the pages of one KV pool and keeps the page tables of
// its sequences. It owns no KV data: the storage (HostStore, GPU buffers)
// is laid out by the same Layout and addressed with the page ids handed
// out here. All methods are safe for concurrent use.
//
// Pages are shared between sequences by Fork (prefix reuse across
// branches); a page is freed when its last holder drops it. Sharing
// rule: a page held by more than one sequence is never written. When a
// sequence appends into a shared, partly filled last page, Append first
// gives it a private page: a copy made by the PageCopier if the pool has
// one, otherwise an empty page, in which case Append's start moves back
// to the page boundary and the caller recomputes those few tokens.
type Pool struct {
	mu     sync.Mutex
	l      Layout
	copier PageCopier

	refs  []int32 // holders of each page; 0 = free
	fill  []int32 // tokens in use in each page: max over its holders
	index []int32 // position of each used page in its holders' tables (same in all)
	free  []int32 // stack of free page ids
	seqs  map[*Sequence]struct{}

	seqTokens int   // sum of live sequence lengths
	tokens    int   // sum of fill over used pages
	shared    int   // pages with refs > 1
	cowCopies int64 // pages copied for copy-on-write
	cowDrops  int64 // shared tail pages replaced by recomputation
	reused    int64 // prompt tokens Reuse served from the cache
	computed  int64 // tokens callers were told to compute (Len - start)
}

// NewPool makes a pool of l.Pages pages of l.PageSize tokens. copier may
// be nil (see the sharing rule on Pool).
func NewPool(l Layout, copier PageCopier) (*Pool, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		l: l, copier: copier,
		refs: make([]int32, l.Pages), fill: make([]int32, l.Pages), index: make([]int32, l.Pages),
		free: make([]int32, l.Pages),
		seqs: make(map[*Sequence]struct{}),
	}
	// Hand out low page ids first (pop from the end).
	for i := range p.free {
		p.free[i] = int32(l.Pages - 1 - i)
	}
	return p, nil
}

// Layout returns the pool's geometry.
func (p *Pool) Layout() Layout { return p.l }

// NewSequence returns an empty sequence with its own page table.
func (p *Pool) NewSequence() *Sequence {
	s := &Sequence{pool: p}
	p.mu.Lock()
	p.seqs[s] = struct{}{}
	p.mu.Unlock()
	return s
}

// ErrFreed is returned when a freed Sequence is used again.
var ErrFreed = errors.New("kvcache: sequence already freed")

// Sequence is one conversation's view of the pool: its page table and the
// token ids whose K/V the cache holds (or is about to hold), in order.
type Sequence struct {
	pool   *Pool
	pages  []int32
	tokens []int32
	freed  bool
}

// Len is the number of tokens the sequence holds.
func (s *Sequence) Len() int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return len(s.tokens)
}

// Pages returns the page table: token t lives at page Pages()[t/PageSize],
// slot t%PageSize. The slice is a copy.
func (s *Sequence) Pages() []int32 {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return append([]int32(nil), s.pages...)
}

// Tokens returns a copy of the token history.
func (s *Sequence) Tokens() []int32 {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return append([]int32(nil), s.tokens...)
}

// CommonPrefix says how many cached tokens can be kept for a new prompt:
// the length of the common prefix of the history and prompt, at most
// len(prompt)-1 so that the last prompt token is always recomputed (its
// logits start generation).
func (s *Sequence) CommonPrefix(prompt []int32) int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	n := 0
	for n < len(s.tokens) && n < len(prompt) && s.tokens[n] == prompt[n] {
		n++
	}
	return max(0, min(n, len(prompt)-1))
}

// Reuse prepares the sequence for prompt (the whole conversation so far):
// it keeps the cached common prefix, drops the rest, and appends the new
// tokens. The caller computes K/V for prompt[start:] at positions start...
// On a *PoolFullError nothing changes.
func (s *Sequence) Reuse(prompt []int32) (start int, err error) {
	return s.ReuseAt(prompt, len(prompt))
}

// ReuseAt is Reuse keeping at most limit cached tokens. Hybrid models use
// it: their recurrent state cannot be cut back like K/V, so a turn resumes
// at a position whose state was kept (a snapshot), at or before the common
// prefix.
func (s *Sequence) ReuseAt(prompt []int32, limit int) (start int, err error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return 0, ErrFreed
	}
	keep := 0
	for keep < len(s.tokens) && keep < len(prompt) && s.tokens[keep] == prompt[keep] {
		keep++
	}
	keep = max(0, min(keep, len(prompt)-1, limit))
	// Check capacity as if truncated, so that a failure changes nothing.
	if ok, fit := p.capacityFor(s, keep, len(prompt)-keep); !ok {
		return 0, p.fullError(s, keep, len(prompt)-keep, fit)
	}
	p.truncate(s, keep)
	start, err = p.appendTokens(s, prompt[keep:])
	if err == nil {
		p.reused += int64(start)
	}
	return start, err
}

// Append reserves room for tokens after the sequence's current end and
// records them in its history. The caller then computes K/V for
// Tokens()[start:] at positions start..., into Pages(). start is the old
// length, or less when a shared last page had to be replaced without a
// copier (see Pool). When the pool cannot hold them, Append returns a
// *PoolFullError and changes nothing.
func (s *Sequence) Append(tokens ...int32) (start int, err error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return 0, ErrFreed
	}
	if ok, fit := p.capacityFor(s, len(s.tokens), len(tokens)); !ok {
		return 0, p.fullError(s, len(s.tokens), len(tokens), fit)
	}
	return p.appendTokens(s, tokens)
}

// Truncate keeps the first n tokens (n is clamped to [0, Len]) and drops
// the pages beyond them. Shared pages are only released, never modified.
func (s *Sequence) Truncate(n int) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return
	}
	p.truncate(s, max(0, min(n, len(s.tokens))))
}

// Fork returns a new sequence holding the same tokens, sharing all pages.
func (s *Sequence) Fork() (*Sequence, error) {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return nil, ErrFreed
	}
	c := &Sequence{pool: p, pages: append([]int32(nil), s.pages...), tokens: append([]int32(nil), s.tokens...)}
	for _, pg := range c.pages {
		p.incref(pg)
	}
	p.seqs[c] = struct{}{}
	p.seqTokens += len(c.tokens)
	return c, nil
}

// Free releases all pages; the sequence must not be used afterwards
// (Append and Fork return ErrFreed). Free is idempotent.
func (s *Sequence) Free() {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return
	}
	p.truncate(s, 0)
	s.freed = true
	delete(p.seqs, s)
}

// --- internals, p.mu held ---

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// tailShared reports whether a sequence of length n with table pages ends
// in a partly filled page that others also hold.
func (p *Pool) tailShared(pages []int32, n int) bool {
	return n%p.l.PageSize != 0 && len(pages) > 0 && p.refs[pages[len(pages)-1]] > 1
}

// capacityFor says whether k tokens can be appended to s after truncating
// it to its first n tokens, and how many would fit.
func (p *Pool) capacityFor(s *Sequence, n, k int) (ok bool, fit int) {
	P := p.l.PageSize
	have := ceilDiv(n, P)
	free := len(p.free)
	for _, pg := range s.pages[have:] {
		if p.refs[pg] == 1 {
			free++ // released by the truncation
		}
	}
	need := ceilDiv(n+k, P) - have
	room := have*P - n // free slots in the current last page
	if p.tailShared(s.pages[:have], n) {
		// The last page is replaced by a private one first; its slots
		// after n are then free (with or without a copier).
		if free == 0 {
			return k == 0, 0
		}
		free--
	}
	return need <= free, room + free*P
}

func (p *Pool) fullError(s *Sequence, n, k, fit int) *PoolFullError {
	e := &PoolFullError{
		Asked: k, Fit: min(fit, k), Held: n,
		Capacity: p.l.Tokens(), Used: p.tokens, DType: p.l.DType, VDType: p.l.VDType,
		BytesPerToken: p.l.BytesPerToken(),
	}
	if !p.l.DType.IsFP8() || !p.l.VType().IsFP8() { // a 16-bit half: fp8 would hold more
		fp8 := BytesPerToken(p.l.Layers, p.l.KVHeads, p.l.HeadDim, FP8E4M3, DynamicScales)
		pageBytes := int64(fp8) * int64(p.l.PageSize)
		e.E4M3Capacity = int(PoolBytes(p.l)/pageBytes) * p.l.PageSize
	}
	return e
}

func (p *Pool) alloc(index int) int32 {
	pg := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[pg] = 1
	p.fill[pg] = 0
	p.index[pg] = int32(index)
	return pg
}

func (p *Pool) incref(pg int32) {
	if p.refs[pg] == 1 {
		p.shared++
	}
	p.refs[pg]++
}

// decref drops one holder; the caller fixes fill for pages still held.
func (p *Pool) decref(pg int32) {
	p.refs[pg]--
	switch p.refs[pg] {
	case 0:
		p.tokens -= int(p.fill[pg])
		p.fill[pg] = 0
		p.free = append(p.free, pg)
	case 1:
		p.shared--
	}
}

// setFill updates a page's fill and the token total.
func (p *Pool) setFill(pg int32, f int) {
	p.tokens += f - int(p.fill[pg])
	p.fill[pg] = int32(f)
}

// refill recomputes the fill of a used page from its holders.
func (p *Pool) refill(pg int32) {
	if p.refs[pg] == 0 {
		return
	}
	i := int(p.index[pg])
	P := p.l.PageSize
	f := 0
	for s := range p.seqs {
		if i < len(s.pages) && s.pages[i] == pg {
			f = max(f, min(P, len(s.tokens)-i*P))
		}
	}
	p.setFill(pg, f)
}

func (p *Pool) truncate(s *Sequence, n int) {
	P := p.l.PageSize
	keep := ceilDiv(n, P)
	dropped := s.pages[keep:]
	s.pages = s.pages[:keep]
	p.seqTokens -= len(s.tokens) - n
	s.tokens = s.tokens[:n]
	for _, pg := range dropped {
		p.decref(pg)
		p.refill(pg)
	}
	if keep > 0 {
		p.refill(s.pages[keep-1])
	}
}

// appendTokens assumes capacity was checked.
func (p *Pool) appendTokens(s *Sequence, tokens []int32) (start int, err error) {
	P := p.l.PageSize
	n := len(s.tokens)
	start = n
	if len(tokens) == 0 {
		return start, nil
	}
	if p.tailShared(s.pages, n) {
		last := len(s.pages) - 1
		old := s.pages[last]
		pg := p.alloc(last)
		if p.copier != nil {
			p.copier.CopyPage(pg, old)
			p.cowCopies++
		} else {
			start = last * P
			p.cowDrops++
		}
		s.pages[last] = pg
		p.decref(old)
		p.refill(old)
	}
	for len(s.pages) < ceilDiv(n+len(tokens), P) {
		s.pages = append(s.pages, p.alloc(len(s.pages)))
	}
	s.tokens = append(s.tokens, tokens...)
	p.seqTokens += len(tokens)
	p.computed += int64(len(s.tokens) - start)
	for i := start / P; i < len(s.pages); i++ {
		p.setFill(s.pages[i], min(P, len(s.tokens)-i*P))
	}
	return start, nil
}
