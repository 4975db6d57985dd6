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
		p := newSpeedProgress(&buf, []string{"bf16", "fp8_e4m3"}, []int{0, 4096}, 512, 64, false)
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

// bench speed's warm-up pass has its own line, is not counted among the
// measurements, and its work is part of the time-left estimate.
func TestSpeedProgressWarmup(t *testing.T) {
	saved := isTerminalWriter
	t.Cleanup(func() { isTerminalWriter = saved })
	isTerminalWriter = func(io.Writer) bool { return false }
	var buf bytes.Buffer
	p := newSpeedProgress(&buf, []string{"bf16"}, []int{0, 4096}, 512, 64, true)
	if want := p.warmupWeight() + p.weight(0) + p.weight(4096); p.left != want {
		t.Errorf("planned work %v, want %v (warm-up included)", p.left, want)
	}
	p.warmup("bf16")
	p.end()
	p.begin("bf16", 0)
	p.end()
	p.stop()
	want := "bench speed: bf16 warm-up (untimed)…\nbench speed: bf16 at depth 0 (1 of 2)…\n"
	if got := buf.String(); got != want {
		t.Errorf("lines %q, want %q", got, want)
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

// Issue 15 item 12: bench needle says how many probes it runs, numbers
// them in its result lines and, on a terminal, shows the running probe
// with the time left once one is done (weighted by haystack length).
func TestNeedleProgress(t *testing.T) {
	saved := isTerminalWriter
	t.Cleanup(func() { isTerminalWriter = saved })
	for _, tty := range []bool{false, true} {
		isTerminalWriter = func(io.Writer) bool { return tty }
		var buf bytes.Buffer
		p := newNeedleProgress(&buf, []int{1024, 4096}, 1, 2)
		var prefixes []string
		for range 4 {
			p.begin()
			if tty {
				time.Sleep(5 * time.Millisecond)
			}
			prefixes = append(prefixes, p.end())
			buf.WriteString("result\n")
		}
		p.begin() // after the last probe: nothing
		p.stop()
		if want := []string{"[1/4] ", "[2/4] ", "[3/4] ", "[4/4] "}; strings.Join(prefixes, ",") != strings.Join(want, ",") {
			t.Errorf("tty %v: prefixes %q, want %q", tty, prefixes, want)
		}
		out := buf.String()
		if !strings.HasPrefix(out, "bench needle: 4 probes (2 lengths × 1 depths × 2 KV dtypes)\n") {
			t.Errorf("tty %v: no plan line: %q", tty, out)
		}
		if !tty {
			if strings.Contains(out, "\r") {
				t.Errorf("status drawn on a non-terminal: %q", out)
			}
			continue
		}
		first, rest, _ := strings.Cut(out, "result\n")
		if !strings.Contains(first, "bench needle: probe 1/4, 1024-token haystack · 0s") || strings.Contains(first, "left") {
			t.Errorf("first status %q", first)
		}
		if !strings.Contains(rest, "probe 3/4, 4096-token haystack") || !strings.Contains(rest, "left") {
			t.Errorf("later status has no probe or estimate: %q", rest)
		}
	}
}

// Issue 15 item 12: calibrate's progress: a line per window elsewhere, on
// a terminal one redrawn line with the time left.
func TestTokenProgress(t *testing.T) {
	saved := isTerminalWriter
	t.Cleanup(func() { isTerminalWriter = saved })
	isTerminalWriter = func(io.Writer) bool { return false }
	var buf bytes.Buffer
	p := newTokenProgress(&buf, "calibrating", 1024)
	p.update(512, 1024)
	p.update(1024, 1024)
	p.stop()
	if want := "calibrating: 512/1024 tokens\ncalibrating: 1024/1024 tokens\n"; buf.String() != want {
		t.Errorf("lines %q, want %q", buf.String(), want)
	}
	isTerminalWriter = func(io.Writer) bool { return true }
	buf.Reset()
	p = newTokenProgress(&buf, "calibrating", 1024)
	if got := p.line(10 * time.Second); got != "calibrating: 0/1024 tokens · 10s" {
		t.Errorf("before the first window: %q", got)
	}
	p.update(256, 1024)
	if got := p.line(10 * time.Second); got != "calibrating: 256/1024 tokens · 10s · about 30s left" {
		t.Errorf("after a quarter: %q", got)
	}
	p.stop()
	if out := buf.String(); !strings.Contains(out, "\r\x1b[Kcalibrating: 0/1024 tokens · 0s") || strings.Contains(out, "\n") {
		t.Errorf("terminal output %q", out)
	}
}
