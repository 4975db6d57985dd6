package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// TestMistypedSubcommandIsNotAPrompt: a single word close to a command
// name is an error suggesting the command; other prompts, and anything
// after --, still reach the chat.
func TestMistypedSubcommandIsNotAPrompt(t *testing.T) {
	cases := []struct {
		args []string
		want string // "" = a prompt
	}{
		{[]string{"moddels"}, `unknown command "moddels" for ftchat; did you mean models? (to send it as a prompt: ftchat -- moddels)`},
		{[]string{"Modles"}, "did you mean models?"},
		{[]string{"confg"}, "did you mean config?"},
		{[]string{"verison"}, "did you mean version?"},
		{[]string{"pul"}, "did you mean pull?"},
		{[]string{"tok"}, "did you mean tokenize?"},
		{[]string{"--", "moddels"}, ""},
		{[]string{"moddels", "please"}, ""},
		{[]string{"moddels please"}, ""},
		{[]string{"hello"}, ""},
		{[]string{"hi"}, ""},
		{[]string{"why?"}, ""},
		{[]string{"summarize"}, ""},
		{[]string{"-p", "explain"}, ""},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var prompt []string
			root := &cobra.Command{
				Use: "ftchat", Args: PromptArgs, SilenceUsage: true, SilenceErrors: true,
				RunE: func(_ *cobra.Command, args []string) error { prompt = args; return nil },
			}
			root.Flags().BoolP("print", "p", false, "")
			root.AddCommand(Commands(viper.New())...)
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			root.SetArgs(tc.args)
			err := root.Execute()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want a prompt, got error %v", err)
			case tc.want == "" && prompt == nil:
				t.Fatal("the prompt did not reach the chat")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
