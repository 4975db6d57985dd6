package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ftchat/ftchat/engine/chat"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/sample"
	"github.com/ftchat/ftchat/engine/tokenizer"
	"github.com/ftchat/ftchat/gpu"
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
// Hybrid models (Qwen3.5/3.6) also give each sequence a recurrent-state
// slot (state.go) beside its pages: admission waits for a free slot as it
// waits for pages, the prefill snapshots the state at the prompt's turn
// boundaries, and a request shares a prefix only up to a position whose
// state is kept (a snapshot, or a finished sequence's live state), which
// it copies into its own slot.
//
// A Batcher is the only user of the engine's pool and state slots while it
// runs (it takes the engine's lock for each step, so it coexists with
// Sessions, but a Session on a hybrid model may take a slot it holds, and
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
	prof    *stepProfile // FTCHAT_BATCH_PROFILE=1, else nil

	wake chan struct{}
	done chan struct{}

	sampleTime time.Duration // loop-owned: this step's sampling so far

	vocabOnce sync.Once
	vocab     *sample.Vocab // for JSON constraints, built on first use
	callOnce  sync.Once
	cvocab    *sample.Vocab // for forced calls, built on first use
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
	// JSON, when set, constrains the answer to a JSON document of this
	// schema (sample.AnyJSONObject for any object): tokens that would
	// break it are masked out before sampling, and the answer ends when
	// the document does. Not with Tools, nor with a prompt that opens the
	// model's thinking (the constraint would apply to the thinking).
	JSON *sample.Schema
	// ForceCall, when set, makes the answer begin with a call of one of
	// Tools (tool_choice required, or one named tool) in the model's call
	// format: decoding is constrained to the call's syntax, the tool's
	// name, and, where the format's arguments are JSON, the tool's
	// parameter schema (keywords the constraint cannot enforce dropped;
	// any JSON object when it does not compile even so). Not with JSON.
	ForceCall *ForceCall
}

// MaxTopLogprobs bounds BatchRequest.TopLogprobs.
const MaxTopLogprobs = 20

// EventToolCallDelta is a BatchEvent kind (Submit streams only): part of
// a tool call while the model writes it, in BatchEvent.CallDelta. The
// call's EventToolCall follows when it is complete.
const EventToolCallDelta EventKind = 100

// ToolCallDelta is part of a tool call being generated. The first delta
// of a call has its Name; the Args of all its deltas, concatenated, are
// the arguments as the model wrote them (a JSON object), which the
// complete call (EventToolCall, same Index) was parsed from. For Qwen's
// XML calls they are the complete call's ArgsJSON exactly: the last delta
// comes just before the EventToolCall.
type ToolCallDelta struct {
	Index int // the call's place among the answer's EventToolCalls
	Name  string
	Args  string
}

// BatchEvent is one item of a Submit stream: an Event plus what a server
// reports beside it.
type BatchEvent struct {
	Event
	CallDelta *ToolCallDelta // EventToolCallDelta
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
	// DecodeSteps counts the steps that sampled at least one row;
	// SampledRows[i] those that sampled up to SampledRowsBuckets[i] rows
	// (and more than the bucket before; the last entry: more than every
	// bucket), so DecodeTokens/DecodeSteps is the rows a step carried.
	DecodeSteps int64
	SampledRows []int64
	// SampledTogether counts the rows whose token was drawn by the step's
	// one sampling call for all rows (Logits.AnswerRows: greedy and top-k
	// rows without a JSON constraint or logprobs); the rest were sampled
	// row by row.
	SampledTogether int64
	Times           StepTimes
	// Graphs: on the GPU, how the recorded decode steps were issued so far
	// (gpu.GraphStats: flushes of recorded chunks replayed as a cached CUDA
	// graph, captured into a new one, or issued directly); zero elsewhere.
	// Captures growing with the steps mean steps that are not replayed.
	Graphs GraphFlushes
	// Recent throughput (the last 10 s of steps): tokens over the time of
	// the steps that computed them.
	PrefillTokensPerS, DecodeTokensPerS float64
}

// GraphFlushes counts a GPU backend's recorded-step flushes by kind.
type GraphFlushes struct {
	Captures, Replays, Direct int
	Off                       bool // capture failed once: no graphs since
}

// SampledRowsBuckets are the upper bounds of BatcherStats.SampledRows.
var SampledRowsBuckets = []int{1, 2, 4, 8, 16, 32, 64, 128}

