// Package cli holds ftchat's subcommands and the glue between settings,
// the engine and the UI. main.go owns the root command and viper wiring.
package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/safefile"
)

// ExitError ends the process with Code after its message was printed.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Config is every setting after flags, environment and config file merged.
type Config struct {
	Engine engine.Options
	// GPUMemoryText keeps the user's spelling for error messages.
	GPUMemoryText string

	Sampling engine.Sampling
	// SeedDrawn: --seed was 0, so Sampling.Seed was drawn for this run.
	SeedDrawn bool
	MaxTokens int

	Print    bool   // -p: print only the answer and exit
	Verbose  bool   // -p: also print the settings that reproduce the answer on stderr
	System   string // system prompt override
	Continue bool   // resume the latest session
	Agent    bool
	Yolo     bool
	ShellEnv []string // names (or PREFIX*) run_shell passes on beyond the defaults

	AgentMaxSteps int // model turns per agent request

	// Remote, when its URL is set, runs against a server (--engine).
	Remote RemoteConfig

	// Files are attached to the first message as context (--file, -f;
	// command line only). Set by the root command from its flag.
	Files []string

	configErr error
}

// EngineFlags are shared by every command that loads a model.
func EngineFlags(f *pflag.FlagSet) {
	f.StringP("model", "m", "", "GGUF file path or model name (default smollm2-135m-instruct, fetched on first use)")
	f.String("device", "auto", "auto | cpu | cuda | cuda:N")
	f.String("gpu-memory", "", "GPU memory budget, e.g. 8GiB (default: what the device has free)")
	f.String("kv-cache-dtype", "auto", "KV cache storage: auto | bf16 | fp16 | fp8_e4m3 | fp8_e5m2 (auto = the model's 16-bit compute dtype)")
	f.String("compute-dtype", "auto", "GPU tensor-core operand type: auto | bf16 | fp16 (auto = bf16 on sm_80 and newer, fp16 on sm_75 Turing; float32 accumulation either way)")
	f.String("kv-scales", "", `FP8 scales: empty = dynamic per token and KV head; "checkpoint"; or a calibration file from 'ftchat calibrate'`)
	f.Int("page-size", 0, "tokens per KV page, a power of two (0 = default)")
	f.Int("ctx-size", 0, "maximum tokens per conversation (0 = the model's context length)")
	f.Int("kv-tokens", 0, "CPU: KV pool size in tokens (0 = ctx-size)")
	f.Int("threads", 0, "CPU threads (0 = all cores)")
	f.Bool("cpu-moe", false, "GPU: keep every layer's routed MoE experts in host RAM (the rest of the model on the GPU)")
	f.Int("n-cpu-moe", 0, "GPU: keep the routed MoE experts of the first N layers in host RAM (0 = automatic: as many on the GPU as --gpu-memory holds)")
	f.String("expert-run", "auto", "GPU: how experts in host RAM run: auto (mapped for decode, stream for prefill) | mapped (the GPU reads the chosen experts over PCIe) | split (decode: the GPU reads some chosen experts while the host cores compute the rest; FTCHAT_SPLIT_CPU=N slots on the CPU) | cpu (host cores) | cpu-decode (host cores for decode, prefill streamed, as llama.cpp's --n-cpu-moe) | stream (the layer copied to the GPU per call)")
	f.String("cache-type-k", "", "KV cache storage of the keys alone (overrides --kv-cache-dtype for K): bf16 | fp16 | fp8_e4m3 | fp8_e5m2")
	f.String("cache-type-v", "", "KV cache storage of the values alone (overrides --kv-cache-dtype for V)")
	f.Int("ubatch-size", 0, fmt.Sprintf("prompt tokens per prefill step (0 = %d; llama.cpp's --ubatch-size): larger steps amortise each streamed expert layer over more tokens and take more GPU workspace, at most %d", engine.DefaultPrefillChunk, engine.MaxPrefillChunk))
	f.Int("state-slots", 0, fmt.Sprintf("hybrid models (Qwen3.5/3.6): recurrent-state slots beside the KV pool, live conversations plus turn snapshots (0 = %d)", engine.DefaultStateSlots))
}

