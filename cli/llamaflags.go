package cli

import (
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"
)

// Issue 15 item 17 asked for llama.cpp's short flags where they do not
// clash. -n (--max-tokens) and -f (a file, here attached as context) mean
// what they mean there; -c and -t do not: here -c is --continue (as in
// chat CLIs) and -t --temperature, while llama.cpp's -c is the context size
// (--ctx-size here) and -t the thread count (--threads). They stay: both
// were taken before a decision was asked for, and changing a short flag's
// meaning silently breaks whoever uses it. What is caught instead is the
// llama.cpp habit that would otherwise pass unnoticed: `ftchat -c 4096`
// (continue the last chat and send "4096") and `ftchat -t 8` (sample at
// temperature 8, noise).

// llamaCppMixup returns an error for a command line that reads as
// llama.cpp's -c N or -t N; args are the prompt words.
func llamaCppMixup(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	if c := f.Lookup("continue"); c != nil && c.Changed && c.Value.String() == "true" &&
		len(args) == 1 && cmd.ArgsLenAtDash() != 0 && isDigits(args[0]) {
		return fmt.Errorf("-c is --continue in ftchat, so %s would be sent as a prompt; llama.cpp's -c (the context size) is --ctx-size %s here (to send the number as a prompt: ftchat -c -- %s)", args[0], args[0], args[0])
	}
	if t := f.Lookup("temperature"); t != nil && t.Changed {
		var v float64
		if _, err := fmt.Sscan(t.Value.String(), &v); err == nil && v >= 3 && v == math.Trunc(v) {
			return fmt.Errorf("-t/--temperature %g: -t is the temperature in ftchat (useful range 0 to 2); llama.cpp's -t (threads) is --threads %g here", v, v)
		}
	}
	return nil
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
