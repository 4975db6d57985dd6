package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/sample"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// Batcher serves many requests at once with continuous batching: every
// step is one model.Forward over the paged pool holding one SeqSpan per
// active sequence, each decoding sequence contributing one row and the
// prefilling ones a bounded share of their prompts. Requests join between
// steps and leave as they finish, so a long prompt never stalls the
// decoders for more than one bounded chunk.
//
// Finished sequences stay in the pool as an LRU prefix cache: a request
// whose prompt starts like a cached (or running) sequence shares its pages
// (kvcache Fork) and prefills only the rest. The cache gives its pages
// back whenever a new request needs room.
//
// A Batcher is the only user of the engine's pool while it runs (it takes
// the engine's lock for each step, so it coexists with Sessions, but
// Reconfigure must not be called while it runs).
type Batcher struct {
	e    *Engine
	opts BatcherOptions

	mu      sync.Mutex
	queue   []*batchSeq // waiting for room, in order (preempted ones first)
	running []*batchSeq // loop-owned; read under mu for stats
	idle    []idleSeq   // finished sequences kept for prefix reuse, oldest first
	closed  bool
	stats   BatcherStats
	window  []stepSample

	wake chan struct{}
	done chan struct{}
}

// BatcherOptions bound the batcher's work.
type BatcherOptions struct {
	MaxRunning   int // sequences in one step (default 8)
	MaxQueue     int // requests waiting for room (default 16; -1 none); more get ErrQueueFull
	PrefillChunk int // prompt tokens per step, shared by the prefilling sequences (default 128)
	PrefixCache  int // finished sequences kept for prefix reuse (default 16; -1 none)
}

// Defaults for BatcherOptions fields left zero.
const (
	DefaultMaxRunning        = 8
	DefaultMaxQueue          = 16
	DefaultBatchPrefillChunk = 128
	DefaultPrefixCache       = 16
)

// ErrQueueFull is returned by Submit when the pool cannot take the request
// now and the wait queue is full.
var ErrQueueFull = errors.New("server busy: the KV pool is in use and the wait queue is full")

// ErrBatcherClosed is returned by Submit after Close.
var ErrBatcherClosed = errors.New("batcher closed")

// MaxTokensError says a prompt and its max tokens exceed the context.
type MaxTokensError struct{ Prompt, MaxTokens, ContextLen int }

func (e *MaxTokensError) Error() string {
	return fmt.Sprintf("the prompt's %d tokens and max tokens %d exceed the model's context of %d tokens", e.Prompt, e.MaxTokens, e.ContextLen)
}

// BatchRequest is one request for the batcher.
type BatchRequest struct {
	Request
	// Logprobs asks for the log-probability of each sampled token, and
	// TopLogprobs (0..20) for that many most likely alternatives.
	Logprobs    bool
	TopLogprobs int
}

// MaxTopLogprobs bounds BatchRequest.TopLogprobs.
const MaxTopLogprobs = 20

// BatchEvent is one item of a Submit stream: an Event plus what a server
// reports beside it.
type BatchEvent struct {
	Event
	// Logprobs of the tokens sampled since the previous event.
	Logprobs []TokenLogprob
	// StopSequence: on EventDone with Stop StopString, the stop string hit.
	StopSequence string
	Usage        Usage // on EventDone
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens     int
	CachedTokens     int // prompt tokens served from the cache (prefix reuse)
	CompletionTokens int
}

