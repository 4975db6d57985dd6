package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// FuzzConfigFile feeds mutated config.yaml files through LoadSettings on a
// command shaped like ftchat's root. Any file may be refused, but none may
// panic, and none may turn on auto-approval: --yolo is never a standing
// setting.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{
		"temperature: 0.7\nmax-tokens: 256\nkv-cache-dtype: fp8_e4m3\n",
		"yolo: true\ntemperature: hot\n",
		"threads: abc\ngpu-memory: 8 potatoes\n",
		"temprature: 1\n",
		"model: [1, 2]\nseed: {a: b}\n",
		"top-p: .nan\nmin-p: -.inf\n",
		"&a [*a, *a]\n",
		"ctx-size: 1000000000000000000000\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
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
		var stderr bytes.Buffer
		root.SetOut(io.Discard)
		root.SetErr(&stderr)
		root.SetArgs([]string{"--config", path})
		if err := root.Execute(); err != nil {
			return
		}
		if cfg.Yolo {
			t.Fatalf("a config file turned on --yolo:\n%s", b)
		}
	})
}
