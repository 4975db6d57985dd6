package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/hub"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/quality"
	"github.com/ftchat/ftchat/internal/safefile"
)

func benchCmd(v *viper.Viper) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure capacity and quality of KV cache dtypes",
		Long: `bench measures what a KV cache dtype costs and saves:
  ftchat bench quality --text FILE --kv-cache-dtype fp8_e4m3   perplexity, KL divergence, top-1 agreement vs bf16
  ftchat bench needle --text FILE --kv-cache-dtype fp8_e4m3    needle-in-a-haystack retrieval
  ftchat bench capacity --gpu-memory 8GiB                       tokens that fit per dtype
  ftchat bench speed                                            prefill and decode tokens/s`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(benchQualityCmd(v), benchNeedleCmd(v), benchCapacityCmd(v), benchSpeedCmd(v))
	return cmd
}

// benchEngineOptions loads a model for evaluation: the engine's own pool
// is not used (each evaluation runs in a temporary pool of its dtype), so
// it is kept to a few pages.
func benchEngineOptions(v *viper.Viper) (engine.Options, error) {
	cfg := ConfigFrom(v)
	if err := cfg.Err(); err != nil {
		return engine.Options{}, err
	}
	o := cfg.Engine
	o.KVDType, o.KVScales = "bf16", ""
	if o.KVTokens == 0 && o.GPUMemory == 0 {
		o.KVTokens = 256
	}
	return o, nil
}