// ChatFlags belong to the chat (root) command.
func ChatFlags(f *pflag.FlagSet) {
	f.BoolP("print", "p", false, "print only the answer to the prompt and exit (no TUI)")
	f.String("system", "", "system prompt")
	f.BoolP("continue", "c", false, "resume the most recent saved session (llama.cpp's -c, the context size, is --ctx-size here)")
	f.StringArrayP("file", "f", nil, "attach FILE's text to the first message as context, like piped input (repeatable)")
	f.Bool("agent", false, "run as a coding agent in the current directory")
	f.Bool("yolo", false, "agent: run tools without asking for approval (never the default)")
	f.Int("agent-max-steps", agent.DefaultMaxSteps, fmt.Sprintf("agent: model turns per task before it stops (each answer is capped at --max-tokens, %d when that is 0)", agent.DefaultMaxTokens))
	f.String("shell-env", "", "agent: extra environment variables run_shell passes on, comma-separated names or PREFIX* (the rest of the environment is withheld)")
	f.Float32P("temperature", "t", 0.7, "sampling temperature (0 = greedy; llama.cpp's -t, the thread count, is --threads here)")
	f.Int("top-k", 40, "top-k sampling (0 = off)")
	f.Float32("top-p", 0.95, "top-p sampling (1 = off)")
	f.Float32("min-p", 0.05, "min-p sampling (0 = off)")
	f.Float32("repeat-penalty", 1.1, "repetition penalty (1 = off)")
	f.Int("repeat-last-n", 64, "tokens considered by the repetition penalty")
	f.Uint64("seed", 0, "sampling seed (0 = a new random one each run, shown by -p --verbose and the chat's model line)")
	f.Bool("verbose", false, "-p: print the seed and model used, and the model's thinking, on stderr")
	f.IntP("max-tokens", "n", 0, "maximum tokens per answer (0 = until done or the pool is full)")
}

// ConfigFrom reads the merged settings.
func ConfigFrom(v *viper.Viper) Config {
	c := Config{
		Engine: engine.Options{
			Model:        v.GetString("model"),
			Device:       v.GetString("device"),
			KVDType:      v.GetString("kv-cache-dtype"),
			KVScales:     v.GetString("kv-scales"),
			PageSize:     v.GetInt("page-size"),
			ContextLen:   v.GetInt("ctx-size"),
			KVTokens:     v.GetInt("kv-tokens"),
			Threads:      v.GetInt("threads"),
			StateSlots:   v.GetInt("state-slots"),
			PrefillChunk: v.GetInt("ubatch-size"),
			CPUMoE:       v.GetBool("cpu-moe"),
			NCPUMoE:      v.GetInt("n-cpu-moe"),
			ExpertRun:    v.GetString("expert-run"),
			KVDTypeK:     v.GetString("cache-type-k"),
			KVDTypeV:     v.GetString("cache-type-v"),
			ComputeDType: v.GetString("compute-dtype"),
		},
		GPUMemoryText: v.GetString("gpu-memory"),
		Sampling: engine.Sampling{
			Temperature:   float32(v.GetFloat64("temperature")),
			TopK:          v.GetInt("top-k"),
			TopP:          float32(v.GetFloat64("top-p")),
			MinP:          float32(v.GetFloat64("min-p")),
			RepeatPenalty: float32(v.GetFloat64("repeat-penalty")),
			RepeatLastN:   v.GetInt("repeat-last-n"),
			Seed:          v.GetUint64("seed"),
		},
		MaxTokens: v.GetInt("max-tokens"),
		Print:     v.GetBool("print"),
		Verbose:   v.GetBool("verbose"),
		System:    v.GetString("system"),
		Continue:  v.GetBool("continue"),
		Agent:     v.GetBool("agent"),
		Yolo:      v.GetBool("yolo"),
		ShellEnv:  splitList(v.GetString("shell-env")),
	}
	c.AgentMaxSteps = v.GetInt("agent-max-steps")
	if c.Sampling.Seed == 0 {
		c.Sampling.Seed, c.SeedDrawn = drawSeed(), true
	}
	if c.GPUMemoryText != "" {
		n, err := ParseBytes(c.GPUMemoryText)
		if err != nil {
			c.configErr = fmt.Errorf("--gpu-memory %q: %w", c.GPUMemoryText, err)
		}
		c.Engine.GPUMemory = n
	}
	return c
}

