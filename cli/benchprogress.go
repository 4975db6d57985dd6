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