// kvSpecs reads a comma-separated --kv-cache-dtype list. An fp8 entry
// uses the --kv-scales file when one is given; a ":dynamic" or ":static"
// suffix picks per entry (":static" needs --kv-scales).
func kvSpecs(e *engine.Engine, list, scales string) ([]engine.KVSpec, error) {
	var out []engine.KVSpec
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, mode, _ := strings.Cut(item, ":")
		file := ""
		switch mode {
		case "":
			if d, err := kvcache.ParseDType(name); err == nil && d.IsFP8() {
				file = scales
			}
		case "dynamic":
		case "static":
			if scales == "" {
				return nil, fmt.Errorf("--kv-cache-dtype %s: static scales need --kv-scales FILE (from `ftchat calibrate`)", item)
			}
			file = scales
		default:
			return nil, fmt.Errorf("--kv-cache-dtype %s: suffix %q; use :dynamic or :static", item, mode)
		}
		s, err := e.KVSpecFor(name, file)
		if err != nil {
			return nil, fmt.Errorf("--kv-cache-dtype %s: %w", item, err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("--kv-cache-dtype: no dtype given (e.g. fp8_e4m3, or fp8_e4m3,fp8_e5m2)")
	}
	return out, nil
}

func loadBenchEngine(cmd *cobra.Command, v *viper.Viper) (*engine.Engine, error) {
	opts, err := benchEngineOptions(v)
	if err != nil {
		return nil, err
	}
	return loadEngine(cmd.Context(), Config{Engine: opts}, false)
}

func readText(path string) (string, error) {
	if path == "" {
		return "", errors.New("--text FILE is required (a plain-text file to evaluate on)")
	}
	// Evaluation texts are a few MB; the bound keeps a wrong path (a disk
	// image, a log) from filling memory.
	b, err := safefile.ReadFile(path, 1<<30, "--text")
	if err != nil {
		return "", err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return "", fmt.Errorf("--text %s: the file is empty", path)
	}
	return string(b), nil
}

// QualityReport is the --json output of one compared dtype.
type QualityReport struct {
	Model      string `json:"model"`
	Text       string `json:"text"`
	TextTokens int    `json:"text_tokens"`
	Reference  string `json:"reference"`
	DType      string `json:"dtype"`
	ScaleMode  string `json:"scale_mode"`
	ScalesFile string `json:"scales_file,omitempty"`
	Window     int    `json:"window"`
	Stride     int    `json:"stride"`
	SkipWindow int    `json:"skip_windows,omitempty"`
	Device     string `json:"device"`
	quality.Result
	Seconds float64 `json:"seconds"`
}

func benchQualityCmd(v *viper.Viper) *cobra.Command {
	var text, refName, jsonFile string
	var window, stride, limit, skip int
	var asJSON, needle bool
	var nf needleFlags
	cmd := &cobra.Command{
		Use:   "quality --text FILE [--kv-cache-dtype fp8_e4m3[,fp8_e5m2,...]] [--kv-scales FILE] [--window 512 --stride 256] [--json]",
		Short: "Perplexity, KL divergence and top-1 agreement of a KV dtype against a bf16 cache",
		Long: `quality runs the text through the model twice on the same windows: once with a
16-bit reference cache (bf16) and once with each dtype of --kv-cache-dtype
(a comma-separated list; fp8 entries use --kv-scales when given, or write
fp8_e4m3:static / fp8_e4m3:dynamic to choose per entry).

Method: windows of --window tokens start every --stride tokens; each window
runs from an empty cache and scores only the tokens no earlier window scored,
so every token after the first is scored exactly once, and every token
outside the first window sees at least window-stride tokens of context.
Reported: perplexity under both caches and its change in percent, the mean
(median, p99, max) KL(ref || test) of the next-token distributions in nats,
and top-1 agreement (how often both caches' most likely next token is the same).

--needle runs the needle-in-a-haystack test on the text instead (see
'ftchat bench needle').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if needle {
				nf.jsonFile = jsonFile
				return runNeedle(cmd, v, text, nf, asJSON)
			}
			body, err := readText(text)
			if err != nil {
				return err
			}
			e, err := loadBenchEngine(cmd, v)
			if err != nil {
				return err
			}
			defer e.Close()
			dtypes := v.GetString("kv-cache-dtype")
			if dtypes == "" || dtypes == "auto" {
				dtypes = "fp8_e4m3"
			}
			tests, err := kvSpecs(e, dtypes, v.GetString("kv-scales"))
			if err != nil {
				return err
			}
			ref, err := e.KVSpecFor(refName, "")
			if err != nil {
				return fmt.Errorf("--reference: %w", err)
			}
			toks := e.EncodeText(body)
			if limit > 0 && len(toks) > limit {
				toks = toks[:limit]
			}
			stderr := cmd.ErrOrStderr()
			fmt.Fprintf(stderr, "%s: %d tokens, window %d, stride %d, reference %s, comparing %s\n",
				text, len(toks), window, stride, ref, specNames(tests))
			t0 := time.Now()
			ws, err := quality.Windows(len(toks), window, stride)
			if err != nil {
				return err
			}
			if skip < 0 || skip >= len(ws) {
				return fmt.Errorf("--skip-windows %d: the text makes %d windows", skip, len(ws))
			}
			if skip > 0 {
				fmt.Fprintf(stderr, "skipping the first %d windows (tokens 1..%d)\n", skip, ws[skip].First-1)
			}
			wp := newWindowProgress(stderr, len(ws)-skip)
			defer wp.stop()
			res, err := e.EvalQualityWindows(cmd.Context(), toks, ws[skip:], ref, tests, func(p engine.QualityProgress) {
				wp.clear()
				defer wp.next(p.Window, p.Windows, p.Elapsed)
				rate := float64(p.Scored) / p.Elapsed.Seconds()
				fmt.Fprintf(stderr, "window %d/%d: %d tokens scored, %.0fs, %.1f scored tokens/s;", p.Window, p.Windows, p.Scored, p.Elapsed.Seconds(), rate)
				for i, r := range p.Partial {
					fmt.Fprintf(stderr, " %s: ppl_ref %.6f ppl %.6f kld %.8f top1 %.6f;", tests[i], r.PPLRef, r.PPL, r.KLDMean, r.Top1Agreement)
				}
				fmt.Fprintln(stderr)
			})
			if err != nil {
				return err
			}
			secs := time.Since(t0).Seconds()
			reps := make([]QualityReport, len(res))
			for i, r := range res {
				reps[i] = QualityReport{
					Model: e.Info().Name, Text: text, TextTokens: len(toks), Reference: ref.String(),
					DType: kvcache.PairName(tests[i].DType, tests[i].VDType), ScaleMode: tests[i].ScaleMode(), ScalesFile: tests[i].ScalesSource,
					Window: window, Stride: stride, SkipWindow: skip, Device: e.Stats().Device, Result: r, Seconds: secs,
				}
			}
			if err := saveJSON(jsonFile, reps); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, reps)
			}
			return writeQualityTable(w, reps)
		},
	}
	f := cmd.Flags()
	f.StringVar(&text, "text", "", "plain-text file to evaluate on (required)")
	f.IntVar(&window, "window", 512, "tokens per evaluation window")
	f.IntVar(&stride, "stride", 256, "tokens each window advances (every scored token sees at least window-stride tokens of context)")
	f.IntVar(&limit, "max-text-tokens", 0, "evaluate only the first N tokens of the text (0 = all)")
	f.IntVar(&skip, "skip-windows", 0, "start at this window (resume a stopped run; combine results weighted by tokens scored)")
	f.StringVar(&refName, "reference", "bf16", "16-bit reference cache dtype (bf16 or fp16)")
	f.BoolVar(&asJSON, "json", false, "print JSON (an object for one dtype, an array for several)")
	f.BoolVar(&needle, "needle", false, "run the needle-in-a-haystack test with --text as filler")
	f.StringVar(&jsonFile, "json-file", "", "also write the JSON report to this file")
	nf.add(cmd)
	return cmd
}

func specNames(s []engine.KVSpec) string {
	n := make([]string, len(s))
	for i, x := range s {
		n[i] = x.String()
	}
	return strings.Join(n, ", ")
}

// writeJSON prints one object for one report and an array for several.
func writeJSON[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if len(items) == 1 {
		return enc.Encode(items[0])
	}
	return enc.Encode(items)
}

// saveJSON writes v to path (nothing when path is empty).
func saveJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json-file: %w", err)
	}
	return nil
}

func writeQualityTable(w io.Writer, reps []QualityReport) error {
	if len(reps) == 0 {
		return nil
	}
	r0 := reps[0]
	fmt.Fprintf(w, "model %s, text %s (%d tokens), window %d, stride %d, %s\n", r0.Model, r0.Text, r0.TextTokens, r0.Window, r0.Stride, r0.Device)
	fmt.Fprintf(w, "reference %s: perplexity %.4f over %d scored tokens, top-1 accuracy %.2f%%\n\n", r0.Reference, r0.PPLRef, r0.Tokens, 100*r0.Top1AccRef)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kv cache\tppl\tΔppl\tKLD mean\tKLD median\tKLD p99\tKLD max\ttop-1 agreement\ttop-1 acc")
	for _, r := range reps {
		name := r.DType
		if r.ScaleMode == "static" {
			name += " (static)"
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%+.3f%%\t%.6f\t%.6f\t%.6f\t%.4f\t%.3f%%\t%.2f%%\n", name, r.PPL, r.DeltaPPLPct,
			r.KLDMean, r.KLDMedian, r.KLDP99, r.KLDMax, 100*r.Top1Agreement, 100*r.Top1Acc)
	}
	return tw.Flush()
}

type needleFlags struct {
	lengths, depths string
	jsonFile        string
	noRef           bool
	seed            uint64
	maxTokens       int
}

func (n *needleFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&n.lengths, "lengths", "", "haystack sizes in tokens, comma-separated (default 1024,4096 and the model's context minus 256)")
	f.StringVar(&n.depths, "depths", "0.1,0.5,0.9", "needle depths as fractions of the haystack, comma-separated")
	f.Uint64Var(&n.seed, "needle-seed", 1, "seed of the random passphrases")
	f.IntVar(&n.maxTokens, "answer-tokens", 32, "answer tokens decoded greedily")
	f.BoolVar(&n.noRef, "no-bf16", false, "do not add the bf16 reference (when its rows are known from an earlier run)")
}

func benchNeedleCmd(v *viper.Viper) *cobra.Command {
	var text string
	var asJSON bool
	var nf needleFlags
	cmd := &cobra.Command{
		Use:   "needle --text FILLER [--kv-cache-dtype fp8_e4m3[,...]] [--lengths 1024,4096,7936] [--depths 0.1,0.5,0.9] [--json]",
		Short: "Needle-in-a-haystack retrieval per haystack length, depth and KV dtype",
		Long: `needle builds haystacks from the sentences of --text (repeated as needed),
inserts "The secret passphrase is <word>-<digits>." at each depth, asks for the
passphrase through the model's chat template, decodes greedily and reports
whether the answer holds it. bf16 runs too as the reference (unless
--no-bf16); each --kv-cache-dtype entry sees the same prompts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runNeedle(cmd, v, text, nf, asJSON)
		},
	}
	cmd.Flags().StringVar(&nf.jsonFile, "json-file", "", "also write the JSON report to this file")
	cmd.Flags().StringVar(&text, "text", "", "prose to build the haystack from (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	nf.add(cmd)
	return cmd
}

func parseList[T any](flag, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		x, err := parse(p)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %v", flag, p, err)
		}
		out = append(out, x)
	}
	return out, nil
}

