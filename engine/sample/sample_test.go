package sample

import (
	"math"
	"testing"
)

func logitsOf(p []float64) []float32 {
	l := make([]float32, len(p))
	for i, x := range p {
		l[i] = float32(math.Log(x))
	}
	return l
}

func TestValidate(t *testing.T) {
	bad := []Params{
		{Temperature: -1}, {TopK: -2}, {TopP: 1.5}, {TopP: -0.1}, {MinP: 2},
		{RepeatPenalty: -1}, {RepeatLastN: -5}, {Temperature: float32(math.NaN())},
	}
	for _, p := range bad {
		if _, err := New(p); err == nil {
			t.Errorf("New(%+v) accepted invalid params", p)
		}
	}
	if _, err := New(Params{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.1}); err != nil {
		t.Error(err)
	}
}

func TestGreedyAndPenalty(t *testing.T) {
	tests := []struct {
		name    string
		p       Params
		logits  []float32
		history []int32
		want    int32
	}{
		{"argmax", Params{}, []float32{0.1, 3, -2, 2.9}, nil, 1},
		{"first of ties", Params{}, []float32{1, 5, 5, 0}, nil, 1},
		{"penalty shrinks positive", Params{RepeatPenalty: 2}, []float32{2, 1.5, -1}, []int32{0}, 1},
		{"penalty pushes negative down", Params{RepeatPenalty: 4}, []float32{-1, -3, -3.5}, []int32{0}, 1},
		{"window excludes old tokens", Params{RepeatPenalty: 2, RepeatLastN: 1}, []float32{2, 1.5, -1}, []int32{0, 2}, 0},
		{"all history", Params{RepeatPenalty: 2, RepeatLastN: -1}, []float32{2, 1.5, -1}, append(make([]int32, 100), 2), 1},
		{"top-k 1 is argmax", Params{Temperature: 1.5, TopK: 1}, []float32{0, 0.5, 0.49}, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			in := append([]float32(nil), tc.logits...)
			for range 20 {
				if got := s.Sample(in, tc.history); got != tc.want {
					t.Fatalf("got %d, want %d", got, tc.want)
				}
			}
			for i := range in {
				if in[i] != tc.logits[i] {
					t.Fatal("Sample modified the caller's logits")
				}
			}
		})
	}
}

// TestDistribution draws many samples with a fixed seed and checks each
// token's frequency against the probability computed from the definition,
// within 4 standard deviations.
func TestDistribution(t *testing.T) {
	base := []float64{0.5, 0.3, 0.15, 0.05}
	norm := func(w []float64) []float64 {
		var s float64
		for _, x := range w {
			s += x
		}
		out := make([]float64, len(w))
		for i, x := range w {
			out[i] = x / s
		}
		return out
	}
	tests := []struct {
		name string
		p    Params
		want []float64
	}{
		{"temperature 1", Params{Temperature: 1}, base},
		{"temperature 0.5 squares", Params{Temperature: 0.5}, norm([]float64{0.25, 0.09, 0.0225, 0.0025})},
		{"temperature 2 roots", Params{Temperature: 2}, norm([]float64{math.Sqrt(0.5), math.Sqrt(0.3), math.Sqrt(0.15), math.Sqrt(0.05)})},
		{"top-k 2", Params{Temperature: 1, TopK: 2}, norm([]float64{0.5, 0.3, 0, 0})},
		{"top-p 0.7", Params{Temperature: 1, TopP: 0.7}, norm([]float64{0.5, 0.3, 0, 0})},
		{"top-p 0.85", Params{Temperature: 1, TopP: 0.85}, norm([]float64{0.5, 0.3, 0.15, 0})},
		{"min-p 0.2", Params{Temperature: 1, MinP: 0.2}, norm([]float64{0.5, 0.3, 0.15, 0})},
		{"min-p 0.5", Params{Temperature: 1, MinP: 0.5}, norm([]float64{0.5, 0.3, 0, 0})},
		{"top-k 3 then top-p 0.6", Params{Temperature: 1, TopK: 3, TopP: 0.6}, norm([]float64{0.5, 0.3, 0, 0})},
	}
	const n = 40000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Seed = 42
			s, err := New(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int, len(base))
			lg := logitsOf(base)
			for range n {
				counts[s.Sample(lg, nil)]++
			}
			for i, w := range tc.want {
				got := float64(counts[i]) / n
				sd := math.Sqrt(w*(1-w)/n) + 1e-9
				if math.Abs(got-w) > 4*sd {
					t.Errorf("token %d: frequency %.4f, want %.4f ± %.4f (counts %v)", i, got, w, 4*sd, counts)
				}
			}
		})
	}
}

func TestSeedDeterminism(t *testing.T) {
	lg := logitsOf([]float64{0.2, 0.2, 0.2, 0.2, 0.2})
	draw := func(seed uint64) []int32 {
		s, _ := New(Params{Temperature: 1, Seed: seed})
		out := make([]int32, 50)
		for i := range out {
			out[i] = s.Sample(lg, nil)
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	same := func(x, y []int32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("same seed gave different tokens")
	}
	if same(a, c) {
		t.Error("different seeds gave identical 50-token runs")
	}
}

func TestEmptyAndNaNLogits(t *testing.T) {
	for _, p := range []Params{{}, {Temperature: 1, TopP: 0.9, MinP: 0.1, TopK: 5}} {
		s, _ := New(p)
		if got := s.Sample(nil, nil); got != -1 {
			t.Errorf("%+v: empty logits gave %d", p, got)
		}
		nan := float32(math.NaN())
		if got := s.Sample([]float32{nan, nan, nan}, nil); got < 0 || got > 2 {
			t.Errorf("%+v: NaN logits gave %d", p, got)
		}
	}
}

func TestLargeVocabTopP(t *testing.T) {
	// One dominant token in a big flat vocabulary: top-p 0.5 must return it.
	lg := make([]float32, 150000)
	lg[12345] = 20
	s, _ := New(Params{Temperature: 1, TopP: 0.5, Seed: 1})
	for range 10 {
		if got := s.Sample(lg, nil); got != 12345 {
			t.Fatalf("got %d", got)
		}
	}
}

func TestStopper(t *testing.T) {
	s := NewStopper([]int32{2, 7}, []string{"</s>", "\nUser:", ""})
	if !s.IsEOG(7) || s.IsEOG(3) {
		t.Error("IsEOG")
	}
	tests := []struct {
		text string
		keep int
		stop bool
	}{
		{"hello", 5, false},
		{"hello <", 6, false},   // "<" could start "</s>": hold it back
		{"hello </", 6, false},  // split across tokens
		{"hello </s", 6, false}, //
		{"hello </s>", 6, true}, // complete: trim before it
		{"hi </s> more </s>", 3, true},
		{"a\nUs", 1, false},
		{"a\nUser: x", 1, true},
		{"a<b", 3, false}, // "<b" cannot become a stop string
		{"", 0, false},
		{"x\n", 1, false},
	}
	for _, tc := range tests {
		keep, stop := s.Check(tc.text)
		if keep != tc.keep || stop != tc.stop {
			t.Errorf("Check(%q) = %d, %v; want %d, %v", tc.text, keep, stop, tc.keep, tc.stop)
		}
	}
	if k, st := NewStopper(nil, nil).Check("abc"); k != 3 || st {
		t.Error("no stop strings must keep everything")
	}
}
