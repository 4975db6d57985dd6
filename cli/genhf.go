package cli

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/hfmodel/hfsynth"
)

// genHFCmd is `ftchat dev gen-hf`: a random-weight Hugging Face checkpoint
// directory of a preset's shape (engine/hfmodel/hfsynth), for loading and
// capacity planning of full-size checkpoints on machines without them.
func genHFCmd() *cobra.Command {
	var preset, quant, out string
	var seed uint64
	var layers int
	cmd := &cobra.Command{
		Use:   "gen-hf --preset P [--quant Q] [--seed S] [--layers N] -o DIR",
		Short: "Write a random-weight Hugging Face checkpoint directory of a real model shape",
		Long: "Presets (Qwen3.5/3.6 MoE hybrids): " + strings.Join(hfPresets(), ", ") +
			"\nQuantizations: " + strings.Join(hfsynth.Quants(), ", ") +
			" (nvfp4-mixed: ModelOpt MIXED_PRECISION, NVFP4 experts and per-tensor FP8 attention/GDN projections)",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("-o DIR is required")
			}
			spec, err := synth.Preset(preset, gguf.BF16)
			if err != nil {
				return err
			}
			if layers < 0 {
				return fmt.Errorf("--layers %d: want a positive layer count (0 keeps the preset's %d)", layers, spec.Layers)
			}
			if layers > 0 {
				// The first N layers of the preset's pattern: a smaller
				// directory of the same per-layer shape, for load tests.
				spec.Layers = layers
			}
			size, err := hfsynth.Size(spec, quant)
			if err != nil {
				return err
			}
			start := time.Now()
			bar := newProgressPrinter(cmd.ErrOrStderr())
			var mu sync.Mutex // shards report from their own goroutines
			err = hfsynth.Write(out, spec, quant, seed, func(done, total int64) {
				mu.Lock()
				defer mu.Unlock()
				bar.update("writing "+out, done, total)
			})
			bar.done()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s %s, %.2f GB of tensors in %.1fs\n",
				out, preset, quant, float64(size)/1e9, time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&preset, "preset", "", "model shape: "+strings.Join(hfPresets(), ", "))
	cmd.Flags().StringVar(&quant, "quant", hfsynth.NVFP4Mixed, "quantization: "+strings.Join(hfsynth.Quants(), ", "))
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed")
	cmd.Flags().IntVar(&layers, "layers", 0, "write only the first N layers (0: the preset's count)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "output directory (must not exist or be empty)")
	return cmd
}

// hfPresets are synth's presets that hfsynth writes.
func hfPresets() []string {
	var names []string
	for _, n := range synth.Presets() {
		if s, err := synth.Preset(n, gguf.BF16); err == nil && s.Arch == "qwen35moe" {
			names = append(names, n)
		}
	}
	return names
}
