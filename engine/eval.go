package engine

import (
	"context"
	"fmt"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// KVSpec is a KV storage format to evaluate a model under: the dtype and,
// for fp8, optional static scales (nil: dynamic per-token scales).
type KVSpec struct {
	DType kvcache.DType // K's, and V's unless VDType is set
	// VDType is V's dtype when it differs from K's; Auto: the same.
	VDType kvcache.DType
	Scales *kvcache.ScalesFile
	// ScalesSource names where Scales came from (a file path), for reports.
	ScalesSource string
}

// String names the spec as `bench` prints it: "fp8_e4m3", "fp8_e4m3 (static scales)".
func (s KVSpec) String() string {
	name := kvcache.PairName(s.DType, s.VDType)
	if s.anyFP8() && s.Scales != nil {
		return name + " (static scales)"
	}
	return name
}

func (s KVSpec) layout(l kvcache.Layout) kvcache.Layout {
	v := s.VDType
	if v == kvcache.Auto {
		v = s.DType
	}
	return l.WithDTypes(s.DType, v)
}

func (s KVSpec) anyFP8() bool { return s.layout(kvcache.Layout{}).AnyFP8() }

// ScaleMode is "dynamic", "static" or "none" (16-bit).
func (s KVSpec) ScaleMode() string {
	switch {
	case !s.anyFP8():
		return "none"
	case s.Scales != nil:
		return "static"
	}
	return "dynamic"
}

// KVSpecFor resolves a --kv-cache-dtype value (auto = bf16; K and V apart
// as "k=bf16/v=fp8_e4m3", a half left out being bf16) and an optional
// --kv-scales file into a spec for this model; the file must match the
// model's attention shape.
func (e *Engine) KVSpecFor(dtype, scalesPath string) (KVSpec, error) {
	k, v, err := kvcache.ParseDTypePair(dtype, kvcache.BF16, kvcache.BF16)
	if err != nil {
		return KVSpec{}, err
	}
	s := KVSpec{DType: k.Resolve(kvcache.BF16)}
	if v = v.Resolve(kvcache.BF16); v != s.DType {
		s.VDType = v
	}
	dt := s
	if scalesPath == "" {
		return s, nil
	}
	if !dt.anyFP8() {
		return KVSpec{}, fmt.Errorf("--kv-scales %s needs an fp8 --kv-cache-dtype (fp8_e4m3 or fp8_e5m2), not %s", scalesPath, dt)
	}
	sf, err := kvcache.LoadScales(scalesPath)
	if err != nil {
		return KVSpec{}, err
	}
	c := e.mdl.Config
	if err := sf.Match(c.AttnLayers, c.KVHeads); err != nil {
		return KVSpec{}, fmt.Errorf("--kv-scales %s: %w", scalesPath, err)
	}
	s.Scales, s.ScalesSource = sf, scalesPath
	return s, nil
}

// ModelConfig is the loaded model's architecture (shape, vocabulary, context).
func (e *Engine) ModelConfig() model.Config { return e.mdl.Config }

// EncodeChat renders messages with the model's chat template (with the
// assistant prompt appended) and tokenizes the result, as Generate does.
func (e *Engine) EncodeChat(msgs []Message) ([]int32, error) {
	_, ids, err := e.renderPrompt(Request{Messages: msgs})
	return ids, err
}

// evalRun is one sequence in a temporary pool of a given spec.
type evalRun struct {
	e   *Engine
	seq *kvcache.Sequence
	st  *seqState // hybrid models: a scratch recurrent state; nil otherwise
}

// withEvalPool replaces the backend's KV storage with a temporary pool of
// spec that holds capacity tokens, runs fn with one empty sequence in it,
// and puts the engine's own pool back. The engine's pool must hold no
// tokens (its storage is reallocated, so cached K/V would be lost): the
// evaluation methods are for `ftchat bench` and `ftchat calibrate`, which
// run them on an engine without conversations.
func (e *Engine) withEvalPool(spec KVSpec, capacity int, fn func(r *evalRun) error) (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.sessions {
		if s.seq.Len() > 0 {
			return fmt.Errorf("evaluation needs an engine whose sessions hold no tokens (a session holds %d); close or reset them first", s.seq.Len())
		}
	}
	if capacity < 1 {
		return fmt.Errorf("evaluation of %d tokens: nothing to run", capacity)
	}
	c := e.mdl.Config
	ps := e.layout.PageSize
	l := spec.layout(c.KVLayout(ps, kvcache.PagesForTokens(capacity, ps), spec.DType))
	if l.AnyFP8() && spec.Scales != nil {
		if err := spec.Scales.Match(l.Layers, l.KVHeads); err != nil {
			return err
		}
		if err := expandScales(spec.Scales, &l); err != nil {
			return err
		}
	}
	if err := l.Validate(); err != nil {
		return err
	}
	e.be.FreeKV()
	defer func() {
		// The engine's pool holds no tokens, so fresh storage is equivalent.
		e.be.FreeKV()
		if rerr := e.be.AllocKV(e.layout); rerr != nil && err == nil {
			err = fmt.Errorf("restoring the KV pool after evaluation: %w", rerr)
		}
	}()
	if err := e.be.AllocKV(l); err != nil {
		return err
	}
	copier, _ := e.be.(kvcache.PageCopier)
	p, err := kvcache.NewPool(l, copier)
	if err != nil {
		return err
	}
	st, release, err := e.state.scratch()
	if err != nil {
		return err
	}
	defer release()
	return fn(&evalRun{e: e, seq: p.NewSequence(), st: st})
}

// forward appends tokens to the run's sequence, computes their K/V in
// prefill chunks and passes the logits of the rows listed in want
// (indices into tokens, ascending) to emit, chunk by chunk.
func (r *evalRun) forward(ctx context.Context, tokens []int32, want []int, emit func(rows []int, logits []float32) error) error {
	e := r.e
	start, err := r.seq.Append(tokens...)
	if err != nil {
		return err
	}
	if start != r.seq.Len()-len(tokens) {
		return fmt.Errorf("internal: evaluation sequence restarted at %d", start)
	}
	chunk := e.prefillChunk()
	pages := r.seq.Pages()
	w := 0
	for off := 0; off < len(tokens); off += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(off+chunk, len(tokens))
		var local, rows []int
		for ; w < len(want) && want[w] < end; w++ {
			if want[w] < off {
				return fmt.Errorf("internal: logits rows must be ascending (row %d after %d)", want[w], off)
			}
			local = append(local, want[w]-off)
			rows = append(rows, want[w])
		}
		out, err := e.mdl.Forward(batchFor(tokens[off:end], start+off, pages, r.st), local)
		if err == nil {
			err = backendErr(e.be)
		}
		if err != nil {
			return err
		}
		if r.st != nil {
			r.st.pos = start + end
		}
		if len(rows) > 0 {
			if err := emit(rows, out); err != nil {
				return err
			}
		}
	}
	if w < len(want) {
		return fmt.Errorf("logits row %d is outside the %d tokens", want[w], len(tokens))
	}
	return nil
}

