package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
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
		var cfg Config
		root := settingsRoot(&cfg, io.Discard)
		root.SetArgs([]string{"--config", path})
		if err := root.Execute(); err != nil {
			return
		}
		if cfg.Yolo {
			t.Fatalf("a config file turned on --yolo:\n%s", b)
		}
	})
}
