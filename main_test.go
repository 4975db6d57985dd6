package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/cli"
	"github.com/ftchat/ftchat/internal/safefile/safefiletest"
)

// runConfig runs `ftchat config` with args and returns the printed settings.
func runConfig(t *testing.T, args ...string) map[string]string {
	t.Helper()
	root := newRoot(viper.New())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"config"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("config %v: %v\n%s", args, err, out.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(k, "#") {
			got[k] = v
		}
	}
	return got
}

func TestSettingsPrecedence(t *testing.T) {
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	t.Setenv("HOME", cfgDir)
	os.MkdirAll(filepath.Join(cfgDir, "ftchat"), 0o755)
	os.WriteFile(filepath.Join(cfgDir, "ftchat", "config.yaml"), []byte("kv-cache-dtype: fp8_e5m2\nthreads: 3\npage-size: 32\n"), 0o644)
	t.Setenv("FTCHAT_THREADS", "5")
	t.Setenv("FTCHAT_PAGE_SIZE", "")
	os.Unsetenv("FTCHAT_PAGE_SIZE")

	cases := []struct {
		name string
		args []string
		key  string
		want string
	}{
		{"default", nil, "device", "auto"},
		{"config file", nil, "kv-cache-dtype", "fp8_e5m2"},
		{"config file int", nil, "page-size", "32"},
		{"env beats file", nil, "threads", "5"},
		{"flag beats env", []string{"--threads", "7"}, "threads", "7"},
		{"flag beats file", []string{"--kv-cache-dtype", "fp8_e4m3"}, "kv-cache-dtype", "fp8_e4m3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := runConfig(t, tc.args...)[tc.key]; got != tc.want {
				t.Fatalf("%s = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

func TestExplicitConfigFileErrors(t *testing.T) {
	root := newRoot(viper.New())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"config", "--config", filepath.Join(t.TempDir(), "missing.yaml")})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("want an error naming the file, got %v", err)
	}
}

func TestHelpDocumentsEveryOption(t *testing.T) {
	root := newRoot(viper.New())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--model", "--device", "--gpu-memory", "--kv-cache-dtype", "--kv-scales", "--page-size",
		"--ctx-size", "--kv-tokens", "--threads", "--print", "--temperature", "--top-k", "--top-p", "--min-p",
		"--repeat-penalty", "--seed", "--max-tokens", "--continue", "--agent", "--yolo", "--config"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
}

// TestYoloNotFromEnvOrConfigFile runs the real root wiring: a standing
// FTCHAT_YOLO or "yolo: true" must not resolve to auto-approval.
func TestYoloNotFromEnvOrConfigFile(t *testing.T) {
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	t.Setenv("HOME", cfgDir)
	os.MkdirAll(filepath.Join(cfgDir, "ftchat"), 0o755)
	os.WriteFile(filepath.Join(cfgDir, "ftchat", "config.yaml"), []byte("yolo: true\n"), 0o644)
	t.Setenv("FTCHAT_YOLO", "true")
	if got := runConfig(t)["yolo"]; got == "true" {
		t.Fatalf("yolo = %q from the environment and config file, want it off without --yolo", got)
	}
}

// TestBadSettingsStopTheRun runs the real root wiring: a value its flag's
// type cannot hold, from the environment or the config file, is an error
// naming the variable or key, never a silent 0; an unknown key is reported.
func TestBadSettingsStopTheRun(t *testing.T) {
	cases := []struct {
		name, cfg, envKey, envVal string
		wantErr, wantStderr       string
	}{
		{"env int", "", "FTCHAT_THREADS", "abc", "FTCHAT_THREADS=abc: not an integer", ""},
		{"env size", "", "FTCHAT_GPU_MEMORY", "8 potatoes", "FTCHAT_GPU_MEMORY=8 potatoes: not a size", ""},
		{"config int", "threads: abc\n", "", "", `config.yaml: threads: "abc" is not an integer`, ""},
		{"config float", "temperature: hot\n", "", "", `config.yaml: temperature: "hot" is not a number`, ""},
		{"config range", "ctx-size: -1\n", "", "", `config.yaml: ctx-size: "-1" is below 0`, ""},
		{"unknown key", "temprature: 0\n", "", "", "", `config.yaml: unknown key "temprature" (did you mean "temperature"?)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfgDir := t.TempDir()
			t.Setenv("XDG_CONFIG_HOME", cfgDir)
			t.Setenv("HOME", cfgDir)
			os.MkdirAll(filepath.Join(cfgDir, "ftchat"), 0o755)
			os.WriteFile(filepath.Join(cfgDir, "ftchat", "config.yaml"), []byte(tc.cfg), 0o644)
			if tc.envKey != "" {
				t.Setenv(tc.envKey, tc.envVal)
			}
			root := newRoot(viper.New())
			var out, errOut bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errOut)
			root.SetArgs([]string{"config"})
			err := root.Execute()
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error = %v, want one containing %q\n%s", err, tc.wantErr, out.String())
			}
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(errOut.String(), tc.wantStderr) {
				t.Fatalf("stderr %q, want %q", errOut.String(), tc.wantStderr)
			}
		})
	}
}

// TestConfigFileNamedPipeDoesNotBlock: --config naming a FIFO or a huge
// file is refused at once instead of blocking or reading it all.
func TestConfigFileNamedPipeDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := safefiletest.Mkfifo(fifo); err != nil {
		t.Skip("no named pipes here:", err)
	}
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, bytes.Repeat([]byte("# padding\n"), 200<<10), 0o644)
	cases := []struct{ name, file, want string }{
		{"fifo", fifo, "not a regular file"},
		{"too large", big, "larger than the 1 MiB limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(viper.New())
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			root.SetArgs([]string{"config", "--config", tc.file})
			done := make(chan error, 1)
			go func() { done <- root.Execute() }()
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

// TestVersionFlagsAndCommand: --version, -v and `ftchat version` all print
// the same version line (version, commit, build date).
func TestVersionFlagsAndCommand(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		root := newRoot(viper.New())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		if got, want := out.String(), cli.Version()+"\n"; got != want {
			t.Errorf("%v printed %q, want %q", args, got, want)
		}
	}
}

// TestInterruptExitsWith130: a run stopped by Ctrl+C (SIGINT cancels the
// root context) exits 130 like other command-line tools, with one short
// line instead of "context canceled"; other errors keep their codes.
func TestInterruptExitsWith130(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name    string
		ctx     context.Context
		err     error
		code    int
		message string
	}{
		{"ok", context.Background(), nil, 0, ""},
		{"interrupted", canceled, fmt.Errorf("prefill: %w", context.Canceled), 130, "ftchat: interrupted\n"},
		{"canceled without a signal", context.Background(), context.Canceled, 1, "ftchat: context canceled\n"},
		{"exit error", context.Background(), cli.ExitError{Code: 3}, 3, ""},
		{"error", canceled, errors.New("boom"), 1, "ftchat: boom\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := exitCode(tc.ctx, tc.err, &stderr); code != tc.code || stderr.String() != tc.message {
				t.Fatalf("exit %d, stderr %q; want %d, %q", code, stderr.String(), tc.code, tc.message)
			}
		})
	}
}

// TestConfigShowsChatSettingsAndWhereItLooked: `ftchat config` lists the
// chat's settings too (temperature, system, max-tokens), never help, and
// without a config file says where it looked for one.
func TestConfigShowsChatSettingsAndWhereItLooked(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       map[string]string
		header     string
	}{
		{"defaults", "", nil, map[string]string{"temperature": "0.7", "max-tokens": "0", "system": "", "seed": "0 # a new random seed each run"},
			"# config file: none (looked for "},
		{"file and env", "system: be brief\nmax-tokens: 50\n", map[string]string{"FTCHAT_TEMPERATURE": "0.2"},
			map[string]string{"temperature": "0.2", "max-tokens": "50", "system": "be brief"}, "# config file: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfgDir := t.TempDir()
			t.Setenv("XDG_CONFIG_HOME", cfgDir)
			if tc.file != "" {
				os.MkdirAll(filepath.Join(cfgDir, "ftchat"), 0o755)
				os.WriteFile(filepath.Join(cfgDir, "ftchat", "config.yaml"), []byte(tc.file), 0o644)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			root := newRoot(viper.New())
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(io.Discard)
			root.SetArgs([]string{"config"})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			if !strings.HasPrefix(text, tc.header) || tc.file == "" && !strings.Contains(text, filepath.Join(cfgDir, "ftchat", "config.yaml")) {
				t.Errorf("header of\n%s\nwant %q naming the path", text, tc.header)
			}
			if strings.Contains(text, "help:") {
				t.Errorf("lists help:\n%s", text)
			}
			got := runConfig(t)
			for k, want := range tc.want {
				if v, ok := got[k]; !ok || v != want {
					t.Errorf("%s = %q (listed %v), want %q", k, v, ok, want)
				}
			}
		})
	}
}

// TestReadmeSaysHowToGetABinary: a new user runs the README's two set-up
// commands, then its "Use" examples: the README must warn that the first
// build takes minutes and say how to get the ftchat binary those examples
// call, before the first of them.
func TestReadmeSaysHowToGetABinary(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, setup := range []string{"```sh\ngo run .\n```", "```sh\nmake test\n```"} {
		if !strings.Contains(readme, setup) {
			t.Errorf("README lost its set-up command %q", setup)
		}
	}
	if flat := strings.Join(strings.Fields(readme), " "); !strings.Contains(flat, "first `go run .` compiles") || !strings.Contains(flat, "a few minutes") {
		t.Error("README does not say the first go run compiles for a few minutes")
	}
	firstExample := strings.Index(readme, "\nftchat ")
	for _, how := range []string{"`go install .`", "`make build`"} {
		if i := strings.Index(readme, how); i < 0 || i > firstExample {
			t.Errorf("README does not show %s before the first ftchat example", how)
		}
	}
}
