package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hub"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/tokenizer"
	"github.com/ftchat/ftchat/gpu"
	"github.com/ftchat/ftchat/internal/timing"
)

// LoadProgress reports what Load is doing.
type LoadProgress struct {
	Stage       string
	Done, Total int64
}

// Info describes the loaded model.
type Info struct {
	Name       string
	Path       string
	Arch       string
	Params     string // e.g. "30 layers, dim 576, 9 heads / 3 kv heads, head_dim 64"
	ContextLen int    // tokens one conversation may hold
	Template   string // chat template source: "gguf" or "chatml (fallback)"
	Device     string // the backend, and with --device auto on the CPU, why no GPU
	// Notes are one-line messages about choices the load made that the
	// user should hear of (placement flags ignored, the experts kept in
	// host RAM); the CLI prints them on stderr.
	Notes []string
}

// Engine is one loaded model with its backend and KV pool. Its methods are
// safe for concurrent use; model work is serialised.
type Engine struct {
	opts Options
	file *gguf.File
	mdl  *model.Model
	be   model.Backend
	tok  *tokenizer.Tokenizer
	tmpl renderer
	info Info

	mu sync.Mutex // serialises backend work and pool changes

	poolMu sync.RWMutex // guards the pool and layout fields; Stats never waits on mu
	pool   *kvcache.Pool
	layout kvcache.Layout

	kvBudget int64 // bytes the pool may take; fixed across /kvdtype switches
	budget   int64 // device budget (GPU), 0 on CPU
	sessions map[*Session]struct{}

	// state holds the recurrent-state slots of a hybrid model (state.go);
	// nil for models whose every layer keeps K/V. Guarded by mu.
	state *statePool

	// plan is where the routed experts live on the GPU (placement.go);
	// nil on the CPU and for models without routed experts.
	plan *gpu.PlacementPlan

	statsMu sync.Mutex
	counters
}

type counters struct {
	prefillTokens, reusedTokens, decodeTokens int64
	lastPrefill                               int
	prefillRate, decodeRate                   float64
	lastTurn                                  time.Duration
	turnDecoded                               int64
}

// maxCPUContext bounds the default CPU pool for models trained on very long
// contexts; --ctx-size or --kv-tokens raise it.
const maxCPUContext = 16384