// StepTimes sums the batcher's step time by phase (host wall clock).
type StepTimes struct {
	// Forward: model.Forward until it returns. On the GPU that is issuing
	// the step's ops; the device runs them meanwhile and after.
	Forward time.Duration
	// Wait: FTCHAT_BATCH_PROFILE=1 only, the wait for the device to
	// finish the forward (without it, that wait is part of Sample).
	Wait time.Duration
	// Sample: drawing the tokens (device sampling calls, downloads, the
	// host's part of the draw).
	Sample time.Duration
	// Other: the rest of the step (admission, the batch's assembly, stop
	// checks, text decoding, events, page bookkeeping).
	Other time.Duration
}

type stepSample struct {
	at              time.Time
	dur             time.Duration
	prefill, decode int
}

const rateWindow = 10 * time.Second

type idleSeq struct {
	kv     *kvcache.Sequence
	st     *seqState // hybrid models: the live state at kv.Len() and snapshots
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
	st         *seqState // hybrid models: the recurrent state at computed
	snapAt     []int     // hybrid models: prompt positions to snapshot the state at
	hist       []int32   // tokens that are (or are to be) in the cache
	computed   int       // hist[:computed] have K/V
	cached     int       // prompt tokens reused at first admission
	admitted   bool

	sampler  *sample.Sampler
	json     constraint // nil without BatchRequest.JSON or ForceCall
	masked   []float32  // the logits after the mask
	stopper  *sample.Stopper
	dec      *tokenizer.StreamDecoder
	parser   *outputParser
	calls    *callStreamer // nil when the call format is not streamed
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
	if e.state != nil {
		// One live slot per running sequence; the rest hold snapshots.
		o.MaxRunning = min(o.MaxRunning, e.state.l.Slots)
	}
	b := &Batcher{e: e, opts: o, wake: make(chan struct{}, 1), done: make(chan struct{})}
	b.stats.SampledRows = make([]int64, len(SampledRowsBuckets)+1)
	if os.Getenv("FTCHAT_BATCH_PROFILE") == "1" {
		b.prof = &stepProfile{every: 5 * time.Second}
	}
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
// Every model loaded today can be batched (hybrid models through their
// state slots); the check stays for callers that ask.
func (e *Engine) CanBatch() error {
	if e.mdl == nil {
		return errors.New("no model loaded")
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
	text, spans, prompt, err := e.renderPromptSpans(req.Request)
	if err != nil {
		return nil, err
	}
	var snapAt []int
	if e.state != nil {
		snapAt = e.batchSnapshots(e.turnBoundaries(text, spans, prompt))
	}
	if err := e.fitsAlone(len(prompt)); err != nil {
		return nil, err
	}
	if req.MaxTokens > 0 && len(prompt)+req.MaxTokens > e.info.ContextLen {
		return nil, &MaxTokensError{Prompt: len(prompt), MaxTokens: req.MaxTokens, ContextLen: e.info.ContextLen}
	}
	s := &batchSeq{
		ctx: ctx, req: req, out: newOutbox(),
		prompt: prompt, promptText: text, hist: slices.Clone(prompt), snapAt: snapAt,
		sampler: sp, stopper: sample.NewStopper(e.tok.EOGs(), req.Sampling.Stop),
		dec: e.tok.NewStreamDecoder(), parser: newOutputParser(e.tmpl, text, len(req.Tools) > 0, req.Tools...),
	}
	if req.JSON != nil {
		switch {
		case len(req.Tools) > 0:
			return nil, errors.New("a JSON response format cannot be combined with tools: the constraint leaves no room for a call")
		case chat.PromptOpensThinking(text):
			return nil, errors.New("a JSON response format is not supported with a prompt that opens the model's thinking: the constraint would apply to the thinking")
		}
		s.json = sample.NewJSONConstraint(b.jsonVocab(), req.JSON)
	}
	if req.ForceCall != nil {
		if s.json, err = b.forceCall(req.Request, req.ForceCall, req.JSON != nil, text); err != nil {
			return nil, err
		}
	}
	if ct, ok := e.tmpl.(*chatTemplate); ok && len(req.Tools) > 0 {
		switch ct.format {
		case chat.ToolHermes, chat.ToolNone: // ToolNone: Hermes, inlined
			s.calls = &callStreamer{thinking: chat.PromptOpensThinking(text)}
		case chat.ToolQwenXML:
			s.calls = &callStreamer{thinking: chat.PromptOpensThinking(text), xml: true, props: toolProps(req.Tools)}
		}
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

// batchSnapshots moves the turn boundaries where a prompt's state is
// snapshotted down to page boundaries when the pool cannot copy pages: a
// request that forks the sequence there then owns every page it writes
// (a shared, partly filled last page would be dropped and recomputed,
// which the state cannot follow).
func (e *Engine) batchSnapshots(at []int) []int {
	if _, ok := e.be.(kvcache.PageCopier); ok {
		return at
	}
	e.poolMu.RLock()
	ps := e.pool.Layout().PageSize
	e.poolMu.RUnlock()
	var out []int
	for _, c := range at {
		if c -= c % ps; c > 0 && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// jsonVocab is the tokenizer's vocabulary prepared for JSON masks: text
// and byte tokens only (never control tokens), end-of-generation apart.
func (b *Batcher) jsonVocab() *sample.Vocab {
	b.vocabOnce.Do(func() {
		tok := b.e.tok
		b.vocab = sample.NewVocab(tok.VocabSize(), tok.TokenBytes, func(id int32) bool {
			t := tok.Type(id)
			return t == tokenizer.TypeNormal || t == tokenizer.TypeByte
		}, tok.EOGs())
	})
	return b.vocab
}

// fitsAlone checks that a prompt of n tokens leaves room for one token in
// the context and in the whole pool.
func (e *Engine) fitsAlone(n int) error {
	e.poolMu.RLock()
	ps := e.pool.Stats()
	kt, vt := e.layout.KType(), e.layout.VType()
	e.poolMu.RUnlock()
	if vt == kt {
		vt = kvcache.Auto
	}
	need := n + 1
	full := &kvcache.PoolFullError{Asked: need, Fit: ps.TokensCapacity, Capacity: ps.TokensCapacity, Used: ps.TokensUsed,
		DType: kt, VDType: vt, BytesPerToken: ps.BytesPerToken, NoChat: true}
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
	graphs := graphFlushes(b.e.be) // a device round trip: not under mu
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.stats
	st.Graphs = graphs
	st.SampledRows = slices.Clone(b.stats.SampledRows)
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

// graphFlushes reads a GPU backend's step recorder counters (one round
// trip to the device thread; zero for other backends).
func graphFlushes(be model.Backend) GraphFlushes {
	g, ok := be.(*gpu.Backend)
	if !ok {
		return GraphFlushes{}
	}
	st, err := g.GraphStats()
	if err != nil {
		return GraphFlushes{}
	}
	return GraphFlushes{Captures: st.Captures, Replays: st.Replays, Direct: st.Direct, Off: st.Disabled}
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
		b.freeSeq(s)
		s.out.push(BatchEvent{Event: Event{Kind: EventError, Err: ErrBatcherClosed}})
		s.out.close()
	}
	for _, is := range b.idle {
		b.freeIdle(is)
	}
	b.running, b.queue, b.idle = nil, nil, nil
}

// step runs one batched forward; it reports false when nothing ran.
func (b *Batcher) step() bool {
	e := b.e
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
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
		for _, c := range s.snapAt { // a chunk ends where the state is snapshotted
			if c > s.computed && c < s.computed+n {
				n = c - s.computed
				break
			}
		}
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
		batch.Seqs = append(batch.Seqs, model.SeqSpan{Offset: off, Cached: p.s.computed, NewTokens: p.n, Pages: p.s.kv.Pages(), State: p.s.st.slot()})
		if p.last {
			rows = append(rows, off+p.n-1)
		}
		if p.s.computed < len(p.s.prompt) {
			prefill += p.n
		}
	}
	t0 := time.Now()
	// row r's logits: left on the device, where the sampling asks only for
	// what it needs, unless FTCHAT_DEVICE_SAMPLING=0 copies them all.
	var rowLogits func(r int) sample.Logits
	var dev *model.Logits
	var err error
	if deviceSampling() {
		if dev, err = e.mdl.ForwardLogits(batch, rows); err == nil {
			rowLogits = dev.Row
		}
	} else {
		var logits []float32
		logits, err = e.mdl.Forward(batch, rows)
		V := e.mdl.Config.Vocab
		rowLogits = func(r int) sample.Logits { return sample.Slice(logits[r*V : (r+1)*V]) }
	}
	if err == nil {
		err = backendErr(e.be)
	}
	var tm StepTimes
	tm.Forward = time.Since(t0)
	if sb, ok := e.be.(interface{ Synchronize() error }); ok && b.prof != nil && err == nil {
		t := time.Now()
		err = sb.Synchronize()
		tm.Wait = time.Since(t)
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
	var picks []*batchSeq // the sequences sampled, in logits row order
	for _, p := range parts {
		if p.last {
			picks = append(picks, p.s)
		}
	}
	b.sampleTime = 0
	pre, together := b.sampleTogether(dev, picks)
	var cont []*batchSeq
	r := 0
	for _, p := range parts {
		p.s.computed += p.n
		if st := p.s.st; st != nil {
			st.pos = p.s.computed
			if slices.Contains(p.s.snapAt, st.pos) {
				e.state.snapshot(st)
			}
		}
		if !p.last {
			continue
		}
		decode++
		if b.sampleNext(p.s, rowLogits(r), pre[r]) {
			cont = append(cont, p.s)
		}
		r++
	}
	// Reserve the page slot of each continuing sequence's new token,
	// oldest first; when the pool is full, younger sequences make room.
	for _, s := range cont {
		if s.kv == nil {
			continue // preempted by an older one
		}
		b.appendLast(s)
	}
	tm.Sample = b.sampleTime
	tm.Other = time.Since(start) - tm.Forward - tm.Wait - tm.Sample
	b.record(len(parts), len(batch.Tokens), prefill, decode, together, dur, tm)
	return true
}

// presampled is a row's token drawn by the step's sampling call for all
// rows (sampleTogether); ok false: the row is sampled on its own.
type presampled struct {
	id int32
	ok bool
}

// sampleTogether draws, with one call for the whole step
// (Logits.AnswerRows: one device round trip for all rows), the tokens of
// the sequences whose sampler asks only for an argmax or top-k
// candidates (Sampler.Query): those without a JSON constraint or
// logprobs, which read the whole row. pre[r] is the token of picks[r],
// drawn by Sampler.Finish as SampleFrom would; n counts them.
func (b *Batcher) sampleTogether(l *model.Logits, picks []*batchSeq) (pre []presampled, n int) {
	pre = make([]presampled, len(picks))
	if l == nil || len(picks) < 2 {
		return pre, 0 // one row: SampleFrom is the same single call
	}
	t := time.Now()
	defer func() { b.sampleTime += time.Since(t) }()
	V := b.e.mdl.Config.Vocab
	var rows []int // logits row r is picks[r]'s
	var qs []sample.Query
	for r, s := range picks {
		if s.json != nil || s.req.Logprobs {
			continue
		}
		if q, ok := s.sampler.Query(V, s.hist); ok {
			rows, qs = append(rows, r), append(qs, q)
		}
	}
	if len(qs) < 2 {
		return pre, 0
	}
	answers, ok := l.AnswerRows(rows, qs)
	if !ok {
		return pre, 0 // row by row (an error is met there again, and reported)
	}
	for i, r := range rows {
		if id, ok := picks[r].sampler.Finish(qs[i], answers[i], V); ok {
			pre[r] = presampled{id, true}
			n++
		}
	}
	return pre, n
}

func (b *Batcher) record(seqs, rows, prefill, decode, together int, dur time.Duration, tm StepTimes) {
	e := b.e
	b.mu.Lock()
	st := &b.stats
	st.Steps++
	if decode > 0 {
		st.DecodeSteps++
		i, _ := slices.BinarySearch(SampledRowsBuckets, decode)
		st.SampledRows[i]++
	}
	st.SampledTogether += int64(together)
	st.Times.Forward += tm.Forward
	st.Times.Wait += tm.Wait
	st.Times.Sample += tm.Sample
	st.Times.Other += tm.Other
	if b.prof != nil {
		b.prof.add(decode, together, tm)
	}
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
		b.freeSeq(s)
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
	if b.e.state != nil {
		return b.placeHybrid(s, nrun)
	}
	pool := b.e.pool
	for {
		kv, err := b.sequenceFor(s.hist)
		if err != nil {
			return false
		}
		start, err := kv.Reuse(s.hist)
		if err == nil && pool.Stats().PagesFree >= nrun {
			s.kv, s.computed = kv, start
			b.admitted(s, start)
			return true
		}
		kv.Free()
		if !b.retryAfterEvict(s, err) {
			return false
		}
	}
}

// retryAfterEvict follows an admission attempt that did not fit: an error
// other than a full pool ends s; otherwise the oldest idle sequence is
// evicted and the caller tries again (false when none is left to evict).
func (b *Batcher) retryAfterEvict(s *batchSeq, err error) bool {
	var full *kvcache.PoolFullError
	if err != nil && !errors.As(err, &full) {
		b.end(s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
		return false
	}
	return b.evictIdle()
}

// admitted reports s's first admission (with start prompt tokens reused).
func (b *Batcher) admitted(s *batchSeq, start int) {
	if s.admitted {
		return
	}
	s.admitted, s.cached = true, start
	s.out.push(BatchEvent{Event: Event{Kind: EventProgress, Done: start, Total: len(s.prompt)}})
	b.mu.Lock()
	b.stats.ReusedTokens += int64(start)
	b.mu.Unlock()
	b.e.statsMu.Lock()
	b.e.reusedTokens += int64(start)
	b.e.statsMu.Unlock()
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

// placeHybrid is place for hybrid models: s also needs a live state slot,
// and shares a prefix only up to a position whose state is kept (a
// snapshot of a cached or running sequence, or a cached sequence's live
// state), which is copied into its slot. No slot free (every one is live)
// means s waits, like no room in the pool.
func (b *Batcher) placeHybrid(s *batchSeq, nrun int) bool {
	e := b.e
	p := e.state
	for {
		src, pos, from, idle := b.hybridSource(s.hist)
		var kv *kvcache.Sequence
		var st *seqState
		if idle >= 0 && pos >= len(b.idle[idle].tokens)-e.pool.Layout().PageSize && b.idle[idle].st.live >= 0 {
			// The cached sequence is (almost) all prefix: take it over,
			// its live slot included.
			b.mu.Lock()
			is := b.idle[idle]
			b.idle = slices.Delete(b.idle, idle, idle+1)
			b.mu.Unlock()
			kv, st = is.kv, is.st
		} else {
			slot := b.freeStateSlot(from)
			if slot < 0 {
				if !b.evictIdle() {
					return false
				}
				continue
			}
			st = p.newSeq(nil)
			p.take(slot, st, slotLive)
			st.live, st.pos = slot, -1
			kv = e.pool.NewSequence()
			if pos > 0 {
				if f, err := src.Fork(); err == nil {
					kv.Free()
					kv = f
					kv.Truncate(pos)
				} else {
					pos, from = 0, -1
				}
			}
		}
		start, err := kv.ReuseAt(s.hist, pos)
		if err == nil && start != pos {
			// A shared tail page was dropped: no state is known there.
			kv.Truncate(0)
			start, err = kv.ReuseAt(s.hist, 0)
			from = -1
		}
		if err == nil && e.pool.Stats().PagesFree >= nrun {
			switch {
			case from < 0:
				p.be.ClearState(st.live)
			case from != st.live:
				p.be.CopyState(st.live, from)
				p.restores.Add(1)
			}
			p.trim(st, start)
			st.pos = start
			p.touch(st)
			s.kv, s.st, s.computed = kv, st, start
			b.admitted(s, start)
			return true
		}
		b.freeIdle(idleSeq{kv: kv, st: st})
		if !b.retryAfterEvict(s, err) {
			return false
		}
	}
}

// hybridSource finds the cached or running sequence that shares the
// longest prefix of tokens whose state is kept: its K/V, that position,
// the slot holding the state there, and its index in b.idle when it is
// cached (-1, 0, -1, -1 when none).
func (b *Batcher) hybridSource(tokens []int32) (kv *kvcache.Sequence, pos, slot, idle int) {
	slot, idle = -1, -1
	limit := len(tokens) - 1 // the last prompt token is always computed
	try := func(k *kvcache.Sequence, st *seqState, common, i int) {
		if k == nil || st == nil {
			return
		}
		if q, sl := st.resumePoint(min(common, limit)); sl >= 0 && q > pos {
			kv, pos, slot, idle = k, q, sl, i
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, is := range b.idle {
		try(is.kv, is.st, commonPrefix(is.tokens, tokens), i)
	}
	for _, r := range b.running {
		try(r.kv, r.st, min(commonPrefix(r.hist, tokens), r.computed), -1)
	}
	return kv, pos, slot, idle
}

// freeStateSlot returns a free state slot, taking the oldest snapshot of
// the least recently used sequence when none is free, but never slot keep
// (the state about to be copied); -1 when every other slot is live.
func (b *Batcher) freeStateSlot(keep int) int {
	p := b.e.state
	if i := slices.Index(p.role, slotFree); i >= 0 {
		return i
	}
	var victim *seqState
	vi := -1
	for i, o := range p.owner {
		if p.role[i] != slotSnap || i == keep || (victim != nil && o.used >= victim.used) {
			continue
		}
		for j, sn := range o.snaps {
			if sn.slot != keep {
				victim, vi = o, j
				break
			}
		}
	}
	if victim == nil {
		return -1
	}
	slot := victim.snaps[vi].slot
	victim.snaps = slices.Delete(victim.snaps, vi, vi+1)
	p.freeSlot(slot)
	return slot
}

// freeSeq frees the pages and state slots of s.
func (b *Batcher) freeSeq(s *batchSeq) {
	b.freeIdle(idleSeq{kv: s.kv, st: s.st})
	s.kv, s.st = nil, nil
}

// freeIdle frees what a cached sequence holds.
func (b *Batcher) freeIdle(is idleSeq) {
	if is.kv != nil {
		is.kv.Free()
	}
	if is.st != nil {
		b.e.state.release(is.st)
	}
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
	b.freeIdle(is)
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
	b.freeSeq(s)
	s.computed = 0
	b.mu.Lock()
	b.running = slices.DeleteFunc(b.running, func(r *batchSeq) bool { return r == s })
	b.queue = append([]*batchSeq{s}, b.queue...)
	b.stats.Preempted++
	b.mu.Unlock()
}

// sampleNext samples s's next token from src, unless pre holds it
// already, and handles it as Session does; it reports whether s goes on
// (its token was added to hist). A JSON constraint (it masks the row) and
// logprobs read the whole row; other requests sample where the row lives
// (Sampler.SampleFrom).
func (b *Batcher) sampleNext(s *batchSeq, src sample.Logits, pre presampled) bool {
	e := b.e
	t := time.Now()
	id := pre.id
	var lg []float32
	if s.json != nil || s.req.Logprobs {
		lg = src.All()
	}
	if err := sourceErr(src); err != nil {
		b.end(s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
		return false
	}
	switch {
	case s.json != nil:
		s.masked = append(s.masked[:0], lg...)
		s.json.Mask(s.masked)
		id = s.sampler.Sample(s.masked, s.hist)
		if err := s.json.Accept(id); err != nil {
			b.end(s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
			return false
		}
	case lg != nil:
		id = s.sampler.Sample(lg, s.hist)
	case !pre.ok:
		id = s.sampler.SampleFrom(src, s.hist)
		if err := sourceErr(src); err != nil {
			b.end(s, BatchEvent{Event: Event{Kind: EventError, Err: err}}, false)
			return false
		}
	}
	if s.req.Logprobs {
		s.logprobs = append(s.logprobs, tokenLogprob(e.tok, lg, id, s.req.TopLogprobs))
	}
	b.sampleTime += time.Since(t)
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
	chunk := s.text[s.shown:upto]
	if s.calls != nil {
		// Before the parser's events: a call's deltas precede the call.
		if d := s.calls.feed(chunk, s.parser.calls); d != nil {
			s.out.push(BatchEvent{Event: Event{Kind: EventToolCallDelta}, CallDelta: d})
		}
	}
	evs := s.parser.feed(chunk)
	s.shown = upto
	for _, ev := range evs {
		be := BatchEvent{Event: ev}
		if ev.Kind == EventText || ev.Kind == EventThinking {
			be.Logprobs, s.logprobs = s.logprobs, nil
		}
		s.pushParsed(be)
	}
}

// finish ends s normally; its sequence goes to the prefix cache.
func (b *Batcher) finish(s *batchSeq, stop StopReason, stopSeq string, err error) {
	s.text += s.dec.Flush()
	b.emit(s, len(s.text))
	for _, ev := range s.parser.flush() {
		s.pushParsed(BatchEvent{Event: ev})
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

// end removes s and sends its last event; its pages are cached for
// prefix reuse (keep) or freed. The event goes after the removal so that a
// client that reads the server's counters on it no longer sees s running.
func (b *Batcher) end(s *batchSeq, last BatchEvent, keep bool) {
	b.mu.Lock()
	b.running = slices.DeleteFunc(b.running, func(r *batchSeq) bool { return r == s })
	b.queue = slices.DeleteFunc(b.queue, func(r *batchSeq) bool { return r == s })
	kv, st := s.kv, s.st
	s.kv, s.st = nil, nil
	var evict []idleSeq
	if kv != nil && keep && b.opts.PrefixCache > 0 && kv.Len() > 0 {
		if st != nil {
			// The live state is kept only if it is the state after
			// every cached token; the snapshots past them go.
			n := kv.Len()
			b.e.state.trim(st, n)
			if st.pos != n {
				st.pos = -1
			}
		}
		b.idle = append(b.idle, idleSeq{kv: kv, st: st, tokens: kv.Tokens()})
		kv, st = nil, nil
		if n := len(b.idle) - b.opts.PrefixCache; n > 0 {
			evict = slices.Clone(b.idle[:n])
			b.idle = b.idle[n:]
		}
	}
	b.mu.Unlock()
	s.out.push(last)
	s.out.close()
	b.freeIdle(idleSeq{kv: kv, st: st})
	for _, is := range evict {
		b.freeIdle(is)
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

// --- streamed tool-call arguments ---

// callStreamer follows the raw answer text beside the output parser and
// passes on the arguments of Hermes calls (<tool_call>{"name": N,
// "arguments": {...}}</tool_call>) as the model writes them. It streams
// only a call whose name comes first and whose arguments are an object,
// and only bytes that extend a JSON value (jsonScan): the parser, which
// decides what the call is, reads the same bytes. Other calls are left
// to the parser's complete EventToolCall. Qwen's XML calls stream their
// arguments as JSON (chat.XMLArgsStreamer) and end with the rest of the
// call's ArgsJSON when the parser has it (complete).
type callStreamer struct {
	thinking bool   // inside <think>...</think>: calls there are not streamed
	xml      bool   // Qwen's XML calls
	mode     int    // csText, csHeader, csArgs, csXMLArgs, csSkip
	opens    int    // <tool_call> tags seen
	index    int    // the index of the call being streamed
	buf      string // unconsumed text (tag search, call header)
	scan     jsonDepth

	props  map[string]map[string]any // XML: each tool's properties' schemas
	xargs  *chat.XMLArgsStreamer     // XML: the open call's arguments
	xmlAt  int                       // XML: the index of the last call streamed, -1 none
	sent   string                    // XML: its arguments streamed so far
	parsed int                       // calls the parser completed (complete)
}

const (
	csText = iota
	csHeader
	csArgs
	csXMLArgs
	csSkip // a call that is not streamed: wait for its end
)

const (
	callOpen     = "<tool_call>"
	callClose    = "</tool_call>"
	thinkClose   = "</think>"
	maxCallHead  = 512 // header bytes read before giving up on streaming a call
	callNameHead = `"name"`
)

const xmlFunctionTag = "<function="

var xmlCallHeader = regexp.MustCompile(`^\s*<function=([^<>\n]*)>`)

var callHeader = regexp.MustCompile(`^\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*`)

// feed takes the next raw text; index is the number of calls the parser
// has completed (the index of the call being written). It returns the
// delta to send, or nil.
func (c *callStreamer) feed(text string, index int) *ToolCallDelta {
	var d *ToolCallDelta
	c.buf += text
	for c.buf != "" {
		switch {
		case c.thinking:
			i := strings.Index(c.buf, thinkClose)
			if i < 0 {
				c.buf = keepTail(c.buf, len(thinkClose)-1)
				return d
			}
			c.thinking, c.buf = false, c.buf[i+len(thinkClose):]
		case c.mode == csText || c.mode == csSkip:
			tag := callOpen
			if c.mode == csSkip {
				tag = callClose
			}
			i := strings.Index(c.buf, tag)
			if i < 0 {
				c.buf = keepTail(c.buf, len(tag)-1)
				return d
			}
			c.buf = c.buf[i+len(tag):]
			if c.mode == csText {
				c.mode = csHeader
				c.opens++
			} else {
				c.mode = csText
			}
		case c.mode == csHeader && c.xml:
			// <function=NAME>: the name goes ahead, then the arguments.
			m := xmlCallHeader.FindStringSubmatchIndex(c.buf)
			if m == nil {
				t := strings.TrimLeft(c.buf, " \t\r\n")
				if k := min(len(t), len(xmlFunctionTag)); len(c.buf) > maxCallHead || t[:k] != xmlFunctionTag[:k] ||
					len(t) > k && strings.ContainsAny(t[k:], "<\n") {
					c.mode = csSkip
					continue
				}
				return d
			}
			c.mode = csSkip
			if name := strings.TrimSpace(c.buf[m[2]:m[3]]); name != "" && index == c.opens-1 {
				d = &ToolCallDelta{Index: index, Name: name}
				c.mode, c.index, c.xmlAt, c.sent = csXMLArgs, index, index, ""
				c.xargs = chat.NewXMLArgsStreamer(c.props[name])
			}
			c.buf = c.buf[m[1]:]
		case c.mode == csXMLArgs:
			piece, rest := c.xargs.Feed(c.buf)
			c.buf = ""
			if piece != "" {
				if d == nil {
					d = &ToolCallDelta{Index: c.index}
				}
				d.Args += piece
				c.sent += piece
			}
			if !c.xargs.Done() {
				return d
			}
			c.buf, c.mode = rest, csSkip
		case c.mode == csHeader:
			m := callHeader.FindStringSubmatchIndex(c.buf)
			if m == nil {
				if len(c.buf) > maxCallHead || strings.Contains(c.buf, callClose) || !headerPrefix(c.buf) {
					c.mode = csSkip
					continue
				}
				return d
			}
			var name string
			// index != opens-1: an earlier <tool_call> is not (yet) a call to
			// the parser (a malformed one, or tag text inside a skipped
			// call's value), so this one may be a part of it: not streamed.
			if index != c.opens-1 || json.Unmarshal([]byte(c.buf[m[2]:m[3]]), &name) != nil || name == "" {
				c.mode = csSkip
				continue
			}
			d = &ToolCallDelta{Index: index, Name: name}
			c.buf = c.buf[m[1]:]
			c.mode, c.scan, c.index = csArgs, jsonDepth{}, index
		case c.mode == csArgs:
			if !c.scan.started {
				if c.buf = strings.TrimLeft(c.buf, " \t\r\n"); c.buf == "" {
					return d
				}
			}
			n, ok := c.scan.feed(c.buf)
			if !ok { // not an object (or broken): the parser decides
				c.mode = csSkip
				continue
			}
			if n > 0 {
				if d == nil {
					d = &ToolCallDelta{Index: c.index}
				}
				d.Args += c.buf[:n]
			}
			c.buf = c.buf[n:]
			if !c.scan.done {
				return d
			}
			c.mode = csSkip // the arguments are complete: wait for the call's end
		}
	}
	return d
}

// headerPrefix reports whether s may still grow into a call header: it
// starts (after space) with '{' and, once past it, the "name" key.
func headerPrefix(s string) bool {
	t := strings.TrimLeft(s, " \t\r\n")
	if t == "" {
		return true
	}
	if t[0] != '{' {
		return false
	}
	t = strings.TrimLeft(t[1:], " \t\r\n")
	k := min(len(t), len(callNameHead))
	return t[:k] == callNameHead[:k]
}

// keepTail keeps the last n bytes of s (a tag may be split across chunks).
func keepTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// jsonDepth tracks one JSON object's extent in streamed text: nesting
// depth and strings. It does not validate the JSON (the parser does);
// it finds where the object ends so that nothing after it is streamed.
type jsonDepth struct {
	started, done bool
	depth         int
	inStr, esc    bool
}

// feed consumes s up to the end of the object; it returns the bytes that
// belong to it and false when s does not start an object.
func (j *jsonDepth) feed(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !j.started {
			if c != '{' {
				return 0, false
			}
			j.started, j.depth = true, 1
			continue
		}
		switch {
		case j.esc:
			j.esc = false
		case j.inStr:
			switch c {
			case '\\':
				j.esc = true
			case '"':
				j.inStr = false
			}
		case c == '"':
			j.inStr = true
		case c == '{' || c == '[':
			j.depth++
		case c == '}' || c == ']':
			if j.depth--; j.depth == 0 {
				j.done = true
				return i + 1, true
			}
		}
	}
	return len(s), true
}
