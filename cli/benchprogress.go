package cli

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// speedProgress tells what `bench speed` is measuring, which takes
// minutes at long depths on a CPU (issue 15 item 12): on a terminal a
// redrawn line with the elapsed time and, after the first measurement,
// an estimate of what is left; otherwise one line per measurement.
type speedProgress struct {
	w                io.Writer
	tty              bool
	total            int
	prefillN, decode int
	left             float64 // work of the measurements not started, in weight units

	n          int // measurements started
	doneWeight float64
	doneTime   time.Duration
	start      time.Time
	cur        float64 // weight of the running measurement
	st         *statusLine
}

// newSpeedProgress plans the measurements of kinds x depths, each dtype's
// led by an untimed warm-up pass when warmups is set.
func newSpeedProgress(w io.Writer, kinds []string, depths []int, prefillN, decode int, warmups bool) *speedProgress {
	p := &speedProgress{w: w, tty: isTerminalWriter(w), total: len(kinds) * len(depths), prefillN: prefillN, decode: decode}
	for range kinds {
		if warmups {
			p.left += p.warmupWeight()
		}
		for _, d := range depths {
			p.left += p.weight(d)
		}
	}
	return p
}

// warmupWeight is the work of a warm-up pass: a depth-0 prefill and
// warmupDecode steps.
func (p *speedProgress) warmupWeight() float64 {
	return float64(p.prefillN) + 16*float64(min(p.decode, warmupDecode))
}

// weight estimates a measurement's work: its depth and prefill tokens,
// and its decode steps, each about as costly as a short prefill chunk.
func (p *speedProgress) weight(depth int) float64 {
	return float64(depth+p.prefillN) + 16*float64(p.decode)
}

func (p *speedProgress) begin(dtype string, depth int) {
	p.n++
	p.cur = p.weight(depth)
	p.left -= p.cur
	p.start = time.Now()
	what := fmt.Sprintf("bench speed: %s at depth %d (%d of %d)", dtype, depth, p.n, p.total)
	if !p.tty {
		fmt.Fprintln(p.w, what+"…")
		return
	}
	p.st = startStatus(p.w, func(d time.Duration) string {
		line := what + " · " + shortDuration(d)
		if p.doneWeight > 0 {
			rate := p.doneTime.Seconds() / p.doneWeight
			eta := time.Duration((p.left+p.cur)*rate*float64(time.Second)) - d
			line += " · about " + shortDuration(max(eta, 0)) + " left"
		}
		return line
	})
}

// warmup starts the line of dtype's untimed warm-up pass (depth 0), not
// counted among the measurements; end finishes it like one.
func (p *speedProgress) warmup(dtype string) {
	p.cur = p.warmupWeight()
	p.left -= p.cur
	p.start = time.Now()
	what := fmt.Sprintf("bench speed: %s warm-up (untimed)", dtype)
	if !p.tty {
		fmt.Fprintln(p.w, what+"…")
		return
	}
	p.st = startStatus(p.w, func(d time.Duration) string { return what + " · " + shortDuration(d) })
}

func (p *speedProgress) end() {
	if p.st != nil {
		p.st.Stop()
		p.st = nil
	}
	p.doneWeight += p.cur
	p.doneTime += time.Since(p.start)
}

func (p *speedProgress) stop() {
	if p.st != nil {
		p.st.Stop()
	}
}

// windowProgress is `bench quality`'s line on a terminal between its
// per-window lines: the window being scored, the time so far and, from
// the windows done, the time left.
type windowProgress struct {
	w     io.Writer
	start time.Time
	st    *statusLine
}

func newWindowProgress(w io.Writer, windows int) *windowProgress {
	p := &windowProgress{w: w, start: time.Now()}
	p.show(1, windows, 0, 0)
	return p
}

// show draws "window i/n · elapsed · about T left" from the elapsed time
// at the last finished window (done windows took doneIn).
func (p *windowProgress) show(i, n, done int, doneIn time.Duration) {
	p.st = startStatus(p.w, func(since time.Duration) string {
		el := time.Since(p.start)
		if done > 0 {
			el = doneIn + since // the engine's clock at the last window, and on
		}
		line := fmt.Sprintf("bench quality: window %d/%d · %s", i, n, shortDuration(el))
		if done > 0 {
			left := time.Duration(float64(doneIn)/float64(done)*float64(n-done)) - since
			line += " · about " + shortDuration(max(left, 0)) + " left"
		}
		return line
	})
}

