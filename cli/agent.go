package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/agent/tui"
	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/prompts"
	"github.com/ftchat/ftchat/ui"
)

// runAgent runs the coding agent in the current directory. With -p (or
// when stdout is not a terminal) it answers the prompt once and prints the
// transcript; without --yolo every write and command is then denied and
// listed at the end. On a terminal it runs in the TUI (ui.Run in agent
// mode), which asks before each write or command in a dialog with the diff.
func runAgent(ctx context.Context, cfg Config, prompt string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	return agentMain(ctx, cfg, prompt, agentIO{
		in: os.Stdin, inTTY: isTerminal(os.Stdin),
		out: os.Stdout, outTTY: isTerminal(os.Stdout), errOut: os.Stderr,
		dir: cwd, runTUI: ui.Run,
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
	runTUI      func(context.Context, ui.Config) error
}

func agentMain(ctx context.Context, cfg Config, prompt string, pio agentIO) error {
	printMode := cfg.Print || !pio.outTTY
	piped := ""
	if !pio.inTTY {
		var err error
		if piped, err = ui.ReadPiped(pio.in, prompt != "", pipedIdle, 0); err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	}
	if printMode {
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
	tools.AllowShellEnv(cfg.ShellEnv...)
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
	newAgent := func(sink agent.Sink, approver agent.Approver) (*agent.Agent, error) {
		return agent.New(agent.Config{
			Gen: sess, Fit: eng, Tools: tools, Approver: approver, Sink: sink,
			System: system, MaxTokens: cfg.MaxTokens, Sampling: cfg.Sampling,
		})
	}
	if !printMode {
		return pio.runTUI(ctx, ui.Config{
			Engine: eng, Session: sess,
			ModelInfo:     fmt.Sprintf("%s (%s) · %s · context %d tokens · template: %s · %s · device: %s", info.Name, info.Arch, info.Params, info.ContextLen, info.Template, info.Path, info.Device),
			Piped:         piped,
			InitialPrompt: prompt,
			Sampling:      cfg.Sampling,
			MaxTokens:     cfg.MaxTokens,
			Continue:      cfg.Continue,
			AgentInfo:     header,
			Agent: func(send func(tea.Msg)) (ui.AgentRunner, error) {
				a, err := newAgent(tui.Sink{Send: send}, tuiApprover(cfg.Yolo, send))
				if err != nil {
					return nil, err
				}
				return a, nil
			},
		})
	}

	approver := agent.Approver(agent.DenyAll{})
	if cfg.Yolo {
		approver = agent.AllowAll{}
	}
	sink := &agent.TextSink{W: pio.out}
	a, err := newAgent(sink, approver)
	if err != nil {
		return err
	}
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

// tuiApprover is the interactive agent's approver: the TUI's dialog, or
// everything allowed with --yolo.
func tuiApprover(yolo bool, send func(tea.Msg)) agent.Approver {
	if yolo {
		return agent.AllowAll{}
	}
	return tui.Approver{Send: send}
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
