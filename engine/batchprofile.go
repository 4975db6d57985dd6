package engine

import (
	"fmt"
	"io"
	"os"
	"time"
)

// stepProfile is the batcher's FTCHAT_BATCH_PROFILE=1 report: every few
// seconds of steps it writes to stderr how many rows the steps sampled
// and where their host time went (StepTimes), averaged per step. With the
// profile on, each step also waits for the device after the forward
// (StepTimes.Wait), so that a step bound by the device (Wait large) tells
// from one bound by the host (Forward, Sample or Other large).
type stepProfile struct {
	every time.Duration
	out   io.Writer // nil: os.Stderr

	since                  time.Time
	steps, decode, rows    int64
	together               int64
	fwd, wait, samp, other time.Duration
}

// add counts one step (under the batcher's mu) and reports when due.
func (p *stepProfile) add(decode, together int, tm StepTimes) {
	now := time.Now()
	if p.since.IsZero() {
		p.since = now
	}
	p.steps++
	if decode > 0 {
		p.decode++
	}
	p.rows += int64(decode)
	p.together += int64(together)
	p.fwd += tm.Forward
	p.wait += tm.Wait
	p.samp += tm.Sample
	p.other += tm.Other
	if now.Sub(p.since) < p.every {
		return
	}
	out := p.out
	if out == nil {
		out = os.Stderr
	}
	fmt.Fprintln(out, p.line())
	*p = stepProfile{every: p.every, out: p.out, since: now}
}

func (p *stepProfile) line() string {
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(p.steps) }
	perDecode := 0.0
	if p.decode > 0 {
		perDecode = float64(p.rows) / float64(p.decode)
	}
	return fmt.Sprintf("ftchat: batch profile: %d steps (%d sampling), %.1f rows sampled per sampling step (%d of %d in one call per step); per step µs: forward %.0f, device wait %.0f, sample %.0f, other %.0f",
		p.steps, p.decode, perDecode, p.together, p.rows, us(p.fwd), us(p.wait), us(p.samp), us(p.other))
}
