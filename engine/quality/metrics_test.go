package quality

import (
	"math"
	"math/rand/v2"
	"testing"
)

func logits(p ...float64) []float32 {
	l := make([]float32, len(p))
	for i, x := range p {
		l[i] = float32(math.Log(x))
	}
	return l
}

func TestCompareHandComputed(t *testing.T) {
	// Values worked out by hand (natural logs).
	cases := []struct {
		name          string
		ref, test     []float32
		target        int
		kl, nllRef    float64
		nll           float64
		top1Ref, top1 int
	}{
		{"identical", logits(0.25, 0.75), logits(0.25, 0.75), 1, 0, -math.Log(0.75), -math.Log(0.75), 1, 1},
		// KL = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.5*(-0.587787) + 0.5*1.609438
		{"coin vs biased", logits(0.5, 0.5), logits(0.9, 0.1), 0, 0.5108256237659907, math.Ln2, -math.Log(0.9), 0, 0},
		// KL = 0.9 ln(0.9/0.5) + 0.1 ln(0.1/0.5)
		{"biased vs coin", logits(0.9, 0.1), logits(0.5, 0.5), 1, 0.3680642071684971, -math.Log(0.1), math.Ln2, 0, 0},
		// Shifting all logits by a constant changes nothing.
		{"shifted", []float32{1, 2, 3}, []float32{101, 102, 103}, 2, 0, 0.40760596444437994, 0.40760596444437994, 2, 2},
		// Flipped argmax: p = (0.6, 0.4), q = (0.4, 0.6): KL = 0.2 ln(1.5) * ... = 0.6 ln 1.5 + 0.4 ln(2/3)
		{"flipped", logits(0.6, 0.4), logits(0.4, 0.6), 0, 0.6*math.Log(1.5) + 0.4*math.Log(0.4/0.6), -math.Log(0.6), -math.Log(0.4), 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compare(c.ref, c.test, c.target)
			if err != nil {
				t.Fatal(err)
			}
			// float32 logits carry ~1e-7 relative error.
			const tol = 1e-6
			if math.Abs(p.KL-c.kl) > tol || math.Abs(p.NLLRef-c.nllRef) > tol || math.Abs(p.NLL-c.nll) > tol {
				t.Errorf("KL %.9f NLLRef %.9f NLL %.9f; want %.9f %.9f %.9f", p.KL, p.NLLRef, p.NLL, c.kl, c.nllRef, c.nll)
			}
			if p.Top1Ref != c.top1Ref || p.Top1 != c.top1 {
				t.Errorf("top1 ref %d test %d; want %d %d", p.Top1Ref, p.Top1, c.top1Ref, c.top1)
			}
		})
	}
}

func TestCompareIdenticalIsExactlyZero(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	l := make([]float32, 49152)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 8)
	}
	p, err := Compare(l, append([]float32(nil), l...), 7)
	if err != nil {
		t.Fatal(err)
	}
	if p.KL != 0 || p.NLL != p.NLLRef || p.Top1 != p.Top1Ref {
		t.Fatalf("identical logits: %+v; want KL exactly 0 and equal NLL/top-1", p)
	}
}

// TestCompareRandom checks KL against an independent float64 computation
// through normalised probabilities: sum p_i * (log p_i - log q_i).
func TestCompareRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		n := 2 + r.IntN(3000)
		ref, test := make([]float32, n), make([]float32, n)
		scale := []float64{0.1, 1, 10, 40}[trial%4]
		for i := range ref {
			ref[i] = float32(r.NormFloat64()*scale + 300) // large offset: overflow without max-subtraction
			test[i] = ref[i] + float32(r.NormFloat64()*scale*0.1)
		}
		target := r.IntN(n)
		p, err := Compare(ref, test, target)
		if err != nil {
			t.Fatal(err)
		}
		pr, qr := softmax64(ref), softmax64(test)
		want := 0.0
		for i := range pr {
			if pr[i] > 0 {
				want += pr[i] * (math.Log(pr[i]) - math.Log(qr[i]))
			}
		}
		if math.Abs(p.KL-want) > 1e-9+1e-7*want {
			t.Fatalf("trial %d: KL %.12g, reference %.12g", trial, p.KL, want)
		}
		if d := math.Abs(p.NLLRef + math.Log(pr[target])); d > 1e-9 {
			t.Fatalf("trial %d: NLL ref %.12g, reference %.12g", trial, p.NLLRef, -math.Log(pr[target]))
		}
	}
}