func runNeedle(cmd *cobra.Command, v *viper.Viper, text string, nf needleFlags, asJSON bool) error {
	filler, err := readText(text)
	if err != nil {
		return err
	}
	depths, err := parseList("--depths", nf.depths, func(s string) (float64, error) {
		d, err := strconv.ParseFloat(s, 64)
		if err != nil || d < 0 || d > 1 {
			return 0, errors.New("want a fraction between 0 and 1")
		}
		return d, nil
	})
	if err != nil {
		return err
	}
	lengths, err := parseList("--lengths", nf.lengths, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 16 {
			return 0, errors.New("want a token count of at least 16")
		}
		return n, nil
	})
	if err != nil {
		return err
	}
	e, err := loadBenchEngine(cmd, v)
	if err != nil {
		return err
	}
	defer e.Close()
	if len(lengths) == 0 {
		ctxLen := e.Info().ContextLen
		for _, n := range []int{1024, 4096} {
			if n < ctxLen-256 {
				lengths = append(lengths, n)
			}
		}
		lengths = append(lengths, ctxLen-256)
	}
	dtypes := v.GetString("kv-cache-dtype")
	if dtypes == "" || dtypes == "auto" {
		dtypes = "fp8_e4m3"
	}
	if !nf.noRef {
		dtypes = "bf16," + dtypes
	}
	specs, err := kvSpecs(e, dtypes, v.GetString("kv-scales"))
	if err != nil {
		return err
	}
	specs = dedupSpecs(specs)
	stderr := cmd.ErrOrStderr()
	prog := newNeedleProgress(stderr, lengths, len(depths), len(specs))
	prog.begin()
	res, err := e.EvalNeedle(cmd.Context(), engine.NeedleConfig{
		Filler: filler, Lengths: lengths, Depths: depths, Seed: nf.seed, MaxTokens: nf.maxTokens,
	}, specs, func(r engine.NeedleResult) {
		fmt.Fprintf(stderr, "%slength %d depth %.2f (at %.3f, prompt %d tokens) %s: found=%v answer=%q\n", prog.end(), r.Length, r.Depth, r.ActualDepth, r.PromptTokens, r.KV, r.Found, r.Answer)
		prog.begin()
	})
	prog.stop()
	if err != nil {
		return err
	}
	rep := struct {
		Model   string                `json:"model"`
		Filler  string                `json:"filler"`
		Results []engine.NeedleResult `json:"results"`
	}{e.Info().Name, text, res}
	if err := saveJSON(nf.jsonFile, rep); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if asJSON {
		return writeJSON(w, []any{rep})
	}
	return writeNeedleTable(w, res, specs)
}