// Load opens a model and prepares it for chat.
func Load(ctx context.Context, opts Options, progress func(LoadProgress)) (*Engine, error) {
	if progress == nil {
		progress = func(LoadProgress) {}
	}
	hw := probeHardware(opts.Device)
	timing.Mark("device probe")
	if err := opts.Validate(hw); err != nil {
		return nil, err
	}
	path, err := hub.Resolve(ctx, opts.Model, func(stage string, done, total int64) {
		progress(LoadProgress{Stage: stage, Done: done, Total: total})
	})
	if err != nil {
		return nil, err
	}
	progress(LoadProgress{Stage: "reading " + path})
	f, err := openModelFile(path)
	if err != nil {
		return nil, err
	}
	timing.Mark("model file opened")
	e := &Engine{opts: opts, file: f, sessions: map[*Session]struct{}{}}
	if err := e.init(hw, progress); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) init(hw Hardware, progress func(LoadProgress)) error {
	f := e.file
	cfg, err := model.ReadConfig(f)
	if err != nil {
		return err
	}
	tok, err := loadTokenizer(f)
	if err != nil {
		return fmt.Errorf("%s: tokenizer: %w", f.Path, err)
	}
	e.tok = tok
	e.tmpl, e.info.Template, err = newRenderer(f, tok)
	if err != nil {
		return err
	}
	timing.Mark("tokenizer and template")
	be, budget, err := e.openBackend(hw)
	if err != nil {
		return err
	}
	timing.Mark("backend opened")
	e.be, e.budget = be, budget
	_, onGPU := be.(*gpu.Backend)
	if w := computeDTypeIgnored(e.opts, onGPU); w != "" {
		e.info.Notes = append(e.info.Notes, w)
	}
	if err := e.placeExperts(cfg); err != nil {
		return err
	}
	progress(LoadProgress{Stage: "loading weights", Total: cfg.WeightBytes})
	e.mdl, err = model.Load(f, be)
	if err != nil {
		return err
	}
	timing.Mark("weights loaded")
	if e.budget > 0 {
		e.mdl.CacheRows = e.plannedRows() // the activation sets the GPU plan reserves
	}
	progress(LoadProgress{Stage: "loading weights", Done: cfg.WeightBytes, Total: cfg.WeightBytes})
	e.info = Info{
		Name: modelName(cfg, f.Path), Path: f.Path, Arch: cfg.Arch, Template: e.info.Template, Device: e.info.Device, Notes: e.info.Notes,
		Params: fmt.Sprintf("%d layers, dim %d, %d heads / %d kv heads, head_dim %d", cfg.Layers, cfg.Dim, cfg.Heads, cfg.KVHeads, cfg.HeadDim),
	}
	e.info.ContextLen = cfg.ContextLen
	if e.opts.ContextLen > 0 {
		e.info.ContextLen = e.opts.ContextLen
	}

	if cfg := e.mdl.Config; cfg.Hybrid() {
		// The state is planned (GPU budget) before the pool and allocated
		// beside it.
		sb, ok := be.(model.StateBackend)
		if !ok {
			return fmt.Errorf("%s: the %s backend has no recurrent-state ops for %s", f.Path, be.Name(), cfg.Arch)
		}
		slots := e.opts.StateSlots
		if slots == 0 {
			slots = DefaultStateSlots
		}
		e.state = newStatePool(cfg.StateLayout(slots), sb)
		e.info.Params += fmt.Sprintf(" (attention in %d of %d layers; recurrent state %s per sequence)",
			cfg.AttnLayers, cfg.Layers, kvcache.FormatBytes(e.state.l.BytesPerSlot()))
	}

	progress(LoadProgress{Stage: "planning kv pool"})
	kt, err := e.loadKVTypes() // --kv-cache-dtype, --cache-type-k/-v (kvtypes.go)
	if err != nil {
		return err
	}
	layout, err := e.planLayout(kt)
	if err != nil {
		return err
	}
	if e.state != nil {
		if err := e.state.be.AllocState(e.state.l); err != nil {
			return fmt.Errorf("--state-slots %d: %w", e.state.l.Slots, err)
		}
	}
	err = e.allocPool(layout)
	timing.Mark("kv pool allocated")
	return err
}

func modelName(c model.Config, path string) string {
	return displayName(c.Name, filepath.Base(path))
}

// openBackend picks the device: --device cpu, cuda[:N], or auto (CUDA when
// usable, otherwise CPU with the reason on stderr).
func (e *Engine) openBackend(hw Hardware) (model.Backend, int64, error) {
	dev, _ := ParseDevice(e.opts.Device)
	if dev.Kind == "cuda" || (dev.Kind == "auto" && hw.CUDA) {
		be, budget, err := openGPU(dev.Ordinal, e.opts)
		if err == nil {
			e.info.Device = be.Name() + cublasNote(be)
			return be, budget, nil
		}
		if dev.Kind == "cuda" {
			return nil, 0, err
		}
		fmt.Fprintf(os.Stderr, "ftchat: GPU not used (%v); running on the CPU\n", err)
		hw.CUDAReason = err.Error()
	}
	be := cpu.New(cpu.Options{Threads: e.opts.Threads})
	e.info.Device = be.Name()
	if dev.Kind == "auto" {
		e.info.Device += " — no GPU used: " + hw.CUDAReason
	}
	return be, 0, nil
}