// TokenLogprob is the log-probability of a sampled token under the model
// (before temperature and the other sampling rules).
type TokenLogprob struct {
	Token   string
	Bytes   []byte
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is one of the most likely tokens at a position.
type TopLogprob struct {
	Token   string
	Bytes   []byte
	Logprob float32
}

// BatcherStats is a snapshot of the batcher's work.
type BatcherStats struct {
	Running, Queued, Cached int   // sequences decoding/prefilling, waiting, kept for reuse
	Steps                   int64 // Forward calls
	StepRows                int64 // rows over all steps
	MaxSeqsInStep           int   // most sequences one step has held
	MultiSeqSteps           int64 // steps holding two or more sequences
	PrefillTokens           int64 // prompt tokens computed
	DecodeTokens            int64 // tokens sampled
	ReusedTokens            int64 // prompt tokens served from the cache
	Preempted               int64 // sequences sent back to the queue to make room
	Rejected                int64 // ErrQueueFull answers
	// Recent throughput (the last 10 s of steps): tokens over the time of
	// the steps that computed them.
	PrefillTokensPerS, DecodeTokensPerS float64
}

type stepSample struct {
	at              time.Time
	dur             time.Duration
	prefill, decode int
}

const rateWindow = 10 * time.Second

type idleSeq struct {
	kv     *kvcache.Sequence
	tokens []int32
}

// batchSeq is one request in the batcher.
type batchSeq struct {
	ctx context.Context
	req BatchRequest
	out *outbox

	prompt     []int32
	promptText string
	kv         *kvcache.Sequence
	hist       []int32 // tokens that are (or are to be) in the cache
	computed   int     // hist[:computed] have K/V
	cached     int     // prompt tokens reused at first admission
	admitted   bool

	sampler  *sample.Sampler
	stopper  *sample.Stopper
	dec      *tokenizer.StreamDecoder
	parser   *outputParser
	text     string
	shown    int
	sampled  int
	logprobs []TokenLogprob
}

// NewBatcher starts a batcher on e. Close stops it.
func (e *Engine) NewBatcher(o BatcherOptions) *Batcher {
	if o.MaxRunning <= 0 {
		o.MaxRunning = DefaultMaxRunning
	}
	switch {
	case o.MaxQueue == 0:
		o.MaxQueue = DefaultMaxQueue
	case o.MaxQueue < 0:
		o.MaxQueue = 0 // no waiting: busy is ErrQueueFull at once
	}
	if o.PrefillChunk <= 0 {
		o.PrefillChunk = DefaultBatchPrefillChunk
	}
	if o.PrefixCache == 0 {
		o.PrefixCache = DefaultPrefixCache
	}
	b := &Batcher{e: e, opts: o, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go b.loop()
	return b
}

// Options returns the options in effect (defaults filled in).
func (b *Batcher) Options() BatcherOptions { return b.opts }

// Close ends every request (EventError) and stops the loop; it frees the
// pages the batcher holds.
func (b *Batcher) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.done
		return
	}
	b.closed = true
	b.mu.Unlock()
	b.poke()
	<-b.done
}

func (b *Batcher) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// CanBatch says why the Batcher cannot serve this engine's model, or nil.
// Hybrid models keep a recurrent state per sequence in a few slots
// (state.go) that the batcher does not yet hand out.
func (e *Engine) CanBatch() error {
	if e.state != nil {
		return fmt.Errorf("%s is a hybrid (recurrent-state) model: batched serving supports attention-only models for now", e.info.Name)
	}
	return nil
}

// PromptTokens renders and tokenizes req as Submit would and returns the
// prompt's token count (count_tokens).
func (e *Engine) PromptTokens(req Request) (int, error) {
	ids, err := e.encodePrompt(req)
	return len(ids), err
}