// drawSeed returns a random nonzero seed: 0 would mean "random" again
// when the user passes the printed seed back to reproduce a run.
func drawSeed() uint64 {
	for {
		if s := rand.Uint64(); s != 0 {
			return s
		}
	}
}

// splitList reads a comma-separated setting; blanks are dropped.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Err reports a setting that could not be parsed.
func (c Config) Err() error { return c.configErr }

// ParseBytes reads sizes like 8GiB, 512MiB, 8GB, 1.5G, 1073741824.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	units := []struct {
		suffix string
		mult   float64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 || f*mult >= 1<<62 {
		return 0, fmt.Errorf("not a size: want a positive amount like 8GiB, 512MiB or 6GB")
	}
	return int64(f * mult), nil
}

// maxConfigFile bounds the config file: settings are a few lines, so
// anything larger is the wrong file (or /dev/zero).
const maxConfigFile = 1 << 20

// commandLineOnly are settings that take effect only when given as a flag
// of this run: the environment and the config file persist across runs, so
// a value there would silently stand for every later run. The value says
// why, for the warning when one is found there.
var commandLineOnly = map[string]string{
	"yolo": "--yolo must be given on the command line of each run (auto-approval is never a standing setting)",
	"file": "--file attaches a file to one run's first message; give it on the command line",
}

// settingChecks are range checks beyond what the flag's type accepts. Each
// returns what is wrong with the value (its canonical string), or "".
var settingChecks = map[string]func(string) string{
	"temperature":    atLeast(0),
	"top-p":          between(0, 1),
	"min-p":          between(0, 1),
	"repeat-penalty": above(0),
	"top-k":          atLeast(0),
	"repeat-last-n":  atLeast(0),
	"max-tokens":     atLeast(0),
	"page-size":      atLeast(0),
	"ctx-size":       atLeast(0),
	"kv-tokens":      atLeast(0),
	"threads":        atLeast(0),
	"state-slots":    atLeast(0),
	"ubatch-size":    atLeast(0),
	"n-cpu-moe":      atLeast(0),

	"agent-max-steps": atLeast(1),
	"gpu-memory": func(s string) string {
		if s == "" {
			return "" // empty: what the device has free
		}
		if _, err := ParseBytes(s); err != nil {
			return err.Error()
		}
		return ""
	},
}

func number(s string) (float64, string) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, "not a finite number"
	}
	return f, ""
}

func atLeast(lo float64) func(string) string {
	return func(s string) string {
		f, bad := number(s)
		if bad == "" && f < lo {
			bad = fmt.Sprintf("below %g (must be %g or more)", lo, lo)
		}
		return bad
	}
}

func above(lo float64) func(string) string {
	return func(s string) string {
		f, bad := number(s)
		if bad == "" && f <= lo {
			bad = fmt.Sprintf("not above %g (must be more than %g)", lo, lo)
		}
		return bad
	}
}

func between(lo, hi float64) func(string) string {
	return func(s string) string {
		f, bad := number(s)
		if bad == "" && (f < lo || f > hi) {
			bad = fmt.Sprintf("outside %g..%g", lo, hi)
		}
		return bad
	}
}