// EvalLogits runs tokens from an empty cache of spec (a temporary pool, so
// the engine's own pool and dtype are untouched) and calls fn with the
// logits (Config.Vocab values; fn may keep the slice) of each row listed
// in rows, which must be ascending indices into tokens. Logits of row i
// predict tokens[i+1].
func (e *Engine) EvalLogits(ctx context.Context, spec KVSpec, tokens []int32, rows []int, fn func(row int, logits []float32) error) error {
	for i := 1; i < len(rows); i++ {
		if rows[i] <= rows[i-1] {
			return fmt.Errorf("EvalLogits: rows must be strictly ascending (%d after %d)", rows[i], rows[i-1])
		}
	}
	if len(rows) > 0 && (rows[0] < 0 || rows[len(rows)-1] >= len(tokens)) {
		return fmt.Errorf("EvalLogits: rows %d..%d outside the %d tokens", rows[0], rows[len(rows)-1], len(tokens))
	}
	vocab := e.mdl.Config.Vocab
	return e.withEvalPool(spec, len(tokens), func(r *evalRun) error {
		return r.forward(ctx, tokens, rows, func(rs []int, logits []float32) error {
			for i, row := range rs {
				if err := fn(row, logits[i*vocab:(i+1)*vocab:(i+1)*vocab]); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// EvalGreedy prefills prompt into an empty cache of spec and decodes
// greedily (argmax) until an end-of-generation token or maxTokens, and
// returns the generated ids (without the end token).
func (e *Engine) EvalGreedy(ctx context.Context, spec KVSpec, prompt []int32, maxTokens int) ([]int32, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("EvalGreedy: empty prompt")
	}
	if maxTokens < 1 {
		return nil, fmt.Errorf("EvalGreedy: maxTokens %d must be positive", maxTokens)
	}
	if n := len(prompt) + maxTokens; n > e.info.ContextLen {
		return nil, fmt.Errorf("EvalGreedy: %d prompt + %d new tokens exceed the model's context of %d", len(prompt), maxTokens, e.info.ContextLen)
	}
	var out []int32
	err := e.withEvalPool(spec, len(prompt)+maxTokens, func(r *evalRun) error {
		var logits []float32
		err := r.forward(ctx, prompt, []int{len(prompt) - 1}, func(_ []int, l []float32) error {
			logits = l
			return nil
		})
		for err == nil {
			id := int32(argmax(logits))
			if e.tok.IsEOG(id) {
				return nil
			}
			out = append(out, id)
			if len(out) >= maxTokens {
				return nil
			}
			err = r.forward(ctx, []int32{id}, []int{0}, func(_ []int, l []float32) error {
				logits = l
				return nil
			})
		}
		return err
	})
	return out, err
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// hostKV is the CPU backend's view of its pool (calibration reads it back).
type hostKV interface {
	KVStore() *kvcache.HostStore
}

// CalibrateWindow prefills tokens into an empty bf16 cache and feeds every
// stored K (after RoPE) and V row of every attention layer to c. It needs
// the CPU backend (--device cpu), whose pool the host can read.
func (e *Engine) CalibrateWindow(ctx context.Context, tokens []int32, c *kvcache.Calibrator) error {
	h, ok := e.be.(hostKV)
	if !ok {
		return fmt.Errorf("calibrate reads the KV pool on the host: run it with --device cpu (the %s backend keeps the pool on the device)", e.be.Name())
	}
	return e.withEvalPool(KVSpec{DType: kvcache.BF16}, len(tokens), func(r *evalRun) error {
		if err := r.forward(ctx, tokens, nil, nil); err != nil {
			return err
		}
		st := h.KVStore()
		if st == nil {
			return fmt.Errorf("calibrate: the CPU backend has no readable bf16 pool")
		}
		return c.ObserveStore(st, r.seq.Pages(), len(tokens))
	})
}