// planLayout sizes the pool for K and V stored as t. The byte budget is
// fixed at the first plan, so switching to fp8 roughly doubles the tokens
// that fit.
func (e *Engine) planLayout(t kvTypes) (kvcache.Layout, error) {
	c := e.mdl.Config
	ps := e.opts.PageSize
	if ps == 0 {
		ps = DefaultPageSize
	}
	l := c.KVLayout(ps, 1, t.k).WithDTypes(t.k, t.v)
	if t.anyFP8() && e.opts.KVScales != "" {
		if err := e.applyStaticScales(&l); err != nil {
			return l, err
		}
	}
	if e.kvBudget == 0 {
		if e.budget > 0 {
			wb, err := gpuKVBudget(e.be, e.budget, c, e.plannedRows(), e.state.recurrentState(), e.stagingReserve())
			if err != nil {
				return l, err
			}
			e.kvBudget = wb
		} else {
			tokens := e.opts.KVTokens
			if tokens == 0 {
				tokens = e.info.ContextLen
				if e.opts.ContextLen == 0 {
					tokens = min(tokens, maxCPUContext)
				}
			}
			bf16 := kvcache.BytesPerToken(c.AttnLayers, c.KVHeads, c.HeadDim, kvcache.BF16, kvcache.DynamicScales)
			// Plan against the machine before allocating: a pool beyond it
			// would panic in makeslice or abort out of memory.
			if err := kvcache.CheckHostBudget(tokens, bf16, t.adviceDType()); err != nil {
				return l, err
			}
			e.kvBudget = int64(tokens) * int64(bf16)
		}
	}
	l.Pages = int(e.kvBudget / l.BytesPerPage())
	if l.Pages < 1 {
		return l, e.noPageError(l, ps)
	}
	return l, l.Validate()
}

// noPageError says which setting leaves the pool without a single page
// and the smallest value that holds one.
func (e *Engine) noPageError(l kvcache.Layout, ps int) error {
	page := l.BytesPerPage()
	if e.budget > 0 {
		state := ""
		if e.state != nil {
			state = fmt.Sprintf(" (after the recurrent state, %s)", e.state.recurrentState())
		}
		return fmt.Errorf("KV pool: the %s of --gpu-memory left for the KV cache%s holds no page of %d tokens (%s); raise --gpu-memory by at least %s",
			kvcache.FormatBytes(e.kvBudget), state, ps, kvcache.FormatBytes(page), kvcache.FormatBytes(page-e.kvBudget))
	}
	c := e.mdl.Config
	bf16 := int64(kvcache.BytesPerToken(c.AttnLayers, c.KVHeads, c.HeadDim, kvcache.BF16, kvcache.DynamicScales))
	minTokens := (page + bf16 - 1) / bf16 // the budget counts bf16 tokens
	flag, n := "--kv-tokens", e.opts.KVTokens
	if n == 0 {
		flag, n = "--ctx-size", e.info.ContextLen
	}
	return fmt.Errorf("%s %d is too small for the KV pool: the smallest holds one page of %d tokens, so use %s %d or more (or a smaller --page-size)",
		flag, n, ps, flag, minTokens)
}

func (e *Engine) applyStaticScales(l *kvcache.Layout) error {
	if e.opts.KVScales == "checkpoint" {
		return e.applyCheckpointScales(l) // engine/hfsource.go
	}
	// kvcache's messages mostly name the option already; say it once.
	named := func(err error) error {
		if strings.HasPrefix(err.Error(), "--kv-scales") {
			return err
		}
		return fmt.Errorf("--kv-scales %s: %w", e.opts.KVScales, err)
	}
	sf, err := kvcache.LoadScales(e.opts.KVScales)
	if err != nil {
		return named(err)
	}
	if err := sf.Match(l.Layers, l.KVHeads); err != nil {
		return named(err)
	}
	if err := expandScales(sf, l); err != nil {
		return named(err)
	}
	return nil
}

// plannedRows is the batch rows the GPU memory plan reserves activations
// for, and the most rows the model keeps activation sets of (CacheRows):
// one prefill chunk and a decode set beside it (decodeKeepRows), so a
// chat's decode steps keep their buffers, and their CUDA graphs, across
// turns.
func (e *Engine) plannedRows() int { return PlannedRows(e.prefillChunk()) }

// PlannedRows is the rows the GPU memory plan reserves activations for
// with prefill chunks of chunk tokens (Engine.plannedRows).
func PlannedRows(chunk int) int { return chunk + decodeKeepRows }

// decodeKeepRows: see plannedRows (the GPU's GEMV path takes up to 8 rows).
const decodeKeepRows = 8

func (e *Engine) prefillChunk() int {
	if e.opts.PrefillChunk > 0 {
		return e.opts.PrefillChunk
	}
	return DefaultPrefillChunk
}

func (e *Engine) allocPool(l kvcache.Layout) error {
	if err := e.be.AllocKV(l); err != nil {
		return err
	}
	copier, _ := e.be.(kvcache.PageCopier)
	p, err := kvcache.NewPool(l, copier)
	if err != nil {
		e.be.FreeKV()
		return err
	}
	e.poolMu.Lock()
	e.pool, e.layout = p, l
	e.poolMu.Unlock()
	return nil
}