// LoadSettings binds cmd's flags and the FTCHAT_* environment to v, reads
// the config file (file, or config.<ext> in $XDG_CONFIG_HOME/ftchat), and
// checks every value that did not come from a flag by parsing it with the
// flag's own type, so a new flag is covered without more code here.
// Warnings (unknown config keys, ignored command-line-only settings) go to
// cmd's stderr.
func LoadSettings(v *viper.Viper, cmd *cobra.Command, file string) error {
	v.SetEnvPrefix("FTCHAT")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	var flags []*pflag.Flag
	seen := map[string]bool{}
	var bindErr error
	bind := func(f *pflag.Flag) {
		if seen[f.Name] {
			return
		}
		seen[f.Name] = true
		flags = append(flags, f)
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	}
	cmd.Flags().VisitAll(bind)
	cmd.InheritedFlags().VisitAll(bind)
	if bindErr != nil {
		return bindErr
	}
	fileKeys, err := readConfig(v, file)
	if err != nil {
		return err
	}
	used := v.ConfigFileUsed()
	warn := cmd.ErrOrStderr()
	known := knownFlags(cmd.Root())
	for _, k := range unknownKeys(fileKeys, known) {
		fmt.Fprintf(warn, "ftchat: warning: %s: unknown key %q%s; it is ignored\n", used, k.name, k.hint)
	}

	// Command-line-only settings: pin viper to the flag (or the zero value
	// where this command has no such flag), whatever env and file say.
	for _, name := range sortedKeys(commandLineOnly) {
		var where []string
		if os.Getenv(envName(name)) != "" {
			where = append(where, envName(name))
		}
		if _, ok := fileKeys[name]; ok {
			where = append(where, fmt.Sprintf("%q in %s", name, used))
		}
		if len(where) > 0 {
			fmt.Fprintf(warn, "ftchat: ignoring %s: %s\n", strings.Join(where, " and "), commandLineOnly[name])
		}
		val := ""
		if f := cmd.Flags().Lookup(name); f != nil {
			val = f.Value.String()
		}
		v.Set(name, val)
	}

	// The config file is shared by every command: its keys are checked
	// with the type of the flag they belong to, even when this command
	// has no such flag (so `ftchat config` reports a bad file).
	for _, k := range sortedKeys(fileKeys) {
		if f := known[k]; f != nil && !seen[k] {
			flags = append(flags, f)
		}
	}
	for _, f := range flags {
		if _, ok := commandLineOnly[f.Name]; ok || f.Name == "help" || f.Name == "config" {
			continue
		}
		if err := checkSetting(v, f, fileKeys, used); err != nil {
			return err
		}
	}
	return nil
}

// checkSetting validates the value f resolves to, from whichever source
// wins (flag, environment, config file), and names that source in the
// error. A value from env or file is parsed by a fresh Value of the flag's
// type; viper then gets its canonical form, so what was checked is what
// is used.
func checkSetting(v *viper.Viper, f *pflag.Flag, fileKeys map[string]any, file string) error {
	var raw string
	var bad func(what string) error
	switch env := envName(f.Name); {
	case f.Changed:
		raw = f.Value.String()
		bad = func(what string) error { return fmt.Errorf("--%s %s: %s", f.Name, raw, what) }
	case os.Getenv(env) != "": // viper ignores an empty variable too
		raw = os.Getenv(env)
		bad = func(what string) error { return fmt.Errorf("%s=%s: %s (fix or unset the variable)", env, raw, what) }
	default:
		val, ok := fileKeys[f.Name]
		if !ok {
			return nil // the default
		}
		bad = func(what string) error {
			return fmt.Errorf("%s: %s: %q is %s (fix or remove the key)", file, f.Name, raw, what)
		}
		switch val.(type) {
		case map[string]any, []any:
			raw = fmt.Sprint(val)
			return bad("not a single value")
		case nil:
			raw = "" // "key:" with nothing after it
		default:
			raw = fmt.Sprint(val)
		}
	}
	if !f.Changed {
		val, ok := freshValue(f.Value)
		if ok {
			if err := val.Set(raw); err != nil {
				return bad("not " + typeNoun(val.Type()))
			}
			v.Set(f.Name, val.String())
			raw = val.String()
		}
	}
	if check := settingChecks[f.Name]; check != nil {
		if what := check(raw); what != "" {
			return bad(what)
		}
	}
	return nil
}

