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
	piped, pipedFrom, err := attachFiles(piped, cfg.Files)
	if err != nil {
		return err
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
	eng, err := openEngine(ctx, cfg, printMode) // in-process, or the --engine server
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
	sess := eng.sess
	approval := "writes and commands ask first"
	switch {
	case cfg.Yolo:
		approval = "--yolo: writes and commands run without asking"
	case printMode:
		approval = "non-interactive: writes and commands are denied (--yolo allows them)"
	}
	// The engine offers the tools in the template's own format, or inlines
	// them into the system prompt when the template has none.
	header := fmt.Sprintf("[agent] %s in %s · %d tools · %s", eng.name, ws.Root(), len(tools.Defs()), approval)
	newAgent := func(sink agent.Sink, approver agent.Approver) (*agent.Agent, error) {
		ac := agentConfig(cfg)
		ac.Gen, ac.Fit, ac.Tools, ac.Approver, ac.Sink, ac.System = sess, eng.eng, tools, approver, sink, system
		return agent.New(ac)
	}
	if !printMode {
		return pio.runTUI(ctx, ui.Config{
			Engine: eng.eng, Session: sess,
			ModelInfo:     eng.info,
			Piped:         piped,
			PipedFrom:     pipedFrom,
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
		// As plain -p: no slash commands to suggest, flags instead.
		return engine.ForPrintMode(err)
	}
	reportDenied(pio.out, res, printMode)
	if err := sink.Err(); err != nil {
		return err
	}
	return agentExit(res)
}

// noToolHint is noted once when the model answers its first task without
// a tool call: the default model never calls one (docs/agent.md).
const noToolHint = "the model answered without calling a tool; small models like SmolLM2-135M rarely can. " +
	"Try a model that calls tools: ftchat pull bartowski/Qwen_Qwen3-0.6B-GGUF Qwen_Qwen3-0.6B-Q4_K_M.gguf, then --model Qwen_Qwen3-0.6B-Q4_K_M.gguf"

// agentConfig holds the settings' part of the agent's configuration: the
// caps on model turns and answer tokens, on by default, named in the note
// when one stops a run, and the hint for a model that calls no tool.
func agentConfig(cfg Config) agent.Config {
	ac := agent.Config{
		MaxSteps: cfg.AgentMaxSteps, MaxStepsFlag: "--agent-max-steps",
		MaxTokens: cfg.MaxTokens, MaxTokensFlag: "--max-tokens",
		Sampling: cfg.Sampling, NoToolHint: noToolHint,
	}
	if cfg.Remote.URL != "" {
		ac.NoToolHint = remoteNoToolHint
	}
	if cfg.MaxTokens == 0 {
		ac.MaxTokensFlag = "the agent's default when --max-tokens is 0; --max-tokens N raises it"
	}
	return ac
}

// agentExit is -p's exit status: a run a cap (or the KV pool) cut short
// fails, so scripts do not take a truncated answer for a finished task.
func agentExit(res agent.Result) error {
	switch res.Stop {
	case agent.StopStepLimit, agent.StopLength, agent.StopPoolFull:
		return ExitError{Code: 2}
	}
	return nil
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
