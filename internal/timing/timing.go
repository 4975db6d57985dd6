// Package timing prints where start-up time goes when FTCHAT_TIMING=1:
// one line per phase on stderr, milliseconds since the process began and
// since the previous mark. Time to first token is what a `ftchat -p` user
// feels, and the phases (device probe, context, weights, first prefill)
// each have a different fix, so they are measured apart.
package timing

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

var (
	mu    sync.Mutex
	start = time.Now() // package init: close enough to process start
	last  = start
	out   io.Writer // nil: off
)

func init() {
	if os.Getenv("FTCHAT_TIMING") == "1" {
		out = os.Stderr
	}
}

// Mark records that phase has just finished.
func Mark(phase string) {
	mu.Lock()
	defer mu.Unlock()
	if out == nil {
		return
	}
	now := time.Now()
	fmt.Fprintf(out, "ftchat: timing: %-30s %9.1f ms (+%.1f)\n", phase, ms(now.Sub(start)), ms(now.Sub(last)))
	last = now
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
