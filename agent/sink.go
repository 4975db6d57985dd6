package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/ftchat/ftchat/engine"
)

// Sink receives what the agent does, as it happens: the UI shows it, print
// mode writes it as a plain transcript.
type Sink interface {
	Text(delta string)     // answer text, streamed
	Thinking(delta string) // reasoning inside <think>, streamed
	ToolCall(c engine.ToolCall, summary string)
	ToolResult(c engine.ToolCall, output string, err error)
	Note(msg string) // denials, dropped context, step limit, malformed calls
}

// ProgressSink is an optional Sink extension: prefill progress of each
// generation step (tokens done of total), e.g. for a progress bar.
type ProgressSink interface {
	Progress(done, total int)
}

// TextSink writes a plain-text transcript: answer text as it streams, each
// tool call on its own line with a summary of its result, notes marked
// with "[agent]". Thinking is left out unless ShowThinking is set.
type TextSink struct {
	W            io.Writer
	ShowThinking bool
	// ResultLines is how many lines of each tool result are shown (0: 3).
	ResultLines int

	mu     sync.Mutex
	atBOL  bool // the last byte written was a newline (or nothing yet)
	wrote  bool
	failed error
}

func (s *TextSink) write(str string) {
	if str == "" || s.failed != nil {
		return
	}
	if _, err := io.WriteString(s.W, str); err != nil {
		s.failed = err
	}
	s.wrote = true
	s.atBOL = strings.HasSuffix(str, "\n")
}

// line starts str on a fresh line.
func (s *TextSink) line(str string) {
	if s.wrote && !s.atBOL {
		s.write("\n")
	}
	s.write(str)
}

func (s *TextSink) Text(d string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(d)
}

func (s *TextSink) Thinking(d string) {
	if !s.ShowThinking {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(d)
}

func (s *TextSink) ToolCall(c engine.ToolCall, summary string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	args, _ := json.Marshal(c.Arguments)
	s.line(fmt.Sprintf("→ %s %s\n", c.Name, clip(string(args), 300)))
}

func (s *TextSink) ToolResult(c engine.ToolCall, out string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.line(fmt.Sprintf("  ✗ %s: %v\n", c.Name, err))
		return
	}
	n := s.ResultLines
	if n <= 0 {
		n = 3
	}
	lines := splitLines(out)
	for i, l := range lines {
		if i == n {
			s.line(fmt.Sprintf("  │ ... (%d lines, %d bytes in all)\n", len(lines), len(out)))
			break
		}
		s.line("  │ " + strings.TrimRight(clip(l, 200), "\n") + "\n")
	}
}

func (s *TextSink) Note(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.line("[agent] " + msg + "\n")
}

// Err is the first write error, if any.
func (s *TextSink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Finish ends the transcript on a new line.
func (s *TextSink) Finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wrote && !s.atBOL {
		s.write("\n")
	}
}