// NewSession opens a conversation with its own page table.
func (e *Engine) NewSession() *Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &Session{e: e, seq: e.pool.NewSequence()}
	if e.state != nil {
		// Another session taking this one's live slot leaves its K/V
		// without a state: drop it, the next turn starts over.
		s.st = e.state.newSeq(func() { s.seq.Truncate(0) })
	}
	e.sessions[s] = struct{}{}
	return s
}

// Info describes the model.
func (e *Engine) Info() Info { return e.info }

// Tokenizer exposes the model's tokenizer (read-only use).
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// CountTokens counts the tokens of plain text.
func (e *Engine) CountTokens(text string) int {
	return len(e.tok.EncodeWith(text, tokenizer.EncodeOptions{PlainSpecials: true}))
}

// Stats is a snapshot of pool and speed numbers.
func (e *Engine) Stats() Stats {
	e.poolMu.RLock()
	ps := e.pool.Stats()
	l := e.layout
	fp8 := e.fp8Capacity()
	e.poolMu.RUnlock()
	e.statsMu.Lock()
	c := e.counters
	e.statsMu.Unlock()
	s := Stats{
		Model: e.info.Name, Device: e.be.Name(), KVDType: kvName(l), PageSize: ps.PageSize,
		PagesTotal: ps.PagesTotal, PagesUsed: ps.PagesUsed,
		TokensCapacity: ps.TokensCapacity, TokensUsed: ps.TokensUsed,
		BytesPerToken: ps.BytesPerToken, BytesUsed: ps.BytesUsed, BytesBF16: ps.BytesBF16,
		CapacityRatio: ps.CapacityRatio, FP8TokensCapacity: fp8,
		BudgetBytes: e.budget, WeightsBytes: e.mdl.Config.WeightBytes, PoolBytes: ps.PoolBytes,
		PrefillTokens: c.prefillTokens, ReusedTokens: c.reusedTokens, DecodeTokens: c.decodeTokens,
		LastPrefillTokens: c.lastPrefill, PrefillTokensPerS: c.prefillRate, DecodeTokensPerS: c.decodeRate,
		LastTurnDuration: c.lastTurn,
	}
	e.stateStats(&s)
	e.placementStats(&s)
	return s
}

func kvName(l kvcache.Layout) string {
	if l.AnyFP8() && l.Scales == kvcache.StaticScales {
		return l.DTypeName() + " (static scales)"
	}
	return l.DTypeName()
}

// FitCheck reports whether req's prompt fits now: in the pool (tokens free
// plus what the conversations already hold) and in the model's context.
// Both failures unwrap to a *kvcache.PoolFullError carrying the numbers, so
// callers with a drop-oldest policy handle them alike.
func (e *Engine) FitCheck(req Request) error {
	ids, err := e.encodePrompt(req)
	if err != nil {
		return err
	}
	e.poolMu.RLock()
	ps := e.pool.Stats()
	dt, vdt := e.layout.DType, e.layout.VDType
	e.poolMu.RUnlock()
	need := len(ids) + 1
	full := &kvcache.PoolFullError{Asked: need, Fit: ps.TokensFree + ps.SeqTokens, Held: ps.SeqTokens, Prompt: true, Capacity: ps.TokensCapacity, Used: ps.TokensUsed,
		DType: dt, VDType: vdt, BytesPerToken: ps.BytesPerToken, E4M3Capacity: e.fp8Capacity()}
	if need > e.info.ContextLen {
		full.Fit = min(full.Fit, e.info.ContextLen)
		return &ContextFullError{Need: need, ContextLen: e.info.ContextLen, pool: full}
	}
	if need > full.Fit {
		return full
	}
	return nil
}

// ContextFullError says a conversation is longer than the model's context.
type ContextFullError struct {
	Need, ContextLen int
	// NoChat words the advice for a run without the chat (-p).
	NoChat bool
	pool   *kvcache.PoolFullError
}

func (e *ContextFullError) Error() string {
	if e.NoChat {
		return fmt.Sprintf("the prompt needs %d tokens but the context is %d tokens: shorten the prompt or the piped input (or raise --ctx-size if it is set lower than the model's context)", e.Need, e.ContextLen)
	}
	return fmt.Sprintf("the conversation needs %d tokens but the model's context is %d tokens: /drop the oldest turns, or /clear", e.Need, e.ContextLen)
}

