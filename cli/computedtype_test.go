package cli

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// TestComputeDTypeSetting: --compute-dtype, FTCHAT_COMPUTE_DTYPE and the
// config file's compute-dtype reach engine.Options; a bad value is one
// error naming the flag, the value and the allowed values.
func TestComputeDTypeSetting(t *testing.T) {
	cases := []struct {
		name, cfg string
		env       map[string]string
		args      []string
		want      string // resolved value
		err       string // Validate's error, "" = valid
	}{
		{"default", "", nil, nil, "auto", ""},
		{"flag", "", nil, []string{"--compute-dtype", "fp16"}, "fp16", ""},
		{"env", "", map[string]string{"FTCHAT_COMPUTE_DTYPE": "bf16"}, nil, "bf16", ""},
		{"config file", "compute-dtype: fp16\n", nil, nil, "fp16", ""},
		{"flag beats file", "compute-dtype: bf16\n", nil, []string{"--compute-dtype=fp16"}, "fp16", ""},
		{"bad flag", "", nil, []string{"--compute-dtype", "fp32"}, "fp32",
			`--compute-dtype "fp32": supported values are auto (bf16 on sm_80 and newer, fp16 on sm_75), bf16 and fp16`},
		{"bad file", "compute-dtype: tf32\n", nil, nil, "tf32", `--compute-dtype "tf32": supported values are auto`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, stderr, err := settingsRun(t, tc.cfg, tc.env, tc.args...)
			if err != nil || stderr != "" {
				t.Fatalf("err %v, stderr %q", err, stderr)
			}
			if cfg.Engine.ComputeDType != tc.want {
				t.Fatalf("ComputeDType = %q, want %q", cfg.Engine.ComputeDType, tc.want)
			}
			err = cfg.Engine.Validate(engine.Hardware{CUDAReason: "no GPU in this test"})
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Count(err.Error(), "--compute-dtype") != 1 {
				t.Fatalf("Validate error %v, want one error containing %q", err, tc.err)
			}
		})
	}
}
