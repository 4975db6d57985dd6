// Command ftchat is a terminal chat and coding agent with its own LLM engine.
//
// This file builds the cobra root command; cli.LoadSettings wires it to
// viper. Precedence, highest first: flags, FTCHAT_* environment variables,
// the config file ($XDG_CONFIG_HOME/ftchat/config.yaml or --config),
// defaults. --yolo is a flag only.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl+C ends the process at once
	}()
	err := newRoot(viper.New()).ExecuteContext(ctx)
	os.Exit(exitCode(ctx, err, os.Stderr))
}

// exitCode prints err and returns the process status: 0, 130 when a
// signal (Ctrl+C) interrupted the run, as shells report it, ExitError's
// code, or 1.
func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	var exit cli.ExitError
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "ftchat: interrupted")
		return 130
	case errors.As(err, &exit):
		return exit.Code
	}
	fmt.Fprintln(stderr, "ftchat:", err)
	return 1
}

func newRoot(v *viper.Viper) *cobra.Command {
	var configFile string
	root := &cobra.Command{
		Use:   "ftchat [prompt]",
		Short: "Terminal chat and coding agent with an in-process LLM engine and an FP8 KV cache",
		Long: `ftchat runs a GGUF model in-process (CPU, or CUDA when a GPU is usable) and
chats with it in the terminal. The KV cache is paged; --kv-cache-dtype fp8_e4m3
stores it in 8 bits with a float32 scale per token and KV head, about half of
bf16, so longer conversations fit.

Piped input becomes context for the first message:
  cat main.go | ftchat "review this"
With -p (or when stdout is not a terminal) only the answer is printed.
A single word close to a command name (ftchat moddels) is taken for a typo;
send such a word as a prompt after --: ftchat -- moddels.

Settings come from flags, then FTCHAT_* environment variables (FTCHAT_KV_CACHE_DTYPE=fp8_e4m3),
then the config file, then defaults.`,
		Version:       cli.Version(),
		Args:          cli.PromptArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return cli.LoadSettings(v, cmd, configFile)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := cli.ConfigFrom(v)
			cfg.Files, _ = cmd.Flags().GetStringArray("file")
			cfg.Remote = cli.RemoteFrom(v)
			return cli.Chat(cmd.Context(), cfg, strings.Join(args, " "))
		},
	}
	root.SetVersionTemplate("{{.Version}}\n") // cobra's default repeats the name
	root.PersistentFlags().StringVar(&configFile, "config", "", "config file (default $XDG_CONFIG_HOME/ftchat/config.yaml)")
	cli.EngineFlags(root.PersistentFlags())
	cli.ChatFlags(root.Flags())
	cli.RemoteFlags(root.Flags())
	root.AddCommand(cli.Commands(v)...)
	return root
}
