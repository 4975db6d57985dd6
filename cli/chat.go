package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/ui"
)

// pipedIdle is how long a piped stdin may stay silent before ftchat stops
// waiting for it when a prompt was given on the command line.
const pipedIdle = 2 * time.Second

// Chat is the root command: the interactive chat, or with -p (or when
// stdout is not a terminal) one answer printed plainly.
func Chat(ctx context.Context, cfg Config, prompt string) error {
	if err := cfg.Err(); err != nil {
		return err
	}
	if cfg.Agent {
		return runAgent(ctx, cfg, prompt)
	}
	piped := ""
	if !isTerminal(os.Stdin) {
		var err error
		piped, err = ui.ReadPiped(os.Stdin, prompt != "", pipedIdle, 0)
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	}
	piped, pipedFrom, err := attachFiles(piped, cfg.Files)
	if err != nil {
		return err
	}
	printMode := cfg.Print || !isTerminal(os.Stdout)
	eng, err := openEngine(ctx, cfg, printMode) // in-process, or the --engine server
	if err != nil {
		return err
	}
	defer eng.Close()
	modelInfo := eng.info
	if printMode && cfg.Verbose {
		fmt.Fprintf(os.Stderr, "ftchat: %s · temperature %g · %s\n", modelInfo, cfg.Sampling.Temperature, seedNote(cfg))
	}
	if cfg.Sampling.Temperature > 0 { // greedy answers do not depend on it
		modelInfo += " · " + seedNote(cfg)
	}
	uc := ui.Config{
		Engine: eng.eng, Session: eng.sess,
		ModelInfo:     modelInfo,
		Piped:         piped,
		PipedFrom:     pipedFrom,
		InitialPrompt: prompt,
		System:        cfg.System,
		Continue:      cfg.Continue,
		Sampling:      cfg.Sampling,
		MaxTokens:     cfg.MaxTokens,
	}
	if printMode {
		if cfg.Verbose {
			uc.Thinking = os.Stderr // the answer alone stays on stdout
		}
		return engine.ForPrintMode(ui.PrintMode(ctx, uc))
	}
	models, closeModels := chatModels(cfg, uc.Engine, uc.Session) // /model switches; frees the model in use
	defer closeModels()
	uc.Models = models
	return ui.Run(ctx, uc)
}

// seedNote names the sampling seed so an answer can be reproduced.
func seedNote(cfg Config) string {
	if cfg.SeedDrawn {
		return fmt.Sprintf("seed %d (random; --seed %d repeats it)", cfg.Sampling.Seed, cfg.Sampling.Seed)
	}
	return fmt.Sprintf("seed %d", cfg.Sampling.Seed)
}

// loadEngine loads the model with a progress line on stderr (quiet in print
// mode unless stderr is a terminal).
func loadEngine(ctx context.Context, cfg Config, quiet bool) (*engine.Engine, error) {
	bar := newProgressPrinter(os.Stderr)
	show := !quiet || isTerminal(os.Stderr)
	eng, err := engine.Load(ctx, cfg.Engine, func(p engine.LoadProgress) {
		if show && p.Total > 0 {
			bar.update(p.Stage, p.Done, p.Total)
		}
	})
	bar.done()
	if err == nil {
		if w := gpuMemoryIgnored(cfg, eng.Info().Device); w != "" {
			fmt.Fprintln(os.Stderr, w)
		}
		for _, n := range eng.Info().Notes { // e.g. the expert placement
			fmt.Fprintln(os.Stderr, n)
		}
	}
	return eng, err
}

// gpuMemoryIgnored is the warning for a --gpu-memory the run cannot use:
// on the CPU the pool is sized by --kv-tokens, and saying nothing would
// leave the user believing the budget applies.
func gpuMemoryIgnored(cfg Config, device string) string {
	if cfg.GPUMemoryText == "" || !strings.HasPrefix(device, "cpu") {
		return ""
	}
	return fmt.Sprintf("ftchat: warning: --gpu-memory %s is ignored on the CPU; size the KV pool with --kv-tokens N (tokens, bf16-equivalent)", cfg.GPUMemoryText)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
