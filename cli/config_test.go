package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

func TestParseBytes(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "8GiB", want: 8 << 30},
		{in: "8gib", want: 8 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "6GB", want: 6e9},
		{in: "1.5G", want: 3 << 29},
		{in: "1073741824", want: 1 << 30},
		{in: " 2 GiB ", want: 2 << 30},
		{in: "", bad: true},
		{in: "-1GiB", bad: true},
		{in: "eight", bad: true},
		{in: "8XB", bad: true},
		{in: "0", bad: true},
	}
	for _, tc := range cases {
		got, err := ParseBytes(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseBytes(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// settingsRun runs a command shaped like ftchat's root (engine flags
// persistent, chat flags local) through LoadSettings in a clean
// environment with config.yaml holding cfgYAML, and returns the resolved
// Config, what was printed on stderr and the error.
func settingsRun(t *testing.T, cfgYAML string, env map[string]string, args ...string) (Config, string, error) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FTCHAT_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", dir)
	if cfgYAML != "" {
		os.MkdirAll(filepath.Join(dir, "ftchat"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, "ftchat", "config.yaml"), []byte(cfgYAML), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var cfg Config
	var stderr bytes.Buffer
	root := settingsRoot(&cfg, &stderr)
	root.SetArgs(args)
	err := root.Execute()
	return cfg, stderr.String(), err
}

// settingsRoot builds a command shaped like ftchat's root, and a config
// subcommand, whose runs resolve the settings into *cfg.
func settingsRoot(cfg *Config, stderr io.Writer) *cobra.Command {
	v := viper.New()
	var configFile string
	resolve := func(*cobra.Command, []string) error { *cfg = ConfigFrom(v); return nil }
	root := &cobra.Command{
		Use: "ftchat", SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return LoadSettings(v, cmd, configFile) },
		RunE:              resolve,
	}
	root.PersistentFlags().StringVar(&configFile, "config", "", "")
	EngineFlags(root.PersistentFlags())
	ChatFlags(root.Flags())
	root.AddCommand(&cobra.Command{Use: "config", RunE: resolve})
	root.SetOut(io.Discard)
	root.SetErr(stderr)
	return root
}

const yoloIgnored = "--yolo must be given on the command line of each run"

func TestYoloOnlyFromTheCommandLine(t *testing.T) {
	cases := []struct {
		name     string
		cfg      string
		env      map[string]string
		args     []string
		want     bool
		warnings int // lines saying the standing setting is ignored
	}{
		{"env and config file", "yolo: true\n", map[string]string{"FTCHAT_YOLO": "true"}, nil, false, 1},
		{"env", "", map[string]string{"FTCHAT_YOLO": "1"}, nil, false, 1},
		{"config file", "yolo: true\n", nil, nil, false, 1},
		{"subcommand", "yolo: true\n", map[string]string{"FTCHAT_YOLO": "true"}, []string{"config"}, false, 1},
		{"flag", "yolo: true\n", map[string]string{"FTCHAT_YOLO": "true"}, []string{"--yolo"}, true, 1},
		{"flag alone", "", nil, []string{"--yolo"}, true, 0},
		{"flag false beats env", "", map[string]string{"FTCHAT_YOLO": "true"}, []string{"--yolo=false"}, false, 1},
		{"nothing", "", nil, nil, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, stderr, err := settingsRun(t, tc.cfg, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Yolo != tc.want {
				t.Errorf("Yolo = %v, want %v", cfg.Yolo, tc.want)
			}
			if n := strings.Count(stderr, yoloIgnored); n != tc.warnings {
				t.Errorf("stderr says %q %d times, want %d:\n%s", yoloIgnored, n, tc.warnings, stderr)
			}
		})
	}
}

func TestBadSettingValuesAreRejected(t *testing.T) {
	cases := []struct {
		name string
		cfg  string
		env  map[string]string
		args []string
		want string // the error, with CFG for the config file's path
	}{
		{"env int", "", map[string]string{"FTCHAT_MAX_TOKENS": "abc"}, nil, "FTCHAT_MAX_TOKENS=abc: not an integer"},
		{"env bool", "", map[string]string{"FTCHAT_CONTINUE": "maybe"}, nil, "FTCHAT_CONTINUE=maybe: not true or false"},
		{"env float", "", map[string]string{"FTCHAT_TOP_P": "high"}, nil, "FTCHAT_TOP_P=high: not a number"},
		{"env uint", "", map[string]string{"FTCHAT_SEED": "-3"}, nil, "FTCHAT_SEED=-3: not a non-negative integer"},
		{"env size", "", map[string]string{"FTCHAT_GPU_MEMORY": "8 potatoes"}, nil, "FTCHAT_GPU_MEMORY=8 potatoes: not a size"},
		{"env range", "", map[string]string{"FTCHAT_MAX_TOKENS": "-5"}, nil, "FTCHAT_MAX_TOKENS=-5: below 0"},
		{"env NaN", "", map[string]string{"FTCHAT_TEMPERATURE": "NaN"}, nil, "FTCHAT_TEMPERATURE=NaN: not a finite number"},
		{"config float", "temperature: hot\n", nil, nil, `CFG: temperature: "hot" is not a number`},
		{"config int", "threads: abc\n", nil, nil, `CFG: threads: "abc" is not an integer`},
		{"config fraction for int", "ctx-size: 2.5\n", nil, nil, `CFG: ctx-size: "2.5" is not an integer`},
		{"config bool", "continue: maybe\n", nil, nil, `CFG: continue: "maybe" is not true or false`},
		{"config empty", "temperature:\n", nil, nil, `CFG: temperature: "" is not a number`},
		{"config list", "threads: [1, 2]\n", nil, nil, `CFG: threads: "[1 2]" is not a single value`},
		{"config size", "gpu-memory: 8 potatoes\n", nil, nil, `CFG: gpu-memory: "8 potatoes" is not a size`},
		{"config negative temperature", "temperature: -0.5\n", nil, nil, `CFG: temperature: "-0.5" is below 0`},
		{"config top-p", "top-p: 1.5\n", nil, nil, `CFG: top-p: "1.5" is outside 0..1`},
		{"config negative threads", "threads: -2\n", nil, nil, `CFG: threads: "-2" is below 0`},
		{"config repeat-penalty", "repeat-penalty: 0\n", nil, nil, `CFG: repeat-penalty: "0" is not above 0`},
		{"config checked for a subcommand", "temperature: hot\n", nil, []string{"config"}, `CFG: temperature: "hot" is not a number`},
		{"env beats a bad file", "threads: abc\n", map[string]string{"FTCHAT_THREADS": "x"}, nil, "FTCHAT_THREADS=x: not an integer"},
		{"flag range", "", nil, []string{"--temperature", "-1"}, "--temperature -1: below 0"},
		{"flag top-p", "", nil, []string{"--top-p", "2"}, "--top-p 2: outside 0..1"},
		{"flag max-tokens", "", nil, []string{"--max-tokens=-1"}, "--max-tokens -1: below 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := settingsRun(t, tc.cfg, tc.env, tc.args...)
			want := strings.ReplaceAll(tc.want, "CFG", filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "ftchat", "config.yaml"))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error = %v, want one containing %q", err, want)
			}
		})
	}
}

