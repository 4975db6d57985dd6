package hfmodel_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/model"
)

// TestRopeScaling: rope_parameters / rope_scaling of config.json become
// the GGUF rope keys model.ReadConfig reads (Llama 3 factors, linear),
// and an unsupported type is refused by name.
func TestRopeScaling(t *testing.T) {
	for _, c := range []struct {
		name  string
		key   string
		rope  map[string]any
		check func(r model.Rope) error
		err   string
	}{
		{"llama3", "rope_parameters", map[string]any{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
			"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
			func(r model.Rope) error {
				want := model.Llama3FreqFactors(8, 500000, 8, 1, 4, 8192)
				if r.Base != 500000 || fmt.Sprint(r.FreqFactors) != fmt.Sprint(want) {
					return fmt.Errorf("base %v factors %v, want %v", r.Base, r.FreqFactors, want)
				}
				return nil
			}, ""},
		{"linear (old rope_scaling)", "rope_scaling", map[string]any{"type": "linear", "factor": 4.0},
			func(r model.Rope) error {
				if r.Scale != 0.25 {
					return fmt.Errorf("scale %v", r.Scale)
				}
				return nil
			}, ""},
		{"yarn", "rope_parameters", map[string]any{"rope_type": "yarn", "factor": 4.0}, nil, `rope scaling "yarn" is not supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := copyDir(t, "llama")
			editConfig(t, d, func(m map[string]any) { delete(m, "rope_parameters"); m[c.key] = c.rope })
			f, err := hfmodel.Open(d)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := model.ReadConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.check(cfg.Rope); err != nil {
				t.Fatal(err)
			}
		})
	}
}
