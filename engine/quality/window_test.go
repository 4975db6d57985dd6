package quality

import (
	"math/rand/v2"
	"testing"
)

func TestWindowsHandPlanned(t *testing.T) {
	got, err := Windows(1000, 512, 256)
	if err != nil {
		t.Fatal(err)
	}
	want := []Window{{0, 1, 512}, {256, 512, 768}, {512, 768, 1000}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("window %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestWindowsProperty: every token 1..n-1 is scored exactly once, token 0
// never, no window exceeds the window size, and every scored token outside
// the first window has at least window-stride tokens of context.
func TestWindowsProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 2000 {
		n := 2 + r.IntN(3000)
		window := 2 + r.IntN(600)
		stride := 1 + r.IntN(window-1)
		ws, err := Windows(n, window, stride)
		if err != nil {
			t.Fatalf("Windows(%d, %d, %d): %v", n, window, stride, err)
		}
		seen := make([]int, n)
		for i, w := range ws {
			if w.Start < 0 || w.End > n || w.End-w.Start > window || w.First <= w.Start || w.First > w.End {
				t.Fatalf("trial %d: bad window %+v (n %d, window %d)", trial, w, n, window)
			}
			if i > 0 && w.First-w.Start < window-stride {
				t.Fatalf("trial %d: window %+v gives its first scored token %d tokens of context, want >= %d", trial, w, w.First-w.Start, window-stride)
			}
			for p := w.First; p < w.End; p++ {
				seen[p]++
			}
		}
		if seen[0] != 0 {
			t.Fatalf("trial %d: token 0 scored", trial)
		}
		for p := 1; p < n; p++ {
			if seen[p] != 1 {
				t.Fatalf("trial %d (n %d, window %d, stride %d): token %d scored %d times", trial, n, window, stride, p, seen[p])
			}
		}
	}
}

func TestWindowsErrors(t *testing.T) {
	for _, c := range []struct{ n, window, stride int }{
		{100, 1, 1}, {100, 512, 0}, {100, 512, 512}, {100, 512, 600}, {1, 512, 256}, {0, 512, 256},
	} {
		if _, err := Windows(c.n, c.window, c.stride); err == nil {
			t.Errorf("Windows(%d, %d, %d): no error", c.n, c.window, c.stride)
		}
	}
}