// Submit queues req and returns its event stream, closed after EventDone
// or EventError. The first event is EventProgress when the request is
// admitted into the pool (Done: prompt tokens served from the cache,
// Total: prompt tokens); a request that waits in the queue sees nothing
// before it. Cancelling ctx ends the request within one step and frees
// its pages. Errors known before queuing are returned directly: sampling
// parameters, template errors, a *ContextFullError when the prompt leaves
// no room in the context, a *kvcache.PoolFullError when it is larger than
// the whole pool, and ErrQueueFull.
func (b *Batcher) Submit(ctx context.Context, req BatchRequest) (<-chan BatchEvent, error) {
	e := b.e
	if err := e.CanBatch(); err != nil {
		return nil, err
	}
	sp, err := sample.New(sample.Params{
		Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK, TopP: req.Sampling.TopP,
		MinP: req.Sampling.MinP, RepeatPenalty: req.Sampling.RepeatPenalty,
		RepeatLastN: req.Sampling.RepeatLastN, Seed: req.Sampling.Seed,
	})
	if err != nil {
		return nil, err
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs {
		return nil, fmt.Errorf("top_logprobs %d: must be 0..%d", req.TopLogprobs, MaxTopLogprobs)
	}
	text, prompt, err := e.renderPrompt(req.Request)
	if err != nil {
		return nil, err
	}
	if err := e.fitsAlone(len(prompt)); err != nil {
		return nil, err
	}
	if req.MaxTokens > 0 && len(prompt)+req.MaxTokens > e.info.ContextLen {
		return nil, &MaxTokensError{Prompt: len(prompt), MaxTokens: req.MaxTokens, ContextLen: e.info.ContextLen}
	}
	s := &batchSeq{
		ctx: ctx, req: req, out: newOutbox(),
		prompt: prompt, promptText: text, hist: slices.Clone(prompt),
		sampler: sp, stopper: sample.NewStopper(e.tok.EOGs(), req.Sampling.Stop),
		dec: e.tok.NewStreamDecoder(), parser: newOutputParser(e.tmpl, text, len(req.Tools) > 0, req.Tools...),
	}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return nil, ErrBatcherClosed
	case len(b.queue) >= b.opts.MaxQueue && (len(b.queue) > 0 || len(b.running) >= b.opts.MaxRunning):
		b.stats.Rejected++
		b.mu.Unlock()
		return nil, ErrQueueFull
	}
	b.queue = append(b.queue, s)
	b.mu.Unlock()
	context.AfterFunc(ctx, b.poke)
	b.poke()
	return s.out.stream(ctx), nil
}

// fitsAlone checks that a prompt of n tokens leaves room for one token in
// the context and in the whole pool.
func (e *Engine) fitsAlone(n int) error {
	e.poolMu.RLock()
	ps := e.pool.Stats()
	dt := e.layout.DType
	e.poolMu.RUnlock()
	need := n + 1
	full := &kvcache.PoolFullError{Asked: need, Fit: ps.TokensCapacity, Capacity: ps.TokensCapacity, Used: ps.TokensUsed,
		DType: dt, BytesPerToken: ps.BytesPerToken, NoChat: true}
	if need > e.info.ContextLen {
		full.Fit = min(full.Fit, e.info.ContextLen)
		return &ContextFullError{Need: need, ContextLen: e.info.ContextLen, NoChat: true, pool: full}
	}
	if need > ps.TokensCapacity {
		return full
	}
	return nil
}

// Stats is a snapshot of the batcher's counters.
func (b *Batcher) Stats() BatcherStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.stats
	st.Running, st.Queued, st.Cached = len(b.running), len(b.queue), len(b.idle)
	var pd, dd time.Duration
	var pt, dt int
	cut := time.Now().Add(-rateWindow)
	for _, w := range b.window {
		if w.at.Before(cut) {
			continue
		}
		if w.prefill > 0 {
			pd += w.dur
			pt += w.prefill
		}
		if w.decode > 0 {
			dd += w.dur
			dt += w.decode
		}
	}
	if pd > 0 {
		st.PrefillTokensPerS = float64(pt) / pd.Seconds()
	}
	if dd > 0 {
		st.DecodeTokensPerS = float64(dt) / dd.Seconds()
	}
	return st
}

// --- the loop ---

func (b *Batcher) loop() {
	defer close(b.done)
	for {
		b.mu.Lock()
		closed := b.closed
		idle := len(b.running) == 0 && len(b.queue) == 0
		b.mu.Unlock()
		if closed {
			b.shutdown()
			return
		}
		if idle {
			<-b.wake
			continue
		}
		if !b.step() {
			// Nothing could run (requests wait for room that only a
			// cancellation can make): wait for a change.
			<-b.wake
		}
	}
}

func (b *Batcher) shutdown() {
	e := b.e
	e.mu.Lock()
	defer e.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range append(b.running, b.queue...) {
		if s.kv != nil {
			s.kv.Free()
		}
		s.out.push(BatchEvent{Event: Event{Kind: EventError, Err: ErrBatcherClosed}})
		s.out.close()
	}
	for _, is := range b.idle {
		is.kv.Free()
	}
	b.running, b.queue, b.idle = nil, nil, nil
}

