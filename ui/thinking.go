package ui

import (
	"io"
	"strings"

	"github.com/ftchat/ftchat/engine"
)

// thinkingWriter streams PrintMode's thinking to Config.Thinking: each
// block starts with a "thinking: " line header and ends with a newline
// when the answer (or the stream) begins, so stderr reads as
// "thinking: ...\n" above the answer on stdout. A nil writer drops it.
type thinkingWriter struct {
	w      io.Writer
	open   bool // inside a block
	lastNL bool // the block's text so far ends with a newline
}

func (t *thinkingWriter) event(ev engine.Event) {
	if t.w == nil {
		return
	}
	if ev.Kind != engine.EventThinking {
		if ev.Kind == engine.EventText || ev.Kind == engine.EventToolCall || ev.Kind == engine.EventDone || ev.Kind == engine.EventError {
			t.end()
		}
		return
	}
	if ev.Text == "" {
		return
	}
	if !t.open {
		t.open = true
		io.WriteString(t.w, "thinking: ")
	}
	io.WriteString(t.w, ev.Text)
	t.lastNL = strings.HasSuffix(ev.Text, "\n")
}

func (t *thinkingWriter) end() {
	if t.w == nil || !t.open {
		return
	}
	if !t.lastNL {
		io.WriteString(t.w, "\n")
	}
	t.open, t.lastNL = false, false
}