func TestGoodSettingValuesResolve(t *testing.T) {
	cfg, stderr, err := settingsRun(t, "temperature: 0\nthreads: 3\ntop-p: 1\ngpu-memory: 8GiB\ncontinue: true\nmax-tokens: 12.0\n",
		map[string]string{"FTCHAT_TOP_K": "0x10", "FTCHAT_MIN_P": "0.1"})
	if err != nil || stderr != "" {
		t.Fatalf("err %v, stderr %q", err, stderr)
	}
	if cfg.Sampling.Temperature != 0 || cfg.Engine.Threads != 3 || cfg.Sampling.TopP != 1 || cfg.Engine.GPUMemory != 8<<30 ||
		!cfg.Continue || cfg.MaxTokens != 12 || cfg.Sampling.TopK != 16 || cfg.Sampling.MinP != 0.1 {
		t.Fatalf("resolved %+v", cfg)
	}
}

func TestUnknownConfigKeysAreReported(t *testing.T) {
	cases := []struct {
		cfg, want string
	}{
		{"temprature: 0\n", `unknown key "temprature" (did you mean "temperature"?); it is ignored`},
		{"max_tokens: 5\n", `unknown key "max_tokens" (did you mean "max-tokens"?); it is ignored`},
		{"colour: blue\n", `unknown key "colour"; it is ignored`},
		{"config: other.yaml\n", `unknown key "config"`},
	}
	for _, tc := range cases {
		t.Run(tc.cfg, func(t *testing.T) {
			_, stderr, err := settingsRun(t, tc.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "ftchat", "config.yaml")
			if !strings.Contains(stderr, path+": "+tc.want) {
				t.Fatalf("stderr %q, want %q", stderr, tc.want)
			}
		})
	}
}

func TestConfigFileMustBeASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := safefiletest.Mkfifo(fifo); err != nil {
		t.Skip("no named pipes here:", err)
	}
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, bytes.Repeat([]byte("# padding\n"), 200<<10), 0o644)
	noExt := filepath.Join(dir, "settings")
	os.WriteFile(noExt, []byte("threads: 2\n"), 0o644)
	cases := []struct {
		name, file, want string
	}{
		{"fifo", fifo, "is a named pipe (FIFO), not a regular file"},
		{"directory", dir, "is a directory, not a regular file"},
		{"too large", big, "larger than the 1 MiB limit"},
		{"missing", filepath.Join(dir, "missing.yaml"), "missing.yaml: no such file"},
		{"no extension", noExt, `unknown format "": name it .yaml, .json or .toml`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, _, err := settingsRun(t, "", nil, "--config", tc.file); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error = %v, want one containing %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("reading the config file blocked")
			}
		})
	}
}

func TestShellEnvAllowlistSetting(t *testing.T) {
	cases := []struct {
		name string
		cfg  string
		env  map[string]string
		args []string
		want []string
	}{
		{"unset", "", nil, nil, nil},
		{"config file", "shell-env: \"AWS_PROFILE, MY_*\"\n", nil, nil, []string{"AWS_PROFILE", "MY_*"}},
		{"env", "", map[string]string{"FTCHAT_SHELL_ENV": "GOPATH,,GOFLAGS"}, nil, []string{"GOPATH", "GOFLAGS"}},
		{"flag over file", "shell-env: A\n", nil, []string{"--shell-env", "B"}, []string{"B"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := settingsRun(t, tc.cfg, tc.env, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.ShellEnv, tc.want) {
				t.Errorf("ShellEnv = %q, want %q", cfg.ShellEnv, tc.want)
			}
		})
	}
}

// TestSeedZeroDrawsARandomSeedPerRun: --seed 0 (the default) is documented
// as random, so each run gets its own nonzero seed (recorded for -p
// --verbose); a fixed seed is used as given.
func TestSeedZeroDrawsARandomSeedPerRun(t *testing.T) {
	cfgFor := func(seed string) Config {
		v := viper.New()
		v.Set("seed", seed)
		return ConfigFrom(v)
	}
	a, b := cfgFor("0"), cfgFor("0")
	if !a.SeedDrawn || a.Sampling.Seed == 0 || b.Sampling.Seed == 0 {
		t.Fatalf("seed 0: got %d (drawn %v) and %d, want two drawn nonzero seeds", a.Sampling.Seed, a.SeedDrawn, b.Sampling.Seed)
	}
	if a.Sampling.Seed == b.Sampling.Seed {
		t.Fatalf("two runs with seed 0 both got seed %d", a.Sampling.Seed)
	}
	if !strings.Contains(seedNote(a), fmt.Sprintf("--seed %d", a.Sampling.Seed)) {
		t.Errorf("seedNote(%d) = %q, want it to say how to repeat the run", a.Sampling.Seed, seedNote(a))
	}
	for range 2 {
		if c := cfgFor("42"); c.SeedDrawn || c.Sampling.Seed != 42 {
			t.Fatalf("seed 42: got %d (drawn %v), want 42 as given", c.Sampling.Seed, c.SeedDrawn)
		}
	}
}

// TestGPUMemoryOnTheCPUWarns: --gpu-memory does nothing on the CPU, so a
// run that lands there says so and points at --kv-tokens.
func TestGPUMemoryOnTheCPUWarns(t *testing.T) {
	cases := []struct {
		gpuMemory, device string
		warn              bool
	}{
		{"8GiB", "cpu (2 threads)", true},
		{"8GiB", "cpu (2 threads) — no GPU used: no libcuda.so.1", true},
		{"8GiB", "cuda:0 NVIDIA H200", false},
		{"", "cpu (2 threads)", false},
	}
	for _, tc := range cases {
		got := gpuMemoryIgnored(Config{GPUMemoryText: tc.gpuMemory}, tc.device)
		if tc.warn != (got != "") || tc.warn && (!strings.Contains(got, "--gpu-memory 8GiB is ignored on the CPU") || !strings.Contains(got, "--kv-tokens")) {
			t.Errorf("--gpu-memory %q on %q: warning %q", tc.gpuMemory, tc.device, got)
		}
	}
}
