package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ftchat/ftchat/engine/quality"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// EncodeText tokenizes plain text for evaluation: special-token text is
// ordinary text, and BOS is added when the model's metadata asks for it.
func (e *Engine) EncodeText(text string) []int32 {
	return e.tok.EncodeWith(text, tokenizer.EncodeOptions{AddSpecial: true, PlainSpecials: true})
}

// QualityProgress reports a finished window of EvalQuality.
type QualityProgress struct {
	Window, Windows int
	Scored          int // tokens scored so far
	Elapsed         time.Duration
	// Partial holds the results so far, one per compared spec, so a long
	// run that is stopped still leaves numbers in its log.
	Partial []quality.Result
}

// EvalQuality computes sliding-window perplexity of tokens under the
// reference cache ref and under each spec in tests, on the same windows
// (quality.Windows: each token scored once, with at least window-stride
// tokens of context outside the first window), and the KL divergence
// KL(ref || test) and top-1 agreement of every scored position. Each
// window runs from an empty cache; only the reference logits of one window
// are kept in memory.
func (e *Engine) EvalQuality(ctx context.Context, tokens []int32, window, stride int, ref KVSpec, tests []KVSpec, progress func(QualityProgress)) ([]quality.Result, error) {
	ws, err := quality.Windows(len(tokens), window, stride)
	if err != nil {
		return nil, err
	}
	return e.EvalQualityWindows(ctx, tokens, ws, ref, tests, progress)
}

// EvalQualityWindows is EvalQuality over a given list of windows (from
// quality.Windows; a suffix of that list resumes a stopped run, whose
// partial results combine with these weighted by tokens scored).
func (e *Engine) EvalQualityWindows(ctx context.Context, tokens []int32, ws []quality.Window, ref KVSpec, tests []KVSpec, progress func(QualityProgress)) ([]quality.Result, error) {
	for _, w := range ws {
		if w.Start < 0 || w.First <= w.Start || w.End < w.First || w.End > len(tokens) {
			return nil, fmt.Errorf("EvalQuality: window %+v does not fit %d tokens", w, len(tokens))
		}
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("EvalQuality: no KV dtype to compare with the reference")
	}
	vocab := e.mdl.Config.Vocab
	accs := make([]quality.Accumulator, len(tests))
	t0 := time.Now()
	scored := 0
	var refBuf []float32
	for wi, w := range ws {
		toks := tokens[w.Start:w.End]
		// Row r of the window predicts token Start+r+1: scored positions
		// First..End-1 need rows First-1-Start .. End-2-Start.
		rows := make([]int, 0, w.End-w.First)
		for p := w.First; p < w.End; p++ {
			rows = append(rows, p-1-w.Start)
		}
		need := len(rows) * vocab
		if cap(refBuf) < need {
			refBuf = make([]float32, need)
		}
		refBuf = refBuf[:need]
		i := 0
		err := e.EvalLogits(ctx, ref, toks, rows, func(_ int, l []float32) error {
			copy(refBuf[i*vocab:(i+1)*vocab], l)
			i++
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("window %d/%d (%s): %w", wi+1, len(ws), ref, err)
		}
		for ti, spec := range tests {
			i := 0
			err := e.EvalLogits(ctx, spec, toks, rows, func(row int, l []float32) error {
				target := int(toks[row+1])
				p, err := quality.Compare(refBuf[i*vocab:(i+1)*vocab], l, target)
				if err != nil {
					return fmt.Errorf("position %d: %w", w.Start+row+1, err)
				}
				accs[ti].Add(p, target)
				i++
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("window %d/%d (%s): %w", wi+1, len(ws), spec, err)
			}
		}
		scored += len(rows)
		if progress != nil {
			part := make([]quality.Result, len(accs))
			for i := range accs {
				part[i] = accs[i].Result()
			}
			progress(QualityProgress{Window: wi + 1, Windows: len(ws), Scored: scored, Elapsed: time.Since(t0), Partial: part})
		}
	}
	res := make([]quality.Result, len(tests))
	for i := range accs {
		res[i] = accs[i].Result()
	}
	return res, nil
}

// NeedleConfig describes a needle-in-a-haystack run.
type NeedleConfig struct {
	Filler    string    // prose the haystack is built from (sentences repeated as needed)
	Lengths   []int     // haystack sizes in tokens
	Depths    []float64 // needle positions, fractions of the haystack (0.1 = near the start)
	Seed      uint64    // passphrase randomness
	MaxTokens int       // answer tokens decoded greedily; 0 = 32
}

// NeedleResult is one (length, depth, spec) trial.
type NeedleResult struct {
	KV           string  `json:"kv"`
	Length       int     `json:"length"`        // requested haystack tokens
	PromptTokens int     `json:"prompt_tokens"` // whole chat prompt
	Depth        float64 `json:"depth"`         // requested
	ActualDepth  float64 `json:"actual_depth"`  // at the sentence boundary used
	Passphrase   string  `json:"passphrase"`
	Answer       string  `json:"answer"`
	Found        bool    `json:"found"`
}

// EvalNeedle inserts "The secret passphrase is <word-digits>." into filler
// text at each depth for each length, asks for it through the chat
// template, decodes greedily under each spec and reports whether the
// answer holds the passphrase. Every spec sees the same prompts.
func (e *Engine) EvalNeedle(ctx context.Context, cfg NeedleConfig, specs []KVSpec, progress func(NeedleResult)) ([]NeedleResult, error) {
	sents := quality.SplitSentences(cfg.Filler)
	if len(sents) == 0 {
		return nil, fmt.Errorf("needle: the filler text is empty")
	}
	maxNew := cfg.MaxTokens
	if maxNew == 0 {
		maxNew = 32
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6e656564))
	count := func(s string) int { return len(e.EncodeText(s)) }
	var out []NeedleResult
	for _, n := range cfg.Lengths {
		for _, d := range cfg.Depths {
			pass := quality.Passphrase(rng)
			h, err := quality.BuildHaystack(sents, quality.NeedleSentence(pass), n, d, count)
			if err != nil {
				return nil, err
			}
			prompt, err := e.EncodeChat([]Message{{Role: "user", Content: h.Text + "\n\n" + quality.NeedleQuestion}})
			if err != nil {
				return nil, err
			}
			if len(prompt)+maxNew > e.info.ContextLen {
				return nil, fmt.Errorf("needle: a %d-token haystack makes a %d-token prompt; with %d answer tokens that exceeds the model's context of %d tokens (use a smaller length)",
					n, len(prompt), maxNew, e.info.ContextLen)
			}
			for _, spec := range specs {
				ids, err := e.EvalGreedy(ctx, spec, prompt, maxNew)
				if err != nil {
					return nil, fmt.Errorf("needle length %d depth %g (%s): %w", n, d, spec, err)
				}
				ans := e.tok.Decode(ids)
				r := NeedleResult{KV: spec.String(), Length: n, PromptTokens: len(prompt), Depth: d, ActualDepth: h.Depth,
					Passphrase: pass, Answer: ans, Found: quality.Found(ans, pass)}
				out = append(out, r)
				if progress != nil {
					progress(r)
				}
			}
		}
	}
	return out, nil
}

// AttnShape is the model's KV geometry (attention layers, KV heads, head_dim).
func (e *Engine) AttnShape() (layers, kvHeads, headDim int) {
	c := e.mdl.Config
	return c.AttnLayers, c.KVHeads, c.HeadDim
}
