package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/timing"
)

// Config is everything Run and PrintMode need. Engine and Session are
// required; the rest is optional.
type Config struct {
	Engine  Engine  // *engine.Engine
	Session Session // from Engine.NewSession()

	// ModelInfo is extra text for /model (e.g. architecture, context length).
	ModelInfo string
	// Models lists and loads the models /model switches to (CacheModels);
	// nil: /model only describes the model.
	Models ModelSource
	// Piped is text read from a non-terminal stdin (see ReadPiped); it is
	// attached to the first user message as a delimited context block.
	Piped string
	// PipedFrom names where Piped came from, for the model and the chat:
	// "" or "stdin" for piped input, else e.g. "main.go" or
	// "stdin, a.go, b.go" (--file).
	PipedFrom string
	// InitialPrompt is sent at start (interactive) or is the whole
	// question (PrintMode).
	InitialPrompt string
	// System is the initial system prompt.
	System string
	// Continue resumes the most recently saved session.
	Continue bool
	// SessionDir holds saved sessions; "" means DefaultSessionDir().
	SessionDir string
	// NoSave disables saving after each turn.
	NoSave bool
	// ShowThinking starts with thinking blocks expanded.
	ShowThinking bool
	// Thinking, when set, receives the model's thinking in PrintMode
	// (ftchat -p --verbose gives stderr); nil drops it: Out gets only the
	// answer either way.
	Thinking io.Writer

	// Agent, when set, makes the UI the coding agent's front end: Enter
	// runs the agent (tool calls, approvals in a dialog) instead of a chat
	// turn, and sessions are not saved. See NewAgentFunc.
	Agent NewAgentFunc
	// AgentInfo is shown as the first line of an agent session.
	AgentInfo string

	Sampling  engine.Sampling
	MaxTokens int

	// Style is the glamour style: "dark" (default), "light", "notty", ...
	Style string

	// In and Out replace the terminal (tests). In nil: the terminal, opened
	// as /dev/tty when stdin is a pipe. Out nil: os.Stdout.
	In  io.Reader
	Out io.Writer
	// Err receives a conversation that could be saved nowhere at exit;
	// nil: os.Stderr.
	Err io.Writer
	// Width and Height fix the initial size (tests); 0: ask the terminal.
	Width, Height int
	// ColorProfile forces a color profile (tests); 0: detect.
	ColorProfile colorprofile.Profile
}

func (c Config) pipedFrom() string {
	if c.PipedFrom == "" {
		return "stdin"
	}
	return c.PipedFrom
}

func (c Config) glamourStyle() string {
	if c.Style != "" {
		return c.Style
	}
	return "dark"
}

func (c *Config) check() error {
	if c.Engine == nil || c.Session == nil {
		return errors.New("ui: Config.Engine and Config.Session are required")
	}
	if c.SessionDir == "" {
		d, err := DefaultSessionDir()
		if err != nil {
			return err
		}
		c.SessionDir = d
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Err == nil {
		c.Err = os.Stderr
	}
	return nil
}

// Run runs the interactive chat until the user quits or ctx is cancelled.
// On exit it saves the conversation and prints how to resume it.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	m := newModel(ctx, cfg)
	// The renderer wakes up at its frame rate even when idle; 30 frames/s
	// matches the streaming batch rate and halves the idle wake-ups.
	opts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithOutput(cfg.Out), tea.WithFPS(30)}
	if cfg.In != nil {
		opts = append(opts, tea.WithInput(cfg.In))
	} else if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
		// stdin carried the piped context: read keys from the terminal.
		tty, err := os.Open("/dev/tty")
		if err != nil {
			return fmt.Errorf("stdin is a pipe and the terminal (/dev/tty) cannot be opened for keys: %w; use -p for a non-interactive answer", err)
		}
		defer tty.Close()
		opts = append(opts, tea.WithInput(tty))
	}
	if cfg.Width > 0 && cfg.Height > 0 {
		opts = append(opts, tea.WithWindowSize(cfg.Width, cfg.Height))
	}
	if cfg.ColorProfile != 0 {
		opts = append(opts, tea.WithColorProfile(cfg.ColorProfile))
	}
	p := tea.NewProgram(m, opts...)
	if cfg.Agent != nil {
		if err := m.startAgent(p.Send); err != nil {
			return err
		}
	}
	_, err := p.Run()
	if g := m.gen; g != nil && g.entry != nil { // cut short: keep what was shown
		m.flushStream()
		g.entry.streaming, g.entry.valid = false, false
		if g.entry.note == "" {
			g.entry.note = "stopped"
		}
	}
	m.abandon() // the context ended the program, or it was killed
	m.waitAgent(5 * time.Second)
	m.printTranscript(cfg.Out, cfg.ColorProfile)
	if len(m.msgs) > 0 && !m.cfg.NoSave {
		m.saveOnExit(cfg.Out, cfg.Err)
	}
	if err != nil && !errors.Is(err, tea.ErrInterrupted) && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// saveOnExit saves the conversation unless it is known to be on disk