// step runs one batched forward; it reports false when nothing ran.
func (b *Batcher) step() bool {
	e := b.e
	e.mu.Lock()
	defer e.mu.Unlock()
	b.dropCancelled()
	b.admit()

	b.mu.Lock()
	run := slices.Clone(b.running)
	b.mu.Unlock()
	if len(run) == 0 {
		return false
	}

	// Decode rows first (one token each), then prefill chunks within the
	// budget, oldest first.
	type part struct {
		s    *batchSeq
		n    int
		last bool // reaches the end of hist: its logits are sampled
	}
	var parts []part
	budget := b.opts.PrefillChunk
	for _, s := range run {
		if len(s.hist)-s.computed == 1 {
			parts = append(parts, part{s, 1, true})
		}
	}
	for _, s := range run {
		pend := len(s.hist) - s.computed
		if pend <= 1 || budget <= 0 {
			continue
		}
		n := min(pend, budget)
		budget -= n
		parts = append(parts, part{s, n, s.computed+n == len(s.hist)})
	}
	if len(parts) == 0 {
		return false
	}
	batch := &model.Batch{}
	var rows []int
	prefill, decode := 0, 0
	for _, p := range parts {
		off := len(batch.Tokens)
		batch.Tokens = append(batch.Tokens, p.s.hist[p.s.computed:p.s.computed+p.n]...)
		for i := range p.n {
			batch.Pos = append(batch.Pos, int32(p.s.computed+i))
		}
		batch.Seqs = append(batch.Seqs, model.SeqSpan{Offset: off, Cached: p.s.computed, NewTokens: p.n, Pages: p.s.kv.Pages()})
		if p.last {
			rows = append(rows, off+p.n-1)
		}
		if p.s.computed < len(p.s.prompt) {
			prefill += p.n
		}
	}
	t0 := time.Now()
	logits, err := e.mdl.Forward(batch, rows)
	if err == nil {
		err = backendErr(e.be)
	}
	dur := time.Since(t0)
	if err != nil {
		// A failed step leaves the pages of its sequences unknown: end
		// them all with the error.
		for _, p := range parts {
			b.end(p.s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
		}
		return true
	}
	V := e.mdl.Config.Vocab
	var cont []*batchSeq
	r := 0
	for _, p := range parts {
		p.s.computed += p.n
		if !p.last {
			continue
		}
		lg := logits[r*V : (r+1)*V]
		r++
		decode++
		if b.sampleNext(p.s, lg) {
			cont = append(cont, p.s)
		}
	}
	b.record(len(parts), len(batch.Tokens), prefill, decode, dur)
	// Reserve the page slot of each continuing sequence's new token,
	// oldest first; when the pool is full, younger sequences make room.
	for _, s := range cont {
		if s.kv == nil {
			continue // preempted by an older one
		}
		b.appendLast(s)
	}
	return true
}

func (b *Batcher) record(seqs, rows, prefill, decode int, dur time.Duration) {
	e := b.e
	b.mu.Lock()
	st := &b.stats
	st.Steps++
	st.StepRows += int64(rows)
	st.MaxSeqsInStep = max(st.MaxSeqsInStep, seqs)
	if seqs > 1 {
		st.MultiSeqSteps++
	}
	st.PrefillTokens += int64(prefill)
	st.DecodeTokens += int64(decode)
	now := time.Now()
	b.window = append(b.window, stepSample{at: now, dur: dur, prefill: prefill, decode: decode})
	cut := 0
	for cut < len(b.window) && now.Sub(b.window[cut].at) > rateWindow {
		cut++
	}
	b.window = b.window[cut:]
	b.mu.Unlock()
	e.statsMu.Lock()
	e.prefillTokens += int64(prefill)
	e.decodeTokens += int64(decode)
	e.statsMu.Unlock()
}

// dropCancelled ends the requests whose context is done and frees their
// pages at once.
func (b *Batcher) dropCancelled() {
	b.mu.Lock()
	var gone []*batchSeq
	keep := b.running[:0]
	for _, s := range b.running {
		if s.ctx.Err() != nil {
			gone = append(gone, s)
		} else {
			keep = append(keep, s)
		}
	}
	b.running = keep
	q := b.queue[:0]
	for _, s := range b.queue {
		if s.ctx.Err() != nil {
			gone = append(gone, s)
		} else {
			q = append(q, s)
		}
	}
	b.queue = q
	b.mu.Unlock()
	for _, s := range gone {
		if s.kv != nil {
			s.kv.Free()
			s.kv = nil
		}
		s.out.push(BatchEvent{Event: Event{Kind: EventDone, Stop: StopCancelled}, Usage: s.usage()})
		s.out.close()
	}
}

// admit moves queued requests into the running set while they fit.
func (b *Batcher) admit() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 || len(b.running) >= b.opts.MaxRunning {
			b.mu.Unlock()
			return
		}
		s := b.queue[0]
		nrun := len(b.running)
		b.mu.Unlock()
		if !b.place(s, nrun) {
			return // first in line waits: requests start in order
		}
		b.mu.Lock()
		b.queue = b.queue[1:]
		b.running = append(b.running, s)
		b.mu.Unlock()
	}
}