// freshValue returns a new zero Value of v's type to parse into without
// touching the flag. pflag's scalar values are pointers to basic types;
// for anything else (slices, custom structs) it reports false.
func freshValue(v pflag.Value) (pflag.Value, bool) {
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() == reflect.Struct {
		return nil, false
	}
	nv, ok := reflect.New(t.Elem()).Interface().(pflag.Value)
	return nv, ok
}

func typeNoun(t string) string {
	switch {
	case t == "bool":
		return "true or false"
	case t == "duration":
		return "a duration like 30s or 5m"
	case strings.HasPrefix(t, "uint"):
		return "a non-negative integer"
	case strings.HasPrefix(t, "int"), t == "count":
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "a valid " + t
}

func envName(flag string) string {
	return "FTCHAT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// readConfig reads the config file into v and returns its top-level
// settings. The file is opened through safefile: a named pipe or a huge
// file is refused instead of blocking or filling memory.
func readConfig(v *viper.Viper, file string) (map[string]any, error) {
	if file == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return nil, nil // no config dir: flags and env only
		}
		for _, ext := range viper.SupportedExts {
			p := filepath.Join(dir, "ftchat", "config."+ext)
			if _, err := os.Stat(p); err == nil {
				file = p
				break
			}
		}
		if file == "" {
			return nil, nil
		}
	}
	data, err := safefile.ReadFile(file, maxConfigFile, "config file")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("config file %s: no such file", file)
		}
		return nil, err
	}
	ext := strings.TrimPrefix(filepath.Ext(file), ".")
	if !slices.Contains(viper.SupportedExts, ext) {
		return nil, fmt.Errorf("config file %s: unknown format %q: name it .yaml, .json or .toml", file, ext)
	}
	// A viper of its own sees only the file, to tell its keys apart.
	fv := viper.New()
	fv.SetConfigType(ext)
	if err := fv.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("config file %s: %w", file, err)
	}
	v.SetConfigFile(file)
	v.SetConfigType(ext)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("config file %s: %w", file, err)
	}
	// AllSettings drops keys with no value ("temperature:"), which viper
	// then reads as unset; AllKeys keeps them, so they can be reported.
	settings := fv.AllSettings()
	keys := map[string]any{}
	for _, k := range fv.AllKeys() {
		top, _, _ := strings.Cut(k, ".")
		keys[top] = settings[top]
	}
	return keys, nil
}

// knownFlags are the flags of every command by name: a config key may be
// meant for any of them.
func knownFlags(root *cobra.Command) map[string]*pflag.Flag {
	known := map[string]*pflag.Flag{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) {
			if known[f.Name] == nil {
				known[f.Name] = f
			}
		}
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	delete(known, "help")
	delete(known, "config") // a config file cannot name another one
	return known
}

type unknownKey struct{ name, hint string }

func unknownKeys(fileKeys map[string]any, known map[string]*pflag.Flag) []unknownKey {
	var out []unknownKey
	for _, k := range sortedKeys(fileKeys) {
		if known[k] != nil {
			continue
		}
		u := unknownKey{name: k}
		if s := closest(k, known); s != "" {
			u.hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		out = append(out, u)
	}
	return out
}

// closest is the known key within two edits of k (after treating _ as -),
// or "".
func closest(k string, known map[string]*pflag.Flag) string {
	k = strings.ReplaceAll(k, "_", "-")
	best, bestD := "", 3
	for _, name := range sortedKeys(known) {
		if d := editDistance(k, name); d < bestD {
			best, bestD = name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