// ForPrintMode rewords the pool or context error in err's chain for a run
// without the chat (-p), whose user cannot type slash commands. Wrappers
// format their text when made, so the new message is err's with the
// inner error's text swapped; err stays reachable through Unwrap.
func ForPrintMode(err error) error {
	reword := func(inner error, noChat *bool) error {
		full, old := err.Error(), inner.Error()
		if !strings.HasSuffix(full, old) {
			return err
		}
		*noChat = true
		return &rewordedError{msg: strings.TrimSuffix(full, old) + inner.Error(), err: err}
	}
	var cf *ContextFullError
	if errors.As(err, &cf) {
		return reword(cf, &cf.NoChat)
	}
	var pf *kvcache.PoolFullError
	if errors.As(err, &pf) {
		return reword(pf, &pf.NoChat)
	}
	return err
}

type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// Unwrap exposes the numbers as a PoolFullError (Fit is the context length).
func (e *ContextFullError) Unwrap() error { return e.pool }

// fp8Capacity is the pool capacity in tokens the same budget gives with
// K and V in fp8_e4m3; 0 when both already are.
func (e *Engine) fp8Capacity() int {
	l := e.layout
	if l.KType() == kvcache.FP8E4M3 && l.VType() == kvcache.FP8E4M3 {
		return 0
	}
	l, l.Scales = l.WithDTypes(kvcache.FP8E4M3, kvcache.FP8E4M3), kvcache.DynamicScales
	return int(e.kvBudget/l.BytesPerPage()) * l.PageSize
}

// Reconfigure switches the KV dtype: it plans the new pool in the same
// budget, moves every live session into it by re-prefilling its tokens, and
// refuses, changing nothing, when they don't fit.
func (e *Engine) Reconfigure(ctx context.Context, kvDType string, progress func(done, total int)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	dt, err := e.resolveKVSpec(kvDType)
	if err != nil {
		return err
	}
	if e.storedAs(dt) {
		return nil // already stored this way: nothing to move
	}
	saved := e.opts.KVScales
	if !dt.anyFP8() {
		e.opts.KVScales = "" // static scales only mean something for fp8
	}
	nl, err := e.planLayout(dt)
	if err != nil {
		e.opts.KVScales = saved
		return err
	}
	var sessions []sessionTokens
	pagesNeeded, total := 0, 0
	for s := range e.sessions {
		t := s.seq.Tokens()
		sessions = append(sessions, sessionTokens{s, t})
		pagesNeeded += kvcache.PagesForTokens(len(t), nl.PageSize)
		total += len(t)
	}
	if pagesNeeded > nl.Pages {
		e.opts.KVScales = saved
		return fmt.Errorf("/kvdtype %s: the conversation holds %d tokens (%d pages) but a %s pool in the same %s holds %d tokens (%d pages); nothing changed — /clear first, or keep %s",
			dt, total, pagesNeeded, dt, kvcache.FormatBytes(e.kvBudget), nl.Tokens(), nl.Pages, e.layout.DTypeName())
	}
	old := e.layout
	for _, st := range sessions {
		st.s.seq.Free()
	}
	e.be.FreeKV()
	err = e.allocPool(nl)
	if err != nil {
		// Put the old pool back and rebuild its contents.
		e.opts.KVScales = saved
		if err2 := e.allocPool(old); err2 != nil {
			return fmt.Errorf("/kvdtype %s: %v; restoring the old pool failed too: %v", dt, err, err2)
		}
		err = fmt.Errorf("/kvdtype %s: %w; nothing changed", dt, err)
	}
	for _, st := range sessions {
		st.s.seq = e.pool.NewSequence()
	}
	// The recurrent state is re-derived by the re-prefill below rather
	// than kept: the model pass that rebuilds K/V runs the recurrent layers
	// too, and their input depends on the attention layers' output, which
	// reads K/V in the new dtype; keeping the old state would mix two runs.
	if rerr := e.refill(ctx, sessions, progress); rerr != nil {
		if err != nil {
			return fmt.Errorf("%v; re-prefill failed: %v", err, rerr)
		}
		return fmt.Errorf("/kvdtype %s: re-prefilling the conversation: %w", dt, rerr)
	}
	return err
}

