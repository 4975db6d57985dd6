// Package quality measures how much a KV-cache storage format changes a
// model's predictions: perplexity over a sliding window, the KL divergence
// and top-1 agreement of next-token distributions against a 16-bit
// reference, and needle-in-a-haystack retrieval. It holds the arithmetic
// only; engine.Engine produces the logits and `ftchat bench` drives it.
package quality

import (
	"fmt"
	"math"
	"sort"
)

// LogSumExp is log(sum(exp(x))) computed in float64 with the maximum
// subtracted first, so large logits neither overflow nor lose the small terms.
func LogSumExp(x []float32) float64 {
	if len(x) == 0 {
		return math.Inf(-1)
	}
	m := float64(x[0])
	for _, v := range x[1:] {
		m = math.Max(m, float64(v))
	}
	if math.IsInf(m, 0) || math.IsNaN(m) {
		return m
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

// Argmax is the index of the largest value (the first one on ties).
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// Position is what one scored token contributes.
type Position struct {
	NLLRef, NLL float64 // -log p(target) under the reference and the test distribution
	KL          float64 // KL(ref || test) over the whole vocabulary, in nats
	Top1Ref     int     // argmax of the reference logits
	Top1        int     // argmax of the test logits
}

// Compare scores one position: ref and test are the raw logits of the same
// row under the two caches, target the token that actually follows.
// Identical logits give KL exactly 0 (every term is p*(0)).
func Compare(ref, test []float32, target int) (Position, error) {
	if len(ref) != len(test) || len(ref) == 0 {
		return Position{}, fmt.Errorf("quality: logits of %d and %d values; want the same non-zero vocabulary size", len(ref), len(test))
	}
	if target < 0 || target >= len(ref) {
		return Position{}, fmt.Errorf("quality: target token %d outside the vocabulary of %d", target, len(ref))
	}
	lr, lt := LogSumExp(ref), LogSumExp(test)
	if math.IsNaN(lr) || math.IsInf(lr, 0) || math.IsNaN(lt) || math.IsInf(lt, 0) {
		return Position{}, fmt.Errorf("quality: non-finite logits (reference log-sum-exp %v, test %v)", lr, lt)
	}
	kl := 0.0
	for i := range ref {
		lp := float64(ref[i]) - lr
		lq := float64(test[i]) - lt
		if d := lp - lq; d != 0 {
			kl += math.Exp(lp) * d
		}
	}
	// Rounding can leave a tiny negative sum for nearly equal distributions.
	kl = math.Max(kl, 0)
	return Position{
		NLLRef: lr - float64(ref[target]), NLL: lt - float64(test[target]),
		KL: kl, Top1Ref: Argmax(ref), Top1: Argmax(test),
	}, nil
}

// Perplexity is exp(mean negative log-likelihood).
func Perplexity(nllSum float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return math.Exp(nllSum / float64(n))
}

// Accumulator sums positions; the zero value is ready. Sums are
// compensated (Kahan) so 10^5 positions lose no digits that matter.
type Accumulator struct {
	n                 int
	nllRef, nll, kl   kahan
	agree, refCorrect int
	testCorrect       int
	kls               []float64
}

type kahan struct{ sum, c float64 }

func (k *kahan) add(x float64) {
	y := x - k.c
	t := k.sum + y
	k.c = (t - k.sum) - y
	k.sum = t
}

// Add records one scored position; target is the true next token.
func (a *Accumulator) Add(p Position, target int) {
	a.n++
	a.nllRef.add(p.NLLRef)
	a.nll.add(p.NLL)
	a.kl.add(p.KL)
	a.kls = append(a.kls, p.KL)
	if p.Top1 == p.Top1Ref {
		a.agree++
	}
	if p.Top1Ref == target {
		a.refCorrect++
	}
	if p.Top1 == target {
		a.testCorrect++
	}
}

// Result summarises what was added.
type Result struct {
	Tokens        int     `json:"tokens_scored"`
	PPLRef        float64 `json:"ppl_ref"`
	PPL           float64 `json:"ppl"`
	DeltaPPLPct   float64 `json:"delta_ppl_pct"` // 100 * (PPL - PPLRef) / PPLRef
	KLDMean       float64 `json:"kld_mean"`      // nats per position
	KLDMedian     float64 `json:"kld_median"`
	KLDP99        float64 `json:"kld_p99"`
	KLDMax        float64 `json:"kld_max"`
	Top1Agreement float64 `json:"top1_agreement"` // fraction of positions whose argmax matches the reference's
	Top1AccRef    float64 `json:"top1_acc_ref"`   // fraction where the reference's argmax is the true token
	Top1Acc       float64 `json:"top1_acc"`
}

// Result computes the summary; with nothing added every rate is NaN.
func (a *Accumulator) Result() Result {
	r := Result{Tokens: a.n}
	if a.n == 0 {
		nan := math.NaN()
		return Result{PPLRef: nan, PPL: nan, DeltaPPLPct: nan, KLDMean: nan, KLDMedian: nan, KLDP99: nan, KLDMax: nan,
			Top1Agreement: nan, Top1AccRef: nan, Top1Acc: nan}
	}
	n := float64(a.n)
	r.PPLRef = Perplexity(a.nllRef.sum, a.n)
	r.PPL = Perplexity(a.nll.sum, a.n)
	r.DeltaPPLPct = 100 * (r.PPL - r.PPLRef) / r.PPLRef
	r.KLDMean = a.kl.sum / n
	s := append([]float64(nil), a.kls...)
	sort.Float64s(s)
	r.KLDMedian = Quantile(s, 0.5)
	r.KLDP99 = Quantile(s, 0.99)
	r.KLDMax = s[len(s)-1]
	r.Top1Agreement = float64(a.agree) / n
	r.Top1AccRef = float64(a.refCorrect) / n
	r.Top1Acc = float64(a.testCorrect) / n
	return r
}

// Quantile of sorted values with linear interpolation between order
// statistics (q in [0, 1]; the definition numpy calls "linear").
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	i := int(math.Floor(pos))
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	f := pos - float64(i)
	return sorted[i] + f*(sorted[i+1]-sorted[i])
}
