package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// Issue 15 item 12: bench speed says what it measures, on a terminal with
// the time left once one measurement is done, elsewhere a line each.
func TestSpeedProgress(t *testing.T) {
	saved := isTerminalWriter
	t.Cleanup(func() { isTerminalWriter = saved })
	for _, tty := range []bool{false, true} {
		isTerminalWriter = func(io.Writer) bool { return tty }
		var buf bytes.Buffer
		p := newSpeedProgress(&buf, []string{"bf16", "fp8_e4m3"}, []int{0, 4096}, 512, 64)
		p.begin("bf16", 0)
		time.Sleep(20 * time.Millisecond)
		p.end()
		p.begin("bf16", 4096)
		p.end()
		p.stop()
		out := buf.String()
		if !tty {
			want := "bench speed: bf16 at depth 0 (1 of 4)…\nbench speed: bf16 at depth 4096 (2 of 4)…\n"
			if out != want {
				t.Errorf("lines %q, want %q", out, want)
			}
			continue
		}
		first, second, _ := strings.Cut(out, "(2 of 4)")
		if !strings.Contains(first, "\r\x1b[Kbench speed: bf16 at depth 0 (1 of 4) · 0s") || strings.Contains(first, "left") {
			t.Errorf("first status %q", first)
		}
		if !strings.Contains(second, "left") {
			t.Errorf("second status has no estimate: %q", second)
		}
		if !strings.HasSuffix(out, "\r\x1b[K") {
			t.Errorf("the status line is not cleared at the end: %q", out)
		}
	}
}

// Issue 15 item 12: bench quality's terminal line between window lines.
func TestWindowProgress(t *testing.T) {
	saved := isTerminalWriter
	t.Cleanup(func() { isTerminalWriter = saved })
	isTerminalWriter = func(io.Writer) bool { return true }
	var buf bytes.Buffer
	p := newWindowProgress(&buf, 4)
	p.clear()
	buf.WriteString("window 1/4: …\n")
	p.next(1, 4, 10*time.Second)
	p.clear()
	p.stop()
	out := buf.String()
	first, second, ok := strings.Cut(out, "window 1/4: …\n")
	if !ok || !strings.Contains(first, "bench quality: window 1/4 · 0s") || strings.Contains(first, "left") {
		t.Fatalf("before the first window: %q", first)
	}
	// One window took 10 s (as the engine reports): three more, about 30 s.
	if !strings.Contains(second, "bench quality: window 2/4") || !strings.Contains(second, "· about 30s left") {
		t.Errorf("after the first window: %q", second)
	}
}
