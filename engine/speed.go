package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ftchat/ftchat/engine/sample"
)

// SpeedResult is one end-to-end speed measurement at a context depth.
type SpeedResult struct {
	Depth         int     // tokens in the cache before the measured work
	PrefillTokens int     // tokens of the measured prefill chunk
	PrefillPerS   float64 // tokens/s of that chunk (attending to Depth tokens)
	DecodeTokens  int
	DecodePerS    float64 // tokens/s of greedy decode after Depth+PrefillTokens tokens
	FillSeconds   float64 // time to build the context (not part of the rates)
	// DecodeGraphPerS: on a backend that replays recorded decode steps as
	// CUDA graphs, the tokens/s of the last step's graphs replayed back to
	// back with no host work between them (stepReplayer); 0 elsewhere.
	// Beside DecodePerS it shows what the host's issuing of a step costs.
	DecodeGraphPerS float64
	StepGraphs      int // graphs a decode step launched
	StepDirectOps   int // its operations issued outside graphs (not replayed)
	KVDType         string
	Device          string
	PoolTokensUsed  int
}

// BenchSpeed measures prefill and decode at a context depth on random
// token ids (never zeros): it fills depth tokens, times a prefill chunk
// of prefillN tokens on top, then times decodeN greedy steps. The session
// is freed afterwards.
func (e *Engine) BenchSpeed(ctx context.Context, depth, prefillN, decodeN int, seed uint64) (SpeedResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	res := SpeedResult{Depth: depth, PrefillTokens: prefillN, DecodeTokens: decodeN, KVDType: kvName(e.layout), Device: e.be.Name()}
	if prefillN < 1 {
		return res, fmt.Errorf("bench: prefill tokens must be at least 1")
	}
	if e.budget > 0 && prefillN > e.prefillChunk() {
		// The measured chunk runs as one batch; the GPU memory plan
		// reserves the activations of prefill chunks only.
		return res, fmt.Errorf("bench: a measured prefill of %d tokens is larger than the planned prefill chunk (%d tokens, Options.PrefillChunk): the GPU memory plan would not cover it", prefillN, e.prefillChunk())
	}
	seq := e.pool.NewSequence()
	defer seq.Free()
	st, release, err := e.state.scratch()
	if err != nil {
		return res, err
	}
	defer release()
	vocab := e.mdl.Config.Vocab
	r := rand.New(rand.NewPCG(seed, 99))
	tokens := make([]int32, depth+prefillN)
	for i := range tokens {
		// Skip the first ids: special tokens sit there in most vocabularies.
		tokens[i] = int32(256 + r.IntN(vocab-256))
	}
	if _, err := seq.Append(tokens...); err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := e.prefill(ctx, seq, st, tokens[:depth], 0, nil, nil); err != nil {
		return res, err
	}
	if err := e.sync(); err != nil {
		return res, err
	}
	res.FillSeconds = time.Since(t0).Seconds()

	var logits []float32
	t1 := time.Now()
	if err := e.prefillOnce(seq, st, tokens, depth, &logits); err != nil {
		return res, err
	}
	res.PrefillPerS = float64(prefillN) / time.Since(t1).Seconds()

	t2 := time.Now()
	var src sample.Logits = sample.Slice(logits)
	onDevice := deviceSampling() // FTCHAT_DEVICE_SAMPLING=0: copy each row, to compare
	for i := 0; i < decodeN; i++ {
		id, ok := src.Argmax(1, nil)
		if !ok {
			id = sample.Argmax(src.All())
		}
		if err := sourceErr(src); err != nil {
			return res, err
		}
		pos, err := seq.Append(id)
		if err != nil {
			return res, err
		}
		if src, err = e.decodeToken(id, pos, seq.Pages(), st, onDevice); err != nil {
			return res, err
		}
	}
	if decodeN > 0 {
		res.DecodePerS = float64(decodeN) / time.Since(t2).Seconds()
		if r, ok := e.be.(stepReplayer); ok {
			ms, graphs, direct, err := r.ReplayLastStep(stepReplays)
			if err != nil {
				return res, err
			}
			if ms > 0 {
				res.DecodeGraphPerS = 1000 / ms
			}
			res.StepGraphs, res.StepDirectOps = graphs, direct
		}
	}
	res.PoolTokensUsed = e.pool.Stats().TokensUsed
	return res, ctx.Err()
}

// stepReplayer is a backend that can replay the last recorded decode
// step's CUDA graphs back to back and time them (gpu.Backend).
type stepReplayer interface {
	ReplayLastStep(n int) (ms float64, graphs, direct int, err error)
}

// stepReplays is how many times BenchSpeed replays the last decode step.
const stepReplays = 32

// prefillOnce runs tokens[start:] as one batch (the measured chunk).
func (e *Engine) prefillOnce(seq interface{ Pages() []int32 }, st *seqState, tokens []int32, start int, logits *[]float32) error {
	b := batchFor(tokens[start:], start, seq.Pages(), st)
	out, err := e.mdl.Forward(b, []int{len(tokens) - start - 1})
	if err == nil {
		err = backendErr(e.be)
	}
	*logits = out
	return err
}

// sync waits for queued device work (a no-op on the CPU).
func (e *Engine) sync() error {
	if s, ok := e.be.(interface{ Synchronize() error }); ok {
		return s.Synchronize()
	}
	return nil
}
