package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// -c and -t keep ftchat's meanings (--continue, --temperature); the
// llama.cpp habits -c N and -t N are refused with the flag to use, and
// the help says so.
func TestLlamaCppShortFlagMixups(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" = accepted
	}{
		{[]string{"-c", "4096"}, "--ctx-size 4096 here"},
		{[]string{"-c", "--", "4096"}, ""},
		{[]string{"-c", "hello"}, ""},
		{[]string{"-c"}, ""},
		{[]string{"-t", "8"}, "--threads 8 here"},
		{[]string{"--temperature", "16", "hi"}, "--threads 16 here"},
		{[]string{"-t", "0.2", "hi"}, ""},
		{[]string{"-t", "2"}, ""},
		{[]string{"-t", "3.5"}, ""},
		{[]string{"-n", "64", "4096"}, ""},
	}
	for _, tc := range tests {
		cmd := &cobra.Command{Use: "ftchat", Args: PromptArgs, RunE: func(*cobra.Command, []string) error { return nil }, SilenceUsage: true, SilenceErrors: true}
		ChatFlags(cmd.Flags())
		cmd.SetArgs(tc.args)
		err := cmd.Execute()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	f := (&cobra.Command{}).Flags()
	ChatFlags(f)
	for flag, want := range map[string]string{"continue": "--ctx-size", "temperature": "--threads"} {
		if u := f.Lookup(flag).Usage; !strings.Contains(u, want) {
			t.Errorf("--%s help %q does not point at %s", flag, u, want)
		}
	}
}