func dedupSpecs(s []engine.KVSpec) []engine.KVSpec {
	seen := map[string]bool{}
	var out []engine.KVSpec
	for _, x := range s {
		if !seen[x.String()] {
			seen[x.String()] = true
			out = append(out, x)
		}
	}
	return out
}

// writeNeedleTable prints one row per (length, depth) and one column per
// KV spec: "found" or "MISSED".
func writeNeedleTable(w io.Writer, res []engine.NeedleResult, specs []engine.KVSpec) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := []string{"haystack tokens", "prompt tokens", "depth"}
	for _, s := range specs {
		hdr = append(hdr, s.String())
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	found := map[string]int{}
	for i := 0; i < len(res); i += len(specs) {
		r := res[i]
		row := []string{strconv.Itoa(r.Length), strconv.Itoa(r.PromptTokens), fmt.Sprintf("%.0f%%", 100*r.ActualDepth)}
		for j := range specs {
			cell := "MISSED"
			if res[i+j].Found {
				cell = "found"
				found[res[i+j].KV]++
			}
			row = append(row, cell)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tot := []string{"found", "", ""}
	for _, s := range specs {
		tot = append(tot, fmt.Sprintf("%d/%d", found[s.String()], len(res)/len(specs)))
	}
	fmt.Fprintln(tw, strings.Join(tot, "\t"))
	return tw.Flush()
}

// CapacityRow is one dtype of `bench capacity`.
type CapacityRow struct {
	DType         string  `json:"dtype"`
	ScaleMode     string  `json:"scale_mode"`
	BytesPerToken int     `json:"bytes_per_token"`
	Pages         int     `json:"pages"`
	Tokens        int     `json:"tokens"`
	PoolBytes     int64   `json:"pool_bytes"`
	RatioVsBF16   float64 `json:"ratio_vs_bf16"` // tokens / bf16 tokens
}

// CapacityReport is `bench capacity --json`.
type CapacityReport struct {
	Model      string        `json:"model"`
	Layers     int           `json:"attn_layers"`
	KVHeads    int           `json:"kv_heads"`
	HeadDim    int           `json:"head_dim"`
	PageSize   int           `json:"page_size"`
	Budget     int64         `json:"budget_bytes,omitempty"`
	Weights    int64         `json:"weights_bytes"`
	Workspace  int64         `json:"workspace_bytes"`
	KVMemory   int64         `json:"kv_memory_bytes"`
	Rows       []CapacityRow `json:"dtypes"`
	ContextLen int           `json:"context_len,omitempty"`

	// Hybrid models: all blocks, and the recurrent state of the others
	// (float32, fixed per sequence; it comes off a --gpu-memory budget
	// before the pool).
	Blocks           int   `json:"layers,omitempty"`
	StateLayers      int   `json:"state_layers,omitempty"`
	StateBytesPerSeq int64 `json:"state_bytes_per_seq,omitempty"`
	StateSlots       int   `json:"state_slots,omitempty"`
	StateBytes       int64 `json:"state_bytes,omitempty"`
	// Placement: an MoE model file whose weights do not all fit the
	// --gpu-memory budget (or --cpu-moe / --n-cpu-moe): the engine's
	// expert plan. Weights then count the dense weights and the experts
	// on the GPU; the staging for streamed experts comes off the budget
	// too.
	Placement *PlacementReport `json:"placement,omitempty"`
}

// PlacementReport is the expert placement `bench capacity` planned.
type PlacementReport struct {
	Summary         string `json:"summary"`
	Layers          int    `json:"moe_layers"`
	DeviceLayers    int    `json:"device_layers"`
	HostLayers      int    `json:"host_layers"`
	NCPUMoE         int    `json:"n_cpu_moe"` // the --n-cpu-moe that gives this plan
	ExpertsPerLayer int    `json:"experts_per_layer"`
	DenseBytes      int64  `json:"dense_bytes"`
	DeviceExperts   int64  `json:"device_expert_bytes"`
	HostExperts     int64  `json:"host_expert_bytes"`
	StagingBytes    int64  `json:"staging_bytes"`
	ContextTokens   int    `json:"context_tokens"` // the plan reserved KV for these, in PlanDType
	PlanDType       string `json:"plan_kv_dtype"`
}

// capacityRows sizes a pool of each dtype in the same budget: budget -
// weights - workspace - the recurrent state of a hybrid model, whole pages
// (kvcache.PlanHybridPool).
func capacityRows(l kvcache.Layout, budget, weights, workspace int64, st kvcache.RecurrentState) ([]CapacityRow, error) {
	specs := []struct {
		d kvcache.DType
		m kvcache.ScaleMode
	}{{kvcache.BF16, kvcache.DynamicScales}, {kvcache.F16, kvcache.DynamicScales}, {kvcache.FP8E4M3, kvcache.DynamicScales},
		{kvcache.FP8E5M2, kvcache.DynamicScales}, {kvcache.FP8E4M3, kvcache.StaticScales}}
	var rows []CapacityRow
	for _, s := range specs {
		x := l
		x.DType, x.Scales = s.d, s.m
		if s.m == kvcache.StaticScales {
			n := x.Layers * x.KVHeads
			x.KScale, x.VScale = make([]float32, n), make([]float32, n)
			for i := range n {
				x.KScale[i], x.VScale[i] = 1, 1
			}
		}
		pages, err := kvcache.PlanHybridPool(budget, weights, workspace, st, x)
		if err != nil {
			return nil, err
		}
		x.Pages = pages
		mode := "none"
		if s.d.IsFP8() {
			mode = s.m.String()
		}
		rows = append(rows, CapacityRow{DType: s.d.String(), ScaleMode: mode, BytesPerToken: x.BytesPerToken(),
			Pages: pages, Tokens: x.Tokens(), PoolBytes: kvcache.PoolBytes(x)})
	}
	for i := range rows {
		rows[i].RatioVsBF16 = float64(rows[i].Tokens) / float64(rows[0].Tokens)
	}
	return rows, nil
}

// parseShape reads --shape L,H,D or L/T,H,D (attention layers of T blocks).
func parseShape(s string) (layers, kvHeads, headDim int, err error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return 0, 0, 0, fmt.Errorf("--shape %q: want ATTN_LAYERS,KV_HEADS,HEAD_DIM, e.g. 32,8,128 (or 10/40,2,256 for 10 attention layers of 40)", s)
	}
	l := parts[0]
	if a, _, ok := strings.Cut(l, "/"); ok {
		l = a
	}
	var v [3]int
	for i, p := range []string{l, parts[1], parts[2]} {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return 0, 0, 0, fmt.Errorf("--shape %q: %q is not a positive integer", s, p)
		}
		v[i] = n
	}
	return v[0], v[1], v[2], nil
}