// already, and says where it is. "saved" is printed only when the session
// file was written; otherwise the conversation goes to a fallback file, or
// as a last resort to errOut, so that it is never lost silently.
func (m *model) saveOnExit(out, errOut io.Writer) {
	var err error
	f, seq := m.sessionFile(), uint64(0)
	if m.needsSave() {
		f, seq = m.snapshot()
		err = m.store.Save(f, seq)
	}
	if err == nil {
		resume := "ftchat --continue"
		if m.ag != nil {
			resume = "ftchat --agent --continue"
		}
		fmt.Fprintf(out, "session %q saved · resume with: %s\n", m.sessName, resume)
		return
	}
	fmt.Fprintf(out, "session %q was NOT saved: %v\n", m.sessName, err)
	f.Version = sessionVersion
	data, merr := json.MarshalIndent(f, "", "  ")
	if merr != nil { // cannot happen for strings; say so rather than lose it silently
		fmt.Fprintf(out, "the conversation could not be encoded either: %v\n", merr)
		return
	}
	data = append(data, '\n')
	p, ferr := writeFallback(m.sessName, data)
	if ferr == nil {
		fmt.Fprintf(out, "the conversation was written to %s; to resume it, fix the problem above and move that file to %s\n", p, m.store.path(m.sessName))
		return
	}
	fmt.Fprintf(out, "no fallback copy could be written either (%v); the session file follows on stderr: save it as %s to resume it\n", ferr, m.store.path(m.sessName))
	errOut.Write(data)
}

// PrintMode answers InitialPrompt (with Piped context) without a UI: it
// writes only the answer text to Out and returns when it is complete.
// Use it for -p or when stdout is not a terminal.
func PrintMode(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	prompt := strings.TrimSpace(cfg.InitialPrompt)
	piped := cfg.Piped
	if prompt == "" && piped != "" {
		prompt, piped = strings.TrimSpace(piped), ""
	}
	if prompt == "" {
		return errors.New("nothing to answer: give a prompt as an argument or on stdin")
	}
	var msgs []engine.Message
	if cfg.Continue {
		st := &Store{Dir: cfg.SessionDir}
		name, err := st.Latest()
		if err != nil {
			return err
		}
		if name != "" {
			f, err := st.Load(name)
			if err != nil {
				return fmt.Errorf("--continue: %w", err)
			}
			msgs = f.Messages
		}
	}
	if cfg.System != "" && (len(msgs) == 0 || msgs[0].Role != "system") {
		msgs = append([]engine.Message{{Role: "system", Content: cfg.System}}, msgs...)
	}
	content := prompt
	if piped != "" {
		content = attachContext(prompt, piped, cfg.PipedFrom)
	}
	msgs = append(msgs, engine.Message{Role: "user", Content: content})
	req := engine.Request{Messages: msgs, MaxTokens: cfg.MaxTokens, Sampling: cfg.Sampling}
	if err := cfg.Engine.FitCheck(req); err != nil {
		if piped != "" {
			return fmt.Errorf("the piped input (%s tokens) does not fit the KV pool: %w", formatInt(int64(cfg.Engine.CountTokens(piped))), err)
		}
		return err
	}
	var (
		werr    error
		endedNL = true
		cut     error // the pool filled up mid-answer
	)
	think := thinkingWriter{w: cfg.Thinking}
	defer think.end()
	first := true
	for ev := range cfg.Session.Generate(ctx, req) {
		think.event(ev)
		if first && ev.Kind == engine.EventText {
			timing.Mark("first token (prefill done)")
			first = false
		}
		switch ev.Kind {
		case engine.EventText:
			if werr == nil && ev.Text != "" {
				_, werr = io.WriteString(cfg.Out, ev.Text)
				endedNL = strings.HasSuffix(ev.Text, "\n")
			}
		case engine.EventError:
			return ev.Err
		case engine.EventDone:
			if ev.Stop == engine.StopPoolFull {
				// A cut answer is a failure for scripts: exit non-zero.
				fp8 := ", use --kv-cache-dtype fp8_e4m3 for about twice the tokens"
				if strings.HasPrefix(ev.Stats.KVDType, "fp8") {
					fp8 = ""
				}
				cut = fmt.Errorf("the answer above is cut short: the KV pool is full (%s / %s tokens); give it more memory (--kv-tokens on the CPU, --gpu-memory on a GPU)%s, or shorten the prompt",
					formatInt(int64(ev.Stats.TokensUsed)), formatInt(int64(ev.Stats.TokensCapacity)), fp8)
			}
		}
	}
	timing.Mark("answer done")
	if werr != nil {
		return werr
	}
	if !endedNL {
		io.WriteString(cfg.Out, "\n")
	}
	if cut != nil {
		return cut
	}
	return ctx.Err()
}

// ReadPiped reads a non-terminal stdin for Config.Piped. When a prompt
// was given on the command line, a stdin that stays open without sending
// anything for idle (e.g. a pipe from a process that never exits) does not
// block: what arrived so far is returned. Without a prompt it reads to EOF.
// limit bounds the bytes read (0: 64 MiB).
func ReadPiped(r io.Reader, promptGiven bool, idle time.Duration, limit int64) (string, error) {
	if limit <= 0 {
		limit = 64 << 20
	}
	type chunk struct {
		b   []byte
		err error
	}
	ch := make(chan chunk, 16)
	go func() {
		lr := io.LimitReader(r, limit+1)
		for {
			buf := make([]byte, 64<<10)
			n, err := lr.Read(buf)
			if n > 0 {
				ch <- chunk{b: buf[:n]}
			}
			if err != nil {
				ch <- chunk{err: err}
				close(ch)
				return
			}
		}
	}()
	var out bytes.Buffer
	var timer <-chan time.Time
	for {
		if promptGiven {
			timer = time.After(idle)
		}
		select {
		case c := <-ch:
			if c.err != nil {
				if !errors.Is(c.err, io.EOF) {
					return "", fmt.Errorf("reading stdin: %w", c.err)
				}
				if int64(out.Len()) > limit {
					return "", fmt.Errorf("stdin is larger than %s; pipe less text", formatBytes(limit))
				}
				return out.String(), nil
			}
			out.Write(c.b)
			if int64(out.Len()) > limit {
				return "", fmt.Errorf("stdin is larger than %s; pipe less text", formatBytes(limit))
			}
		case <-timer:
			return out.String(), nil
		}
	}
}
