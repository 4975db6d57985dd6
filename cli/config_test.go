package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
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
	v := viper.New()
	var cfg Config
	var configFile string
	root := &cobra.Command{
		Use: "ftchat", SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return LoadSettings(v, cmd, configFile) },
		RunE:              func(*cobra.Command, []string) error { cfg = ConfigFrom(v); return nil },
	}
	root.PersistentFlags().StringVar(&configFile, "config", "", "")
	EngineFlags(root.PersistentFlags())
	ChatFlags(root.Flags())
	root.AddCommand(&cobra.Command{Use: "config", RunE: func(*cobra.Command, []string) error { cfg = ConfigFrom(v); return nil }})
	var stderr bytes.Buffer
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.Execute()
	return cfg, stderr.String(), err
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

func TestConfigFileMustBeASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
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