func softmax64(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	out := make([]float64, len(x))
	s := 0.0
	for i, v := range x {
		out[i] = math.Exp(float64(v) - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func TestCompareErrors(t *testing.T) {
	inf := float32(math.Inf(1))
	cases := []struct {
		name      string
		ref, test []float32
		target    int
	}{
		{"length mismatch", []float32{1, 2}, []float32{1}, 0},
		{"empty", nil, nil, 0},
		{"target out of range", []float32{1, 2}, []float32{1, 2}, 2},
		{"negative target", []float32{1, 2}, []float32{1, 2}, -1},
		{"nan", []float32{float32(math.NaN()), 1}, []float32{1, 2}, 0},
		{"inf", []float32{1, 2}, []float32{inf, 2}, 0},
	}
	for _, c := range cases {
		if _, err := Compare(c.ref, c.test, c.target); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func TestPerplexityUniformIsVocab(t *testing.T) {
	for _, v := range []int{2, 50, 49152} {
		var a Accumulator
		u := make([]float32, v)
		for i := range u {
			u[i] = 3.25
		}
		for pos := range 37 {
			p, err := Compare(u, u, pos%v)
			if err != nil {
				t.Fatal(err)
			}
			a.Add(p, pos%v)
		}
		r := a.Result()
		if math.Abs(r.PPLRef-float64(v)) > 1e-9*float64(v) || math.Abs(r.PPL-float64(v)) > 1e-9*float64(v) {
			t.Errorf("vocab %d: uniform perplexity %v / %v; want %d", v, r.PPLRef, r.PPL, v)
		}
		if r.KLDMean != 0 || r.Top1Agreement != 1 || r.DeltaPPLPct != 0 {
			t.Errorf("vocab %d: identical distributions gave %+v", v, r)
		}
	}
}

func TestAccumulator(t *testing.T) {
	// Four positions over a 3-token vocabulary; two flips of the argmax.
	type pos struct {
		ref, test []float32
		target    int
	}
	ps := []pos{
		{logits(0.7, 0.2, 0.1), logits(0.7, 0.2, 0.1), 0}, // agree, both right
		{logits(0.2, 0.7, 0.1), logits(0.5, 0.4, 0.1), 1}, // flip: ref right, test wrong
		{logits(0.1, 0.1, 0.8), logits(0.1, 0.2, 0.7), 0}, // agree, both wrong
		{logits(0.45, 0.55, 0), logits(0.55, 0.45, 0), 0}, // flip: ref wrong, test right
	}
	ps[3].ref[2], ps[3].test[2] = -1e4, -1e4 // log(0) stand-in
	var a Accumulator
	var nllRef, nll, kl []float64
	for _, p := range ps {
		c, err := Compare(p.ref, p.test, p.target)
		if err != nil {
			t.Fatal(err)
		}
		a.Add(c, p.target)
		nllRef, nll, kl = append(nllRef, c.NLLRef), append(nll, c.NLL), append(kl, c.KL)
	}
	r := a.Result()
	if r.Tokens != 4 || r.Top1Agreement != 0.5 || r.Top1AccRef != 0.5 || r.Top1Acc != 0.5 {
		t.Errorf("counts: %+v; want 4 tokens, agreement 0.5, accuracies 0.5", r)
	}
	mean := func(x []float64) float64 { return (x[0] + x[1] + x[2] + x[3]) / 4 }
	if want := math.Exp(mean(nllRef)); math.Abs(r.PPLRef-want) > 1e-12*want {
		t.Errorf("ppl_ref %v, want %v", r.PPLRef, want)
	}
	if want := math.Exp(mean(nll)); math.Abs(r.PPL-want) > 1e-12*want {
		t.Errorf("ppl %v, want %v", r.PPL, want)
	}
	if want := 100 * (r.PPL - r.PPLRef) / r.PPLRef; r.DeltaPPLPct != want {
		t.Errorf("delta %v, want %v", r.DeltaPPLPct, want)
	}
	if want := mean(kl); math.Abs(r.KLDMean-want) > 1e-15 {
		t.Errorf("kld mean %v, want %v", r.KLDMean, want)
	}
	if r.KLDMax != math.Max(math.Max(kl[0], kl[1]), math.Max(kl[2], kl[3])) {
		t.Errorf("kld max %v of %v", r.KLDMax, kl)
	}
	var empty Accumulator
	if e := empty.Result(); !math.IsNaN(e.PPL) || !math.IsNaN(e.Top1Agreement) || e.Tokens != 0 {
		t.Errorf("empty accumulator: %+v; want NaN rates", e)
	}
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 3}, {1, 5}, {0.25, 2}, {0.99, 4.96}, {0.1, 1.4}} {
		if got := Quantile(s, c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of nothing should be NaN")
	}
}

func TestLogSumExpLarge(t *testing.T) {
	if got, want := LogSumExp([]float32{1000, 1000}), 1000+math.Ln2; math.Abs(got-want) > 1e-9 {
		t.Errorf("LogSumExp(1000,1000) = %v, want %v", got, want)
	}
	if got := LogSumExp([]float32{-1000, 0}); math.Abs(got) > 1e-12 {
		t.Errorf("LogSumExp(-1000,0) = %v, want ~0", got)
	}
}