// workspaceBytes estimates the activations of one prefill chunk (float32)
// as the engine's GPU plan does, plus its reserve for the driver.
func workspaceBytes(c model.Config, chunk int, budget int64) int64 {
	return engine.WorkspaceBytes(c, chunk) + engine.GPUHeadroom(budget)
}

// capacityPlacement plans, as the engine does before a GPU load, where
// the routed experts of an MoE model live in the budget: nil when every
// expert stays on the device (nothing changes from a plain capacity
// report). The KV reserved for the context is in --kv-cache-dtype (auto:
// bf16) for --ctx-size (else the model's context) tokens.
func capacityPlacement(c model.Config, w engine.ExpertWeights, o engine.Options, budget int64) (*PlacementReport, error) {
	kv, err := engine.PlacementKV(c, o)
	if err != nil {
		return nil, err
	}
	p, err := engine.PlanExperts(c, w, o, engine.PlacementRequest{Budget: budget, KV: kv})
	if err != nil || p == nil || p.HostBlocks == 0 {
		return nil, err
	}
	return &PlacementReport{Summary: p.Summary(), Layers: p.MoEBlocks(), DeviceLayers: p.DeviceBlocks, HostLayers: p.HostBlocks,
		NCPUMoE: p.NCPUMoE(), ExpertsPerLayer: p.Input.ExpertsPerBlock, DenseBytes: p.Input.Dense, DeviceExperts: p.DeviceExperts,
		HostExperts: p.HostExperts, StagingBytes: p.Staging, ContextTokens: p.Input.ContextTokens, PlanDType: p.Input.KVDType}, nil
}