// next is called around each window's line: the status stops before the
// line is printed (the caller defers next) and restarts after it.
func (p *windowProgress) next(done, n int, elapsed time.Duration) {
	if done < n {
		p.show(done+1, n, done, elapsed)
	}
}

// clear removes the status line before the window's line is printed.
func (p *windowProgress) clear() { p.stop() }

func (p *windowProgress) stop() {
	if p.st != nil {
		p.st.Stop()
		p.st = nil
	}
}

// needleProgress tells what `bench needle` is doing: each probe prefills
// a haystack of up to the model's context and decodes an answer, minutes
// per probe at long lengths on a CPU (issue 15 item 12). It counts the
// probes in the per-result lines, and on a terminal redraws a line for
// the probe running, with the time left estimated from the tokens done.
type needleProgress struct {
	w      io.Writer
	tty    bool
	probes []int // haystack length of each probe, in EvalNeedle's order
	n      int   // probes started
	left   float64
	doneW  float64
	doneT  time.Duration
	start  time.Time
	st     *statusLine
}

// newNeedleProgress plans lengths × depths × kinds probes (EvalNeedle's
// loop order) and says so on w.
func newNeedleProgress(w io.Writer, lengths []int, depths, kinds int) *needleProgress {
	p := &needleProgress{w: w, tty: isTerminalWriter(w)}
	for _, n := range lengths {
		for range depths * kinds {
			p.probes = append(p.probes, n)
			p.left += float64(n)
		}
	}
	fmt.Fprintf(w, "bench needle: %d probes (%d lengths × %d depths × %d KV dtypes)\n", len(p.probes), len(lengths), depths, kinds)
	return p
}

// begin starts the next probe's status line.
func (p *needleProgress) begin() {
	if p.n >= len(p.probes) {
		return
	}
	length := p.probes[p.n]
	p.n++
	p.left -= float64(length)
	p.start = time.Now()
	if !p.tty {
		return
	}
	what := fmt.Sprintf("bench needle: probe %d/%d, %d-token haystack", p.n, len(p.probes), length)
	p.st = startStatus(p.w, func(d time.Duration) string {
		line := what + " · " + shortDuration(d)
		if p.doneW > 0 {
			rate := p.doneT.Seconds() / p.doneW
			eta := time.Duration((p.left+float64(length))*rate*float64(time.Second)) - d
			line += " · about " + shortDuration(max(eta, 0)) + " left"
		}
		return line
	})
}

// end finishes the running probe (before its result line is printed) and
// returns "[i/n] " for that line.
func (p *needleProgress) end() string {
	p.stop()
	if p.n == 0 {
		return ""
	}
	p.doneW += float64(p.probes[p.n-1])
	p.doneT += time.Since(p.start)
	return fmt.Sprintf("[%d/%d] ", p.n, len(p.probes))
}

func (p *needleProgress) stop() {
	if p.st != nil {
		p.st.Stop()
		p.st = nil
	}
}

// tokenProgress is `calibrate`'s progress over its text, window by
// window: a line per window elsewhere, on a terminal one redrawn line
// with the time left from the tokens done.
type tokenProgress struct {
	w     io.Writer
	what  string
	start time.Time
	st    *statusLine

	mu          sync.Mutex
	done, total int
}

func newTokenProgress(w io.Writer, what string, total int) *tokenProgress {
	p := &tokenProgress{w: w, what: what, start: time.Now(), total: total}
	if isTerminalWriter(w) {
		p.st = startStatus(w, p.line)
	}
	return p
}

func (p *tokenProgress) line(elapsed time.Duration) string {
	p.mu.Lock()
	done, total := p.done, p.total
	p.mu.Unlock()
	s := fmt.Sprintf("%s: %d/%d tokens · %s", p.what, done, total, shortDuration(elapsed))
	if done > 0 && done < total {
		left := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
		s += " · about " + shortDuration(left) + " left"
	}
	return s
}

func (p *tokenProgress) update(done, total int) {
	p.mu.Lock()
	p.done, p.total = done, total
	p.mu.Unlock()
	if p.st == nil {
		fmt.Fprintf(p.w, "%s: %d/%d tokens\n", p.what, done, total)
	}
}

func (p *tokenProgress) stop() {
	if p.st != nil {
		p.st.Stop()
		p.st = nil
	}
}
