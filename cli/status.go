package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// statusLine redraws one line on a terminal's stderr while a long step
// runs (tokenizing a big input, a bench measurement), so the command is
// not silent for minutes. On anything but a terminal it draws nothing:
// callers that run long print their own lines there.
type statusLine struct {
	w     io.Writer
	tty   bool
	start time.Time
	text  func(elapsed time.Duration) string

	mu   sync.Mutex
	stop chan struct{}
	wg   sync.WaitGroup
}

// statusInterval is how often the line is redrawn.
const statusInterval = 500 * time.Millisecond

// startStatus draws text(elapsed) on w now and every statusInterval
// until Stop, if w is a terminal.
func startStatus(w io.Writer, text func(elapsed time.Duration) string) *statusLine {
	s := &statusLine{w: w, tty: isTerminalWriter(w), start: time.Now(), text: text, stop: make(chan struct{})}
	if !s.tty {
		return s
	}
	s.draw()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(statusInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.draw()
			}
		}
	}()
	return s
}

func (s *statusLine) draw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "\r\x1b[K%s", s.text(time.Since(s.start)))
}

// Stop ends the redraws and clears the line.
func (s *statusLine) Stop() {
	if !s.tty {
		return
	}
	select {
	case <-s.stop:
		return // stopped already
	default:
	}
	close(s.stop)
	s.wg.Wait()
	fmt.Fprint(s.w, "\r\x1b[K")
}

// isTerminalWriter reports whether w is a terminal; tests replace it.
var isTerminalWriter = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// shortDuration writes d as 4s, 1m05s or 1h02m.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}