func benchCapacityCmd(v *viper.Viper) *cobra.Command {
	var shape, kvMem, weightsText, name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "capacity [--model M | --shape L,H,D] [--gpu-memory 8GiB | --kv-memory 2GiB] [--json]",
		Short: "Tokens and pages of KV cache that fit per dtype in a memory budget",
		Long: `capacity sizes the KV pool for each dtype in the same budget, with the pool
accounting the engine uses (whole pages, data + scales):
  --gpu-memory B   device budget; the pool gets what the weights and the
                   workspace (activations of one prefill chunk + 256 MiB) leave
  --kv-memory B    the pool's own budget
The model's shape comes from its GGUF metadata (weights are not loaded), or
from --shape ATTN_LAYERS,KV_HEADS,HEAD_DIM for a hypothetical model; with
--shape and --gpu-memory give --weights for the weight bytes. Example, the
Qwen3.6-35B-A3B hybrid (attention in 10 of 40 layers, 2 KV heads, head_dim 256):
  ftchat bench capacity --shape 10/40,2,256 --kv-memory 2.5GiB
A hybrid model file (qwen35, qwen35moe, qwen3next) also has a recurrent state
per sequence (float32, fixed whatever the length): it is printed apart from
the KV bytes per token, and --state-slots of it (live conversations plus
snapshots) come off a --gpu-memory budget before the pool.
An MoE model file whose weights do not all fit --gpu-memory gets the engine's
expert placement (as a GPU load would plan it; no GPU needed here): dense
weights, the KV pool for --ctx-size tokens (default: the model's context) in
--kv-cache-dtype, the state and the workspace first, then as many layers'
routed experts as fit, the rest in host RAM (--cpu-moe and --n-cpu-moe N
force it). The pool of every dtype then gets what that plan leaves.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := ConfigFrom(v)
			if err := cfg.Err(); err != nil {
				return err
			}
			if kvMem != "" && cfg.GPUMemoryText != "" {
				return errors.New("give either --gpu-memory (device budget) or --kv-memory (pool budget), not both")
			}
			if kvMem == "" && cfg.GPUMemoryText == "" {
				return errors.New("give a budget: --gpu-memory 8GiB (device, weights and workspace come off) or --kv-memory 2GiB (pool only)")
			}
			ps := cfg.Engine.PageSize
			if ps == 0 {
				ps = engine.DefaultPageSize
			}
			rep := CapacityReport{PageSize: ps}
			var c model.Config
			if shape != "" {
				l, h, d, err := parseShape(shape)
				if err != nil {
					return err
				}
				rep.Model = name
				if rep.Model == "" {
					rep.Model = "shape " + shape
				}
				c = model.Config{AttnLayers: l, KVHeads: h, HeadDim: d}
				if weightsText != "" {
					w, err := ParseBytes(weightsText)
					if err != nil {
						return fmt.Errorf("--weights %q: %w", weightsText, err)
					}
					rep.Weights = w
				} else if cfg.GPUMemoryText != "" {
					return errors.New("--shape with --gpu-memory needs --weights SIZE (the model's weight bytes); or use --kv-memory")
				}
			} else {
				path, err := hub.Resolve(cmd.Context(), cfg.Engine.Model, newProgressPrinter(cmd.ErrOrStderr()).update)
				if err != nil {
					return err
				}
				// A Hugging Face checkpoint directory is read as the engine
				// reads it: a virtual GGUF whose tensor infos carry the
				// in-memory types (NVFP4, FP8_E4M3 at 1 B/weight).
				var f *gguf.File
				if hfmodel.IsCheckpoint(path) {
					f, err = hfmodel.Open(path)
				} else {
					f, err = gguf.Open(path)
				}
				if err != nil {
					return err
				}
				c, err = model.ReadConfig(f)
				var ew engine.ExpertWeights
				if err == nil {
					ew = engine.ReadExpertWeights(f, c)
				}
				f.Close()
				if err != nil {
					return err
				}
				rep.Model, rep.Weights, rep.ContextLen = c.Name, c.WeightBytes, c.ContextLen
				if cfg.GPUMemoryText != "" && kvMem == "" {
					if rep.Placement, err = capacityPlacement(c, ew, cfg.Engine, cfg.Engine.GPUMemory); err != nil {
						return err
					}
					if p := rep.Placement; p != nil {
						rep.Weights = p.DenseBytes + p.DeviceExperts
					}
				}
				if c.Hybrid() {
					slots := cfg.Engine.StateSlots
					if slots == 0 {
						slots = engine.DefaultStateSlots
					}
					sl := c.StateLayout(slots)
					rep.Blocks, rep.StateLayers, rep.StateSlots = c.Layers, sl.Layers, slots
					rep.StateBytesPerSeq, rep.StateBytes = sl.BytesPerSlot(), sl.Bytes()
				}
				if rep.Model == "" {
					rep.Model = path
				}
				if cfg.GPUMemoryText != "" {
					chunk := cfg.Engine.PrefillChunk
					if chunk <= 0 {
						chunk = engine.DefaultPrefillChunk
					}
					rep.Workspace = workspaceBytes(c, engine.PlannedRows(chunk), cfg.Engine.GPUMemory)
				}
			}
			rep.Layers, rep.KVHeads, rep.HeadDim = c.AttnLayers, c.KVHeads, c.HeadDim
			budget := int64(0)
			if kvMem != "" {
				b, err := ParseBytes(kvMem)
				if err != nil {
					return fmt.Errorf("--kv-memory %q: %w", kvMem, err)
				}
				budget, rep.Weights, rep.Workspace = b, 0, 0
				rep.Placement = nil
			} else {
				budget = cfg.Engine.GPUMemory
				rep.Budget = budget
			}
			var st kvcache.RecurrentState
			if rep.Budget > 0 {
				// A --kv-memory budget is the pool's alone; the state is
				// shown beside it.
				st = kvcache.RecurrentState{Slots: rep.StateSlots, PerSlot: rep.StateBytesPerSeq}
			}
			var staging int64
			if rep.Placement != nil {
				staging = rep.Placement.StagingBytes
			}
			rep.KVMemory = budget - rep.Weights - rep.Workspace - staging - st.Bytes()
			l := kvcache.Layout{Layers: c.AttnLayers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, PageSize: ps}
			rows, err := capacityRows(l, budget, rep.Weights, rep.Workspace+staging, st)
			if err != nil {
				return err
			}
			if pr, ok, err := capacityPairRow(cfg.Engine, l, budget, rep.Weights, rep.Workspace+staging, st, rows[0].Tokens); err != nil {
				return err
			} else if ok {
				rows = append(rows, pr) // --cache-type-k/-v: K and V apart
			}
			rep.Rows = rows
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), []CapacityReport{rep})
			}
			return writeCapacityTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&shape, "shape", "", "hypothetical model: ATTN_LAYERS,KV_HEADS,HEAD_DIM (e.g. 10/40,2,256)")
	f.StringVar(&name, "name", "", "label for --shape in the output")
	f.StringVar(&kvMem, "kv-memory", "", "budget for the KV pool alone, e.g. 2GiB")
	f.StringVar(&weightsText, "weights", "", "with --shape and --gpu-memory: the model's weight bytes, e.g. 19GiB")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeCapacityTable(w io.Writer, r CapacityReport) error {
	layers := fmt.Sprintf("%d attention layers", r.Layers)
	if r.Blocks > r.Layers {
		layers = fmt.Sprintf("attention in %d of %d layers", r.Layers, r.Blocks)
	}
	fmt.Fprintf(w, "%s: %s, %d kv heads, head_dim %d, pages of %d tokens\n", r.Model, layers, r.KVHeads, r.HeadDim, r.PageSize)
	if r.StateLayers > 0 {
		fmt.Fprintf(w, "recurrent state: %d Gated DeltaNet layers, %s B = %s per sequence (float32, any length, any KV dtype); %d slots (--state-slots) = %s\n",
			r.StateLayers, groupInt(r.StateBytesPerSeq), kvcache.FormatBytes(r.StateBytesPerSeq), r.StateSlots, kvcache.FormatBytes(r.StateBytes))
	}
	weights := "weights " + kvcache.FormatBytes(r.Weights)
	if p := r.Placement; p != nil {
		fmt.Fprintf(w, "expert plan (KV reserved for %d %s tokens; --n-cpu-moe %d): %s\n", p.ContextTokens, p.PlanDType, p.NCPUMoE, p.Summary)
		weights = fmt.Sprintf("weights %s (dense %s + experts of %d/%d layers %s) - staging %s", kvcache.FormatBytes(r.Weights),
			kvcache.FormatBytes(p.DenseBytes), p.DeviceLayers, p.Layers, kvcache.FormatBytes(p.DeviceExperts), kvcache.FormatBytes(p.StagingBytes))
	}
	switch {
	case r.Budget > 0 && r.StateLayers > 0:
		fmt.Fprintf(w, "budget %s - %s - workspace %s - state %s = %s for the KV pool\n",
			kvcache.FormatBytes(r.Budget), weights, kvcache.FormatBytes(r.Workspace), kvcache.FormatBytes(r.StateBytes), kvcache.FormatBytes(r.KVMemory))
	case r.Budget > 0:
		fmt.Fprintf(w, "budget %s - %s - workspace %s = %s for the KV pool\n",
			kvcache.FormatBytes(r.Budget), weights, kvcache.FormatBytes(r.Workspace), kvcache.FormatBytes(r.KVMemory))
	default:
		fmt.Fprintf(w, "KV pool budget %s\n", kvcache.FormatBytes(r.KVMemory))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dtype\tscales\tbytes/token\tpages\ttokens\tpool\tvs bf16\t")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%.3fx\t\n", x.DType, x.ScaleMode, x.BytesPerToken, x.Pages, x.Tokens, kvcache.FormatBytes(x.PoolBytes), x.RatioVsBF16)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.ContextLen > 0 && len(r.Rows) > 0 && r.Rows[0].Tokens > 0 {
		fmt.Fprintf(w, "(the model's context is %d tokens: %.1f full contexts fit in bf16)\n", r.ContextLen, float64(r.Rows[0].Tokens)/float64(r.ContextLen))
	}
	return nil
}

// groupInt writes n with thousands separators: 65863680 -> "65,863,680".
func groupInt(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func calibrateCmd(v *viper.Viper) *cobra.Command {
	var text, out, dtype string
	var percentile, margin float64
	var perLayer bool
	var window, limit int
	cmd := &cobra.Command{
		Use:   "calibrate --text FILE -o scales.json [--dtype fp8_e4m3] [--percentile P] [--margin M] [--per-layer]",
		Short: "Write static FP8 KV scales from a text sample",
		Long: `calibrate prefills the text window by window (--window tokens each, from an
empty cache) into a bf16 pool on the CPU, observes every K row (after RoPE) and
V row of every attention layer, and writes per (layer, KV head) scales
clip*margin/FP8_MAX, where clip is the maximum |x| (--percentile 100, the
default) or the given percentile. Use the file with
  ftchat --kv-cache-dtype fp8_e4m3 --kv-scales scales.json
Calibrate on text like what you will run, but evaluate on different text.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("-o FILE is required (where to write the scales)")
			}
			d, err := kvcache.ParseDType(dtype)
			if err != nil {
				return fmt.Errorf("--dtype: %w", err)
			}
			if !d.IsFP8() {
				return fmt.Errorf("--dtype %s: static scales are for fp8_e4m3 or fp8_e5m2", dtype)
			}
			if window < 2 {
				return fmt.Errorf("--window %d: must be at least 2 tokens", window)
			}
			opts := CalibOpts{Percentile: percentile, Margin: margin, PerLayer: perLayer}
			body, err := readText(text)
			if err != nil {
				return err
			}
			o, err := benchEngineOptions(v)
			if err != nil {
				return err
			}
			if o.Device == "" || o.Device == "auto" {
				o.Device = "cpu" // the host reads the pool back
			}
			e, err := loadEngine(cmd.Context(), Config{Engine: o}, false)
			if err != nil {
				return err
			}
			defer e.Close()
			toks := e.EncodeText(body)
			if limit > 0 && len(toks) > limit {
				toks = toks[:limit]
			}
			prog := newTokenProgress(cmd.ErrOrStderr(), "calibrating", len(toks))
			sf, err := Calibrate(cmd.Context(), e, toks, window, d, opts, prog.update)
			prog.stop()
			if err != nil {
				return err
			}
			sf.Calib.Source = text
			if err := sf.Save(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s scales for %d attention layers x %d kv heads from %d tokens of %s\n",
				out, sf.DType, sf.Layers, sf.KVHeads, sf.Calib.Tokens, text)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&text, "text", "", "sample text to calibrate on (required)")
	f.StringVarP(&out, "output", "o", "", "scales file to write (required)")
	f.StringVar(&dtype, "dtype", "fp8_e4m3", "FP8 format the scales are for (fp8_e4m3 or fp8_e5m2; the engine rescales for the other)")
	f.Float64Var(&percentile, "percentile", 100, "percentile of |x| per layer and head used as the clipping value (100 = max)")
	f.Float64Var(&margin, "margin", 1, "multiplier on the clipping value (headroom for larger values than the sample's)")
	f.BoolVar(&perLayer, "per-layer", false, "one scale per layer (the max over its KV heads) instead of per head")
	f.IntVar(&window, "window", 512, "tokens per prefill window (each from an empty cache)")
	f.IntVar(&limit, "max-text-tokens", 0, "use only the first N tokens of the text (0 = all)")
	return cmd
}

// CalibOpts are calibrate's tuning flags.
type CalibOpts = kvcache.CalibOptions

// Calibrate runs tokens through e in windows of window tokens and returns
// static scales for d.
func Calibrate(ctx context.Context, e *engine.Engine, toks []int32, window int, d kvcache.DType, o CalibOpts, progress func(done, total int)) (*kvcache.ScalesFile, error) {
	if len(toks) == 0 {
		return nil, errors.New("calibrate: the text has no tokens")
	}
	layers, heads, dim := e.AttnShape()
	cal, err := kvcache.NewCalibrator(layers, heads, dim)
	if err != nil {
		return nil, err
	}
	for off := 0; off < len(toks); off += window {
		end := min(off+window, len(toks))
		if err := e.CalibrateWindow(ctx, toks[off:end], cal); err != nil {
			return nil, err
		}
		if progress != nil {
			progress(end, len(toks))
		}
	}
	sf, err := cal.Scales(e.Info().Name, d, o)
	if err != nil {
		return nil, err
	}
	return sf, nil
}
