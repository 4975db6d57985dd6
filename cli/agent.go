package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/prompts"
	"github.com/ftchat/ftchat/ui"
)

// runAgent runs the coding agent in the current directory. With -p (or
// when stdout is not a terminal) it answers the prompt once and prints the
// transcript; without --yolo every write and command is then denied and
// listed at the end. On a terminal it is a line-based session that asks
// before each write or command, showing the diff.
func runAgent(ctx context.Context, cfg Config, prompt string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	return agentMain(ctx, cfg, prompt, agentIO{
		in: os.Stdin, inTTY: isTerminal(os.Stdin),
		out: os.Stdout, outTTY: isTerminal(os.Stdout), errOut: os.Stderr,
		dir: cwd, openTTY: terminalIn,
	})
}

// agentIO is the process's side of the agent: its streams, whether they
// are terminals, and the directory it works in (tests replace them).
type agentIO struct {
	in          io.Reader
	inTTY       bool
	out, errOut io.Writer
	outTTY      bool
	dir         string
	openTTY     func() (io.ReadCloser, error)
}

func agentMain(ctx context.Context, cfg Config, prompt string, pio agentIO) error {
	printMode := cfg.Print || !pio.outTTY
	if !pio.inTTY {
		piped, err := ui.ReadPiped(pio.in, prompt != "", pipedIdle, 0)
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		prompt = withPiped(prompt, piped)
	}
	if printMode && strings.TrimSpace(prompt) == "" {
		return errors.New("--agent -p: nothing to do: give the task as an argument or on stdin")
	}
	cwd := pio.dir
	ws, err := agent.OpenWorkspace(cwd)
	if err != nil {
		return err
	}
	defer ws.Close()
	tools, err := agent.NewTools(ws, agent.DefaultLimits)
	if err != nil {
		return err
	}
	eng, err := loadEngine(ctx, cfg, printMode)
	if err != nil {
		return err
	}
	defer eng.Close()
	system := cfg.System
	if system == "" {
		if system, err = prompts.Agent(prompts.Gather(ctx, ws.Root(), time.Now())); err != nil {
			return err
		}
	}
	sess := eng.NewSession()
	defer sess.Close()

	var approver agent.Approver = agent.DenyAll{}
	var tty *bufio.Reader
	if !printMode {
		in, err := pio.openTTY()
		if err != nil {
			return err
		}
		defer in.Close()
		tty = bufio.NewReader(in)
		approver = &agent.LineApprover{In: tty, Out: pio.out}
	}
	if cfg.Yolo {
		approver = agent.AllowAll{}
	}
	sink := &agent.TextSink{W: pio.out}
	a, err := agent.New(agent.Config{
		Gen: sess, Fit: eng, Tools: tools, Approver: approver, Sink: sink,
		System: system, MaxTokens: cfg.MaxTokens, Sampling: cfg.Sampling,
	})
	if err != nil {
		return err
	}
	info := eng.Info()
	approval := "writes and commands ask first"
	switch {
	case cfg.Yolo:
		approval = "--yolo: writes and commands run without asking"
	case printMode:
		approval = "non-interactive: writes and commands are denied (--yolo allows them)"
	}
	// The engine offers the tools in the template's own format, or inlines
	// them into the system prompt when the template has none.
	header := fmt.Sprintf("[agent] %s in %s · %d tools · %s", info.Name, ws.Root(), len(tools.Defs()), approval)
	if printMode {
		fmt.Fprintln(pio.errOut, header)
		res, err := a.Run(ctx, prompt)
		sink.Finish()
		if err != nil {
			return err
		}
		reportDenied(pio.out, res, printMode)
		if res.Stop == agent.StopStepLimit {
			return ExitError{Code: 2}
		}
		return sink.Err()
	}
	fmt.Fprintln(pio.out, header)
	fmt.Fprintln(pio.out, "[agent] type a task; an empty line or Ctrl+D ends the session")
	for {
		if strings.TrimSpace(prompt) != "" {
			res, err := a.Run(ctx, prompt)
			sink.Finish()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintln(pio.out, "[agent] error:", err)
			} else {
				reportDenied(pio.out, res, false)
			}
		}
		fmt.Fprint(pio.out, "\n> ")
		line, err := tty.ReadString('\n')
		if strings.TrimSpace(line) == "" && (err != nil || line == "\n") {
			fmt.Fprintln(pio.out)
			return nil
		}
		prompt = line
	}
}

// withPiped attaches piped text to the task as a delimited context block.
func withPiped(prompt, piped string) string {
	if piped == "" {
		return prompt
	}
	if strings.TrimSpace(prompt) == "" {
		return piped
	}
	fence := "```"
	for strings.Contains(piped, fence) {
		fence += "`"
	}
	return prompt + "\n\nContext (piped from stdin):\n" + fence + "\n" + strings.TrimRight(piped, "\n") + "\n" + fence
}

// terminalIn is where the interactive agent reads tasks and approvals: the
// terminal even when stdin carried piped context.
func terminalIn() (io.ReadCloser, error) {
	if isTerminal(os.Stdin) {
		return io.NopCloser(os.Stdin), nil
	}
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return nil, fmt.Errorf("--agent: stdin is a pipe and the terminal (/dev/tty) cannot be opened to ask for approvals: %w; use -p (writes and commands denied) or -p --yolo", err)
	}
	return tty, nil
}

func reportDenied(w io.Writer, res agent.Result, printMode bool) {
	if len(res.Denied) == 0 {
		return
	}
	fmt.Fprintf(w, "[agent] %d action(s) were denied:\n", len(res.Denied))
	for _, d := range res.Denied {
		fmt.Fprintf(w, "  - %s\n", d)
	}
	if printMode {
		fmt.Fprintln(w, "[agent] non-interactive mode denies writes and commands; run with --yolo to allow them, or without -p to approve each one")
	}
}

var _ agent.Generator = (*engine.Session)(nil)
var _ agent.Fitter = (*engine.Engine)(nil)
