package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/hub"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// Commands are the subcommands of the root command.
func Commands(v *viper.Viper) []*cobra.Command {
	return []*cobra.Command{
		pullCmd(), modelsCmd(), tokenizeCmd(), versionCmd(), devCmd(),
		benchCmd(v), calibrateCmd(v), configCmd(v), serveCmd(v),
	}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the ftchat version, commit and build date (also --version, -v)",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintln(cmd.OutOrStdout(), Version())
		},
	}
}

func tokenizeCmd() *cobra.Command {
	var tokFile string
	var asJSON, plain bool
	cmd := &cobra.Command{
		Use:   "tokenize [--model M | --tokenizer FILE] [--json] [--plain]",
		Short: "Read text on stdin and print its token ids (and count)",
		Long: `tokenize reads stdin and prints the token ids of the text in the model's
vocabulary, e.g. to see how many tokens a file takes:
  ftchat tokenize --json < main.go
--tokenizer takes a Hugging Face tokenizer.json, a GGUF file or a checkpoint
directory (its tokenizer.json); so does --model.
Special-token text such as <|im_start|> in the input becomes the control
token; --plain (or --no-specials) encodes it as ordinary text, as ftchat
encodes message contents. The count goes to stderr ("1,234 tokens"), or
with --json into the JSON; on a terminal, stderr also shows progress.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var tok *tokenizer.Tokenizer
			var err error
			if tokFile != "" {
				tok, err = loadTokenizerAt(tokFile)
			} else {
				var path string
				model, _ := cmd.Flags().GetString("model")
				path, err = hub.Resolve(cmd.Context(), model, newProgressPrinter(cmd.ErrOrStderr()).update)
				if err == nil {
					tok, err = loadTokenizerAt(path)
				}
			}
			if err != nil {
				return err
			}
			return tokenizeStdin(cmd, tok, tokenizer.PrintOptions{JSON: asJSON, PlainSpecials: plain})
		},
	}
	cmd.Flags().StringVar(&tokFile, "tokenizer", "", "tokenizer.json, GGUF file or checkpoint directory (instead of --model)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON with ids and count")
	cmd.Flags().BoolVar(&plain, "plain", false, "encode special-token text in the input as plain text")
	cmd.Flags().BoolVar(&plain, "no-specials", false, "same as --plain")
	return cmd
}

func devCmd() *cobra.Command {
	dev := &cobra.Command{
		Use:    "dev",
		Short:  "Developer tools (random-weight models, file inspection)",
		Hidden: false,
	}
	var preset, typ, out string
	var seed uint64
	gen := &cobra.Command{
		Use:   "gen-model --preset P [--type T] [--seed S] -o FILE",
		Short: "Write a random-weight GGUF of a real model shape (for speed and GPU-vs-CPU tests)",
		Long:  "Presets: " + strings.Join(synth.Presets(), ", "),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("-o FILE is required")
			}
			t := gguf.Q4_K
			if typ != "" {
				var err error
				if t, err = gguf.ParseType(typ); err != nil {
					return err
				}
			}
			spec, err := synth.Preset(preset, t)
			if err != nil {
				return err
			}
			bar := newProgressPrinter(cmd.ErrOrStderr())
			defer bar.done()
			return synth.Write(out, spec, seed, func(done, total int) {
				bar.update("writing "+out, int64(done), int64(total))
			})
		},
	}
	gen.Flags().StringVar(&preset, "preset", "", "model shape: "+strings.Join(synth.Presets(), ", "))
	gen.Flags().StringVar(&typ, "type", "", "weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, NVFP4 with per-tensor/per-expert .scale tensors; default Q4_K)")
	gen.Flags().Uint64Var(&seed, "seed", 1, "random seed")
	gen.Flags().StringVarP(&out, "output", "o", "", "output GGUF file")

	inspect := &cobra.Command{
		Use:   "inspect FILE.gguf",
		Short: "Print a GGUF file's metadata and tensors",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gguf.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "GGUF v%d, %d metadata keys, %d tensors, alignment %d\n", f.Version, len(f.Keys()), len(f.Tensors), f.Alignment)
			for _, k := range f.Keys() {
				v, _ := f.Value(k)
				s := fmt.Sprint(v)
				if len(s) > 100 {
					s = s[:100] + "..."
				}
				fmt.Fprintf(w, "  %s = %s\n", k, s)
			}
			for _, t := range f.Tensors {
				fmt.Fprintf(w, "  %-40s %-6s %v\n", t.Name, t.Type, t.Dims)
			}
			return nil
		},
	}
	dev.AddCommand(gen, inspect, genHFCmd())
	return dev
}

func configCmd(v *viper.Viper) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective settings (flags > FTCHAT_* env > config file > defaults)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			writeSettings(cmd.OutOrStdout(), v, cmd.Root())
			return nil
		},
	}
}

// writeSettings prints every setting of the root command (the chat's and
// the engine's) as it resolves, and which config file was read or where
// ftchat looked for one.
func writeSettings(w io.Writer, v *viper.Viper, root *cobra.Command) {
	if f := v.ConfigFileUsed(); f != "" {
		fmt.Fprintf(w, "# config file: %s\n", f)
	} else if dir, err := os.UserConfigDir(); err == nil {
		fmt.Fprintf(w, "# config file: none (looked for %s, or .json/.toml; --config FILE names one)\n", filepath.Join(dir, "ftchat", "config.yaml"))
	} else {
		fmt.Fprintf(w, "# config file: none (no config directory: %v; --config FILE names one)\n", err)
	}
	flags := map[string]*pflag.Flag{}
	add := func(f *pflag.Flag) { flags[f.Name] = f }
	root.Flags().VisitAll(add)
	root.PersistentFlags().VisitAll(add)
	for _, name := range sortedKeys(flags) {
		f := flags[name]
		if name == "help" || name == "config" || name == "version" {
			continue
		}
		if _, ok := commandLineOnly[name]; ok {
			fmt.Fprintf(w, "%s: %s # command line only\n", name, f.DefValue)
			continue
		}
		// Flags this command does not have (the chat's) are not bound:
		// viper knows their env or file value, else the flag's default.
		val := f.DefValue
		if v.IsSet(name) {
			val = fmt.Sprint(v.Get(name))
		}
		if name == "seed" && val == "0" {
			val += " # a new random seed each run"
		}
		fmt.Fprintf(w, "%s: %s\n", name, val)
	}
}

// PromptArgs is the root command's argument check: the words are a prompt,
// unless they are a single word that looks like a mistyped subcommand
// (`ftchat moddels`), which would otherwise load a model to answer it.
// Words after `--` are always a prompt.
func PromptArgs(cmd *cobra.Command, args []string) error {
	if err := llamaCppMixup(cmd, args); err != nil {
		return err
	}
	if len(args) != 1 || cmd.ArgsLenAtDash() == 0 {
		return nil
	}
	if name := mistypedCommand(cmd, args[0]); name != "" {
		return fmt.Errorf("unknown command %q for ftchat; did you mean %s? (to send it as a prompt: ftchat -- %s)", args[0], name, args[0])
	}
	return nil
}

// mistypedCommand is the subcommand of root that word is a likely typo of,
// or "". Short words need a closer match (an edit distance under half the
// name's length, at most 2) so that prompts such as "hello" (2 edits from
// "help") stay prompts; a prefix of 3 or more letters ("mod") also counts.
func mistypedCommand(root *cobra.Command, word string) string {
	w := strings.ToLower(word)
	for _, r := range w {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return "" // not a command-like word: a prompt
		}
	}
	best, bestD := "", 3
	for _, c := range root.Commands() {
		if c.Hidden || !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			d := editDistance(w, name)
			if len(w) >= 3 && strings.HasPrefix(name, w) {
				d = min(d, 1)
			}
			if d < bestD && 2*d < len(name) {
				best, bestD = c.Name(), d
			}
		}
	}
	return best
}

// loadTokenizerAt reads a GGUF's or a tokenizer.json's vocabulary, or the
// tokenizer.json of a Hugging Face checkpoint directory (what --model DIR
// loads for chat).
func loadTokenizerAt(path string) (*tokenizer.Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		p := filepath.Join(path, "tokenizer.json")
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s is a directory without a tokenizer.json: give a GGUF file, a tokenizer.json or a checkpoint directory saved with its (fast) tokenizer", path)
		}
		return tokenizer.FromJSONFile(p)
	}
	return tokenizer.Load(path)
}
