package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// bench speed on the real SmolLM2 file (CPU): with the warm-up (the
// default) stderr says so before the first measurement and stdout still
// has one row per measurement; --warmup=false skips it.
func TestBenchSpeedWarmup(t *testing.T) {
	path := testmodel.Require(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	run := func(args ...string) (stdout, stderr string) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := runBench(&out, &errOut, append([]string{"speed", "--model", path, "--device", "cpu", "--depths", "0,32",
			"--dtypes", "bf16", "--prefill", "16", "--decode", "2"}, args...)...)
		if err != nil {
			t.Fatalf("bench speed %v: %v\n%s", args, err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	rows := func(stdout string) int { return strings.Count(stdout, "\nbf16 ") }
	out, errs := run()
	w := strings.Index(errs, "bench speed: bf16 warm-up (untimed)…")
	m := strings.Index(errs, "bench speed: bf16 at depth 0 (1 of 2)…")
	if w < 0 || m < 0 || w > m {
		t.Errorf("stderr %q: want the warm-up line before the first measurement's", errs)
	}
	if rows(out) != 2 {
		t.Errorf("stdout %q: want a header and 2 rows", out)
	}
	out, errs = run("--warmup=false")
	if strings.Contains(errs, "warm-up") || rows(out) != 2 {
		t.Errorf("--warmup=false: stderr %q, stdout %q", errs, out)
	}
}

// runBench runs `ftchat bench ARGS` through a root shaped like ftchat's
// (settings, engine flags), stdout and stderr to the writers given.
func runBench(stdout, stderr io.Writer, args ...string) error {
	v := viper.New()
	var configFile string
	root := &cobra.Command{Use: "ftchat", SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return LoadSettings(v, cmd, configFile) }}
	root.PersistentFlags().StringVar(&configFile, "config", "", "")
	EngineFlags(root.PersistentFlags())
	root.AddCommand(benchCmd(v))
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(append([]string{"bench"}, args...))
	return root.Execute()
}
