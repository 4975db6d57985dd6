package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/agent"
	"github.com/ftchat/ftchat/engine/remote"
	"github.com/ftchat/ftchat/ui"
)

// RemoteConfig points the chat, -p and the agent at an OpenAI-compatible
// server instead of loading a model (--engine).
type RemoteConfig struct {
	URL     string // API base; "" runs the model in-process
	APIKey  string
	Model   string // "" takes the first model the server lists
	Timeout time.Duration
	Tools   string // auto, native or inline
}

// RemoteFlags belong to the chat (root) command. --api-key is also a flag
// of `ftchat serve`, for the key it requires; here it is the key sent.
func RemoteFlags(f *pflag.FlagSet) {
	f.String("engine", "", "run against an OpenAI-compatible server at this API base instead of loading a model, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, llama-server, ollama, ftchat serve)")
	f.String("api-key", "", "--engine: the server's API key, sent as 'Authorization: Bearer KEY'")
	f.String("remote-model", "", "--engine: the model to ask the server for (default: the first one its /v1/models lists)")
	f.String("remote-tools", "auto", "--engine: how the agent's tools reach the model: auto (the API's tools field, in the prompt if the server refuses it) | native | inline (always in the prompt, for servers that drop the field)")
	f.Duration("remote-timeout", 5*time.Minute, "--engine: give up when the server sends nothing this long (before the response, between streamed tokens; connecting has its own 10s limit)")
}

func init() {
	settingChecks["remote-tools"] = func(s string) string {
		switch s {
		case "auto", "native", "inline":
			return ""
		}
		return "not auto, native or inline"
	}
	settingChecks["remote-timeout"] = func(s string) string {
		d, err := time.ParseDuration(s)
		if err == nil && d <= 0 {
			return "not above 0 (give a duration like 30s or 5m)"
		}
		return ""
	}
}

// remoteNoToolHint is the agent's note when a remote model answers its
// first task without a tool call: some servers take the tools field and
// drop it, which looks the same from here.
const remoteNoToolHint = "the model answered without calling a tool. If the server drops the tools field (llama-server without --jinja, " +
	"llama-cpp-python without a function-calling --chat_format), --remote-tools inline puts the tools in the prompt; small models rarely call tools either way"

// RemoteFrom reads the --engine settings.
func RemoteFrom(v *viper.Viper) RemoteConfig {
	return RemoteConfig{
		URL:     strings.TrimSpace(v.GetString("engine")),
		APIKey:  v.GetString("api-key"),
		Model:   v.GetString("remote-model"),
		Timeout: v.GetDuration("remote-timeout"),
		Tools:   v.GetString("remote-tools"),
	}
}

// chatSession is what the chat and the agent drive: *engine.Session or
// *remote.Session.
type chatSession interface {
	ui.Session
	agent.Generator
	Close()
}

// openedEngine is the engine of one run, in-process or remote.
type openedEngine struct {
	eng  ui.Engine // also the agent's Fitter
	sess chatSession
	name string // the model's name
	info string // the /model line
	done func()
}

func (o *openedEngine) Close() {
	o.sess.Close()
	o.done()
}

// openEngine loads the model, or with --engine connects to the server
// (and loads nothing).
func openEngine(ctx context.Context, cfg Config, quiet bool) (*openedEngine, error) {
	if cfg.Remote.URL != "" {
		if w := ignoredWithEngine(cfg); w != "" {
			fmt.Fprintln(os.Stderr, w)
		}
		r, err := remote.Dial(ctx, remote.Options{URL: cfg.Remote.URL, APIKey: cfg.Remote.APIKey, Model: cfg.Remote.Model, Timeout: cfg.Remote.Timeout, Tools: cfg.Remote.Tools})
		if err != nil {
			return nil, err
		}
		info := fmt.Sprintf("%s on the remote engine %s", r.Model(), r.URL())
		if n := r.ContextLen(); n > 0 {
			info += fmt.Sprintf(" · context %d tokens", n)
		}
		if ms := r.Models(); len(ms) > 1 {
			info += fmt.Sprintf(" · it also serves %s (--remote-model)", strings.Join(others(ms, r.Model(), 8), ", "))
		}
		info += " · the server owns the KV cache; top-k, min-p and the repeat penalty are not sent (not in the OpenAI API)"
		return &openedEngine{eng: r, sess: r.NewSession(), name: r.Model(), info: info, done: r.Close}, nil
	}
	eng, err := loadEngine(ctx, cfg, quiet)
	if err != nil {
		return nil, err
	}
	info := eng.Info()
	return &openedEngine{
		eng: eng, sess: eng.NewSession(), name: info.Name, info: ui.DescribeModel(info), done: func() { eng.Close() },
	}, nil
}

// ignoredWithEngine warns about the model settings --engine leaves
// unused (they would otherwise be dropped without a word).
func ignoredWithEngine(cfg Config) string {
	var ignored []string
	if cfg.Engine.Model != "" {
		ignored = append(ignored, "--model (the server's model is --remote-model)")
	}
	if cfg.Engine.KVDType != "" && cfg.Engine.KVDType != "auto" {
		ignored = append(ignored, "--kv-cache-dtype (the server owns its KV cache)")
	}
	if cfg.Engine.Device != "" && cfg.Engine.Device != "auto" {
		ignored = append(ignored, "--device")
	}
	if cfg.GPUMemoryText != "" {
		ignored = append(ignored, "--gpu-memory")
	}
	if len(ignored) == 0 {
		return ""
	}
	return "ftchat: warning: with --engine no model is loaded here; ignoring " + strings.Join(ignored, ", ")
}

// others is models without self, at most n.
func others(models []string, self string, n int) []string {
	var out []string
	for _, m := range models {
		if m != self {
			out = append(out, m)
		}
	}
	if len(out) > n {
		out = append(out[:n:n], "…")
	}
	return out
}