// place gives s a sequence holding its history (sharing the longest cached
// prefix) and pages for the rest. Room is kept for each running sequence's
// next page; the prefix cache is evicted, oldest first, to make room.
func (b *Batcher) place(s *batchSeq, nrun int) bool {
	pool := b.e.pool
	for {
		kv, err := b.sequenceFor(s.hist)
		if err != nil {
			return false
		}
		start, err := kv.Reuse(s.hist)
		if err == nil && pool.Stats().PagesFree >= nrun {
			s.kv, s.computed = kv, start
			if !s.admitted {
				s.admitted, s.cached = true, start
				s.out.push(BatchEvent{Event: Event{Kind: EventProgress, Done: start, Total: len(s.prompt)}})
				b.mu.Lock()
				b.stats.ReusedTokens += int64(start)
				b.mu.Unlock()
				b.e.statsMu.Lock()
				b.e.reusedTokens += int64(start)
				b.e.statsMu.Unlock()
			}
			return true
		}
		kv.Free()
		var full *kvcache.PoolFullError
		if err != nil && !errors.As(err, &full) {
			b.end(s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
			return false
		}
		if !b.evictIdle() {
			return false
		}
	}
}

// sequenceFor returns a new sequence that shares the longest prefix of
// tokens held by a cached or running sequence (a fork, or the cached
// sequence itself when tokens cover almost all of it).
func (b *Batcher) sequenceFor(tokens []int32) (*kvcache.Sequence, error) {
	pool := b.e.pool
	ps := pool.Layout().PageSize
	best, bestN, bestIdle := (*kvcache.Sequence)(nil), 0, -1
	b.mu.Lock()
	for i, is := range b.idle {
		if n := commonPrefix(is.tokens, tokens); n > bestN {
			best, bestN, bestIdle = is.kv, n, i
		}
	}
	for _, r := range b.running {
		if r.kv == nil {
			continue
		}
		if n := min(commonPrefix(r.hist, tokens), r.computed); n > bestN {
			best, bestN, bestIdle = r.kv, n, -1
		}
	}
	if bestN < ps { // less than a page: nothing to share
		b.mu.Unlock()
		return pool.NewSequence(), nil
	}
	if bestIdle >= 0 && bestN >= len(b.idle[bestIdle].tokens)-ps {
		// The cached sequence is (almost) all prefix: take it over.
		b.idle = slices.Delete(b.idle, bestIdle, bestIdle+1)
		b.mu.Unlock()
		return best, nil
	}
	b.mu.Unlock()
	kv, err := best.Fork()
	if err != nil {
		return nil, err
	}
	kv.Truncate(bestN)
	return kv, nil
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// evictIdle frees the oldest cached sequence; false when there is none.
func (b *Batcher) evictIdle() bool {
	b.mu.Lock()
	if len(b.idle) == 0 {
		b.mu.Unlock()
		return false
	}
	is := b.idle[0]
	b.idle = b.idle[1:]
	b.mu.Unlock()
	is.kv.Free()
	return true
}

// appendLast reserves the cache slot of s's newest token. When the pool is
// full the prefix cache goes first, then the youngest running sequence is
// preempted (its pages freed; it goes back to the head of the queue and
// recomputes its history when readmitted). A sequence alone in a full
// pool ends with StopPoolFull.
func (b *Batcher) appendLast(s *batchSeq) {
	id := s.hist[len(s.hist)-1]
	for {
		start, err := s.kv.Append(id)
		if err == nil {
			s.computed = min(s.computed, start) // a dropped shared page is recomputed
			return
		}
		var full *kvcache.PoolFullError
		if !errors.As(err, &full) {
			b.end(s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
			return
		}
		if b.evictIdle() {
			continue
		}
		b.mu.Lock()
		victim := b.running[len(b.running)-1]
		alone := len(b.running) == 1
		b.mu.Unlock()
		if alone {
			s.hist = s.hist[:len(s.hist)-1]
			full.NoChat = true
			b.finish(s, StopPoolFull, "", full)
			return
		}
		b.preempt(victim)
		if victim == s {
			return
		}
	}
}

// preempt frees s's pages and puts it at the head of the queue.
func (b *Batcher) preempt(s *batchSeq) {
	s.kv.Free()
	s.kv, s.computed = nil, 0
	b.mu.Lock()
	b.running = slices.DeleteFunc(b.running, func(r *batchSeq) bool { return r == s })
	b.queue = append([]*batchSeq{s}, b.queue...)
	b.stats.Preempted++
	b.mu.Unlock()
}

// sampleNext samples s's next token from lg and handles it as Session
// does; it reports whether s goes on (its token was added to hist).
func (b *Batcher) sampleNext(s *batchSeq, lg []float32) bool {
	e := b.e
	id := s.sampler.Sample(lg, s.hist)
	if s.req.Logprobs {
		s.logprobs = append(s.logprobs, tokenLogprob(e.tok, lg, id, s.req.TopLogprobs))
	}
	if s.stopper.IsEOG(id) {
		b.finish(s, StopEOS, "", nil)
		return false
	}
	s.sampled++
	s.text += s.dec.Add(id)
	keep, hit := s.stopper.Check(s.text)
	if hit {
		stopSeq := ""
		for _, st := range s.req.Sampling.Stop {
			if st != "" && strings.HasPrefix(s.text[keep:], st) {
				stopSeq = st
				break
			}
		}
		s.text = s.text[:keep]
		b.emit(s, keep)
		b.finish(s, StopString, stopSeq, nil)
		return false
	}
	b.emit(s, keep)
	switch {
	case s.parser.stopAtCall && s.parser.calls > 0:
		b.finish(s, StopToolCall, "", nil)
		return false
	case s.req.MaxTokens > 0 && s.sampled >= s.req.MaxTokens,
		len(s.hist)+1 >= e.info.ContextLen:
		b.finish(s, StopMaxTokens, "", nil)
		return false
	}
	s.hist = append(s.hist, id)
	return true
}

func (b *Batcher) emit(s *batchSeq, upto int) {
	evs := s.parser.feed(s.text[s.shown:upto])
	s.shown = upto
	for _, ev := range evs {
		be := BatchEvent{Event: ev}
		if ev.Kind == EventText || ev.Kind == EventThinking {
			be.Logprobs, s.logprobs = s.logprobs, nil
		}
		s.out.push(be)
	}
}

// finish ends s normally; its sequence goes to the prefix cache.
func (b *Batcher) finish(s *batchSeq, stop StopReason, stopSeq string, err error) {
	s.text += s.dec.Flush()
	b.emit(s, len(s.text))
	for _, ev := range s.parser.flush() {
		s.out.push(BatchEvent{Event: ev})
	}
	if s.parser.calls > 0 && stop == StopEOS {
		stop = StopToolCall
	}
	done := BatchEvent{Event: Event{Kind: EventDone, Stop: stop, Err: err}, StopSequence: stopSeq, Usage: s.usage()}
	done.Logprobs, s.logprobs = s.logprobs, nil
	b.end(s, done, true)
}

func (s *batchSeq) usage() Usage {
	return Usage{PromptTokens: len(s.prompt), CachedTokens: s.cached, CompletionTokens: s.sampled}
}

// end sends s's last event and removes it; its pages are cached for
// prefix reuse (keep) or freed.
func (b *Batcher) end(s *batchSeq, last BatchEvent, keep bool) {
	s.out.push(last)
	s.out.close()
	b.mu.Lock()
	b.running = slices.DeleteFunc(b.running, func(r *batchSeq) bool { return r == s })
	b.queue = slices.DeleteFunc(b.queue, func(r *batchSeq) bool { return r == s })
	kv := s.kv
	s.kv = nil
	var evict []idleSeq
	if kv != nil && keep && b.opts.PrefixCache > 0 && kv.Len() > 0 {
		b.idle = append(b.idle, idleSeq{kv: kv, tokens: kv.Tokens()})
		kv = nil
		if n := len(b.idle) - b.opts.PrefixCache; n > 0 {
			evict = slices.Clone(b.idle[:n])
			b.idle = b.idle[n:]
		}
	}
	b.mu.Unlock()
	if kv != nil {
		kv.Free()
	}
	for _, is := range evict {
		is.kv.Free()
	}
}

// DropCache frees every sequence kept for prefix reuse.
func (b *Batcher) DropCache() {
	b.e.mu.Lock()
	defer b.e.mu.Unlock()
	for b.evictIdle() {
	}
}

// tokenLogprob is id's log-softmax under lg, with the top k alternatives.
func tokenLogprob(tok *tokenizer.Tokenizer, lg []float32, id int32, k int) TokenLogprob {
	mx := float32(math.Inf(-1))
	for _, v := range lg {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range lg {
		sum += math.Exp(float64(v - mx))
	}
	lse := float64(mx) + math.Log(sum)
	lp := func(i int32) float32 { return float32(float64(lg[i]) - lse) }
	out := TokenLogprob{Token: tok.Decode([]int32{id}), Bytes: tok.TokenBytes(id), Logprob: lp(id)}
	if k > 0 {
		top := make([]int32, 0, k+1) // the k largest, best first (ties: lower id)
		for i := range lg {
			if len(top) == k && lg[i] <= lg[top[k-1]] {
				continue
			}
			j := len(top)
			for j > 0 && lg[top[j-1]] < lg[i] {
				j--
			}
			top = slices.Insert(top, j, int32(i))
			if len(top) > k {
				top = top[:k]
			}
		}
		for _, t := range top {
			out.Top = append(out.Top, TopLogprob{Token: tok.Decode([]int32{t}), Bytes: tok.TokenBytes(t), Logprob: lp(t)})
		}
	}
	return out
}

// --- event delivery ---

// outbox decouples the loop from the reader: the loop never blocks on a
// slow client (events of one request are bounded by its max tokens).
type outbox struct {
	mu     sync.Mutex
	evs    []BatchEvent
	closed bool
	ready  chan struct{}
}

func newOutbox() *outbox { return &outbox{ready: make(chan struct{}, 1)} }

func (o *outbox) push(ev BatchEvent) {
	o.mu.Lock()
	if !o.closed {
		o.evs = append(o.evs, ev)
	}
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) signal() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// stream forwards the events to a channel until the last one, or until
// ctx is done (the reader is gone; the loop then drops the request).
func (o *outbox) stream(ctx context.Context) <-chan BatchEvent {
	ch := make(chan BatchEvent, 16)
	go func() {
		defer close(ch)
		for {
			o.mu.Lock()
			evs, closed := o.evs, o.closed
			o.evs = nil
			o.mu.Unlock()
			for _, ev := range evs {
				select {
				case ch <- ev:
				case <-ctx.Done():
					if ev.Kind != EventDone && ev.Kind != EventError {
						continue
					}
					select { // a terminal event is still offered briefly
					case ch <- ev:
					case <-time.After(time.Second):
					}
				}
			}
			if closed && len(evs) == 0 {
				return
			}
			if !closed {
				<-o.ready
			}
		}
	}()
	return ch
}