type sessionTokens struct {
	s      *Session
	tokens []int32
}

// refill recomputes the KV of every session from its token history.
func (e *Engine) refill(ctx context.Context, ss []sessionTokens, progress func(done, total int)) error {
	total, done := 0, 0
	for _, s := range ss {
		total += len(s.tokens)
	}
	if e.state != nil {
		// With fewer state slots than sessions, a refill takes the slot of
		// the least recently used one: go from there to the most recent,
		// which keeps its slot.
		slices.SortStableFunc(ss, func(a, b sessionTokens) int { return cmp.Compare(a.s.st.used, b.s.st.used) })
	}
	for _, st := range ss {
		if st.s.seq.Len() != 0 {
			st.s.seq.Truncate(0)
		}
		if len(st.tokens) == 0 {
			if st.s.st != nil {
				e.state.reset(st.s.st)
			}
			continue
		}
		// Snapshots are taken again at the same positions.
		snapAt := e.restartState(st.s.st, len(st.tokens))
		start, err := st.s.seq.Append(st.tokens...)
		if err != nil {
			return err
		}
		if start != 0 {
			return fmt.Errorf("internal: re-prefill of a conversation starts at %d", start)
		}
		err = e.prefill(ctx, st.s.seq, st.s.st, st.tokens, start, nil, func(n int) {
			done += n
			if progress != nil {
				progress(done, total)
			}
		}, snapAt...)
		if err != nil {
			st.s.seq.Truncate(0)
			if st.s.st != nil {
				e.state.reset(st.s.st)
			}
			return err
		}
	}
	return nil
}

// prefill computes K/V for tokens[start:] of seq (already appended) in
// chunks; it returns the logits of the last token when wantLogits is set.
// st is the sequence's recurrent state (hybrid models; nil otherwise),
// whose live slot holds the state at start: each chunk advances it, and
// at each position of snapAt (ascending) a chunk ends and the state is
// snapshotted. A cancelled or failed prefill leaves seq's computed tokens
// and the state in step (a failed chunk leaves the state unknown).
func (e *Engine) prefill(ctx context.Context, seq *kvcache.Sequence, st *seqState, tokens []int32, start int, logits *[]float32, step func(n int), snapAt ...int) error {
	chunk := e.prefillChunk()
	pages := seq.Pages()
	snap := func(pos int) {
		if st != nil && slices.Contains(snapAt, pos) {
			e.state.snapshot(st)
		}
	}
	snap(start)
	for pos := start; pos < len(tokens); {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(pos+chunk, len(tokens))
		for _, c := range snapAt {
			if c > pos && c < end {
				end = c
				break
			}
		}
		b := batchFor(tokens[pos:end], pos, pages, st)
		var rows []int
		if logits != nil && end == len(tokens) {
			rows = []int{end - pos - 1}
		}
		out, err := e.mdl.Forward(b, rows)
		if err == nil {
			err = backendErr(e.be)
		}
		if err != nil {
			if st != nil {
				st.pos = -1
			}
			return err
		}
		if st != nil {
			st.pos = end
		}
		if rows != nil {
			*logits = out
		}
		if step != nil {
			step(end - pos)
		}
		snap(end)
		pos = end
	}
	return nil
}

// batchFor is the batch of one sequence's tokens at positions pos...; st
// names its recurrent-state slot (hybrid models; nil otherwise).
func batchFor(tokens []int32, pos int, pages []int32, st *seqState) *model.Batch {
	b := &model.Batch{Tokens: tokens, Pos: make([]int32, len(tokens))}
	for i := range b.Pos {
		b.Pos[i] = int32(pos + i)
	}
	b.Seqs = []model.SeqSpan{{Offset: 0, Cached: pos, NewTokens: len(tokens), Pages: pages, State: st.slot()}}
	return b
}

// Close frees the pool, the backend and the model file.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.be != nil {
		e.be.FreeKV()
		if e.state != nil {
			e.state.be.FreeState()
		}
		closeBackend(e.be)
		e.be = nil
	}
	if e.file != nil {
		err := e.file.Close()
		e.file = nil
		return err
	}
	return nil
}
