package cli

import (
	"fmt"
	"io"
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

func newSpeedProgress(w io.Writer, kinds []string, depths []int, prefillN, decode int) *speedProgress {
	p := &speedProgress{w: w, tty: isTerminalWriter(w), total: len(kinds) * len(depths), prefillN: prefillN, decode: decode}
	for range kinds {
		for _, d := range depths {
			p.left += p.weight(d)
		}
	}
	return p
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
