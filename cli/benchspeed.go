package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/engine"
)

// warmupDecode is the decode steps of bench speed's warm-up pass: enough
// to record and replay a step's CUDA graphs once.
const warmupDecode = 4

// benchSpeedCmd measures end-to-end prefill and decode speed at several
// context depths, for the dtypes given (the same loaded model).
func benchSpeedCmd(v *viper.Viper) *cobra.Command {
	var depths, dtypes, cpuProfile string
	var prefillN, decodeN int
	var asJSON, warmup bool
	cmd := &cobra.Command{
		Use:   "speed [--depths 0,4096,32768] [--dtypes bf16,fp8_e4m3]",
		Short: "Prefill and decode tokens/s at several context depths (random tokens)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ds, err := parseInts(depths)
			if err != nil {
				return fmt.Errorf("--depths: %w", err)
			}
			cfg := ConfigFrom(v)
			if err := cfg.Err(); err != nil {
				return err
			}
			kinds := strings.Split(dtypes, ",")
			cfg.Engine.KVDType = kinds[0]
			// The measured prefill runs as one batch: plan the GPU
			// workspace for it (the depth fill runs in chunks of this size too).
			cfg.Engine.PrefillChunk = max(cfg.Engine.PrefillChunk, engine.DefaultPrefillChunk, prefillN)
			var prof *os.File
			if cpuProfile != "" {
				// Created before the load, so a bad path is told at once.
				if prof, err = os.Create(cpuProfile); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer prof.Close()
			}
			loadStart := time.Now()
			eng, err := loadEngine(cmd.Context(), cfg, true)
			if err != nil {
				return err
			}
			defer eng.Close()
			// Not part of any rate: said once so load time, and what the
			// device line says of cuBLAS, are on record beside them.
			fmt.Fprintf(cmd.ErrOrStderr(), "model loaded in %.1f s on %s\n", time.Since(loadStart).Seconds(), eng.Info().Device)
			if prof != nil {
				// After the load: the profile is of the measured work
				// (warm-up included), for reading where a step's host
				// time goes (go tool pprof).
				if err := pprof.StartCPUProfile(prof); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			var results []engine.SpeedResult
			w := cmd.OutOrStdout()
			if !asJSON {
				// graph t/s: the last decode step's CUDA graphs replayed
				// back to back (GPU only), where the backend records steps.
				fmt.Fprintf(w, "%-10s %8s %12s %12s %12s %12s %s\n", "kv", "depth", "prefill t/s", "decode t/s", "fill t/s", "graph t/s", "device")
			}
			prog := newSpeedProgress(cmd.ErrOrStderr(), kinds, ds, prefillN, decodeN, warmup)
			defer prog.stop()
			for i, dt := range kinds {
				if i > 0 {
					if err := eng.Reconfigure(cmd.Context(), dt, nil); err != nil {
						return err
					}
				}
				if warmup {
					// Untimed, as llama-bench's warm-up run: the first row
					// of a dtype then carries no kernel compilation (PTX
					// JIT), library start-up or first graph capture.
					prog.warmup(dt)
					_, err := eng.BenchSpeed(cmd.Context(), 0, prefillN, min(decodeN, warmupDecode), 0)
					prog.end()
					if err != nil {
						return fmt.Errorf("%s warm-up: %w", dt, err)
					}
				}
				for _, d := range ds {
					prog.begin(dt, d)
					r, err := eng.BenchSpeed(cmd.Context(), d, prefillN, decodeN, uint64(d)+1)
					prog.end()
					if err != nil {
						return fmt.Errorf("%s at depth %d: %w", dt, d, err)
					}
					results = append(results, r)
					if !asJSON {
						// fill: the whole depth as one long prompt, in prefill chunks.
						fill := "-"
						if r.Depth > 0 && r.FillSeconds > 0 {
							fill = fmt.Sprintf("%.1f", float64(r.Depth)/r.FillSeconds)
						}
						graph := "-"
						if r.DecodeGraphPerS > 0 {
							graph = fmt.Sprintf("%.1f", r.DecodeGraphPerS)
						}
						fmt.Fprintf(w, "%-10s %8d %12.1f %12.1f %12s %12s %s\n", r.KVDType, r.Depth, r.PrefillPerS, r.DecodePerS, fill, graph, r.Device)
					}
				}
			}
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(results)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&depths, "depths", "0,4096", "context depths in tokens, comma-separated")
	cmd.Flags().StringVar(&dtypes, "dtypes", "bf16,fp8_e4m3", "KV dtypes to measure, comma-separated")
	cmd.Flags().IntVar(&prefillN, "prefill", 512, "tokens in the measured prefill chunk")
	cmd.Flags().IntVar(&decodeN, "decode", 64, "decode steps measured")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the measurements to this file")
	cmd.Flags().BoolVar(&warmup, "warmup", true, "an untimed prefill and a few decode steps per KV dtype before its measurements")
	return cmd
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.ToLower(f), "k"))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a token count", f)
		}
		if strings.HasSuffix(strings.ToLower(f), "k") {
			n *= 1024
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no depths given")
	}
	return out, nil
}
