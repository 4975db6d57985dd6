package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/hub"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/server"
)

// ServeConfig is the settings of `ftchat serve` beside the engine's.
type ServeConfig struct {
	Host, APIKey, ModelID string
	Port                  int
	Parallel, Queue       int
	PrefillChunk          int
	PrefixCache           int
}

func serveCmd(v *viper.Viper) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [--host 127.0.0.1] [--port 8080] [--api-key KEY]",
		Short: "Serve the model over HTTP: OpenAI- and Anthropic-compatible API with continuous batching",
		Long: `serve answers HTTP requests with the model, batching the requests that run
at the same time into shared forward steps over the paged KV cache:
  POST /v1/chat/completions    OpenAI chat completions (stream or not, tools,
                               response_format json_object / json_schema)
  POST /v1/messages            Anthropic messages (stream or not, tools)
  POST /v1/messages/count_tokens
  GET  /v1/models, /health, /metrics (Prometheus)
It listens on the loopback interface unless --host says otherwise; with
--api-key (or FTCHAT_API_KEY) every endpoint but /health needs the key.
The engine flags (--model, --device, --kv-cache-dtype, --kv-tokens, ...)
are the chat's; hybrid models (Qwen3.5/3.6) get 2 x --parallel state slots
unless --state-slots says otherwise. docs/serve.md describes the API and
its limits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			sc := ServeConfig{
				Host: v.GetString("host"), Port: v.GetInt("port"), APIKey: v.GetString("api-key"),
				ModelID: v.GetString("model-id"), Parallel: v.GetInt("parallel"), Queue: v.GetInt("queue"),
				PrefillChunk: v.GetInt("prefill-chunk"), PrefixCache: v.GetInt("prefix-cache"),
			}
			return Serve(cmd.Context(), ConfigFrom(v), sc, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.String("host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface: set --api-key then)")
	f.Int("port", 8080, "TCP port (0 = any free port; the address is printed)")
	f.String("api-key", "", "require this key as 'Authorization: Bearer KEY' or 'x-api-key: KEY' (also FTCHAT_API_KEY)")
	f.String("model-id", "", "the model's name in the API (default: the model file's name)")
	f.Int("parallel", engine.DefaultMaxRunning, "requests decoded together in one batched step")
	f.Int("queue", engine.DefaultMaxQueue, "requests that may wait for room in the KV pool; more are answered 429 (0 = none wait)")
	f.Int("prefill-chunk", engine.DefaultBatchPrefillChunk, "prompt tokens computed per batched step (a long prompt shares steps with the decoders)")
	f.Int("prefix-cache", engine.DefaultPrefixCache, "finished conversations kept in the KV pool for prefix reuse (0 = none)")
	return cmd
}

func (sc ServeConfig) check() error {
	switch {
	case sc.Port < 0 || sc.Port > 65535:
		return fmt.Errorf("--port %d: must be 0 to 65535", sc.Port)
	case sc.Parallel < 1 || sc.Parallel > 256:
		return fmt.Errorf("--parallel %d: must be 1 to 256", sc.Parallel)
	case sc.Queue < 0 || sc.Queue > 4096:
		return fmt.Errorf("--queue %d: must be 0 to 4096", sc.Queue)
	case sc.PrefillChunk < 1 || sc.PrefillChunk > 8192:
		return fmt.Errorf("--prefill-chunk %d: must be 1 to 8192", sc.PrefillChunk)
	case sc.PrefixCache < 0 || sc.PrefixCache > 4096:
		return fmt.Errorf("--prefix-cache %d: must be 0 to 4096", sc.PrefixCache)
	}
	return nil
}

// Serve loads the model and serves the API until ctx is done.
func Serve(ctx context.Context, cfg Config, sc ServeConfig, stderr io.Writer) error {
	if err := cfg.Err(); err != nil {
		return err
	}
	if err := sc.check(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(sc.Host, strconv.Itoa(sc.Port)))
	if err != nil {
		return fmt.Errorf("--host %s --port %d: %w", sc.Host, sc.Port, err)
	}
	defer ln.Close()
	if cfg.Engine.StateSlots == 0 {
		// Hybrid models: a live state slot per parallel sequence and as many
		// for the snapshots that prefix sharing resumes from (ignored by
		// attention-only models).
		cfg.Engine.StateSlots = min(2*sc.Parallel, engine.MaxStateSlots)
	}
	eng, err := loadEngine(ctx, cfg, true)
	if err != nil {
		return err
	}
	defer eng.Close()
	queue := sc.Queue
	if queue == 0 {
		queue = -1
	}
	prefix := sc.PrefixCache
	if prefix == 0 {
		prefix = -1
	}
	b := eng.NewBatcher(engine.BatcherOptions{MaxRunning: sc.Parallel, MaxQueue: queue, PrefillChunk: sc.PrefillChunk, PrefixCache: prefix})
	defer b.Close()
	info := eng.Info()
	id := sc.ModelID
	if id == "" {
		id = strings.TrimSuffix(filepath.Base(info.Path), ".gguf")
	}
	aliases := []string{info.Name, cfg.Engine.Model, filepath.Base(info.Path)}
	for _, k := range hub.KnownModels() {
		if k.File == filepath.Base(info.Path) {
			aliases = append(aliases, k.Name)
			aliases = append(aliases, k.Aliases...)
		}
	}
	srv := server.New(server.Config{Engine: eng, Batcher: b, ModelID: id, Aliases: aliases, APIKey: sc.APIKey, Version: version, Log: stderr})
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	st := eng.Stats()
	state := ""
	if st.StateSlots > 0 {
		state = fmt.Sprintf(", recurrent state %d slots of %s", st.StateSlots, kvcache.FormatBytes(st.StateBytesPerSeq))
	}
	fmt.Fprintf(stderr, "ftchat: serving %s (%s, KV %s, %d tokens, %d in parallel%s) on http://%s\n",
		id, st.Device, st.KVDType, st.TokensCapacity, b.Options().MaxRunning, state, ln.Addr())
	if !isLoopback(sc.Host) && sc.APIKey == "" {
		fmt.Fprintf(stderr, "ftchat: warning: --host %s without --api-key: anyone who can reach this address can use the model\n", sc.Host)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.Close() // ends the running requests, so Shutdown does not wait for them
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
