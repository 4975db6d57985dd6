// Package server is ftchat's HTTP API: OpenAI-compatible chat completions,
// Anthropic-compatible messages, model listing, health and Prometheus
// metrics, all served by one engine.Batcher (continuous batching over the
// engine's paged KV pool). docs/serve.md describes the API.
package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// Limits bound what one request may ask for; zero fields take the defaults.
type Limits struct {
	MaxBodyBytes int64 // request body (default 8 MiB)
	MaxMessages  int   // messages per request (default 2048)
	MaxTools     int   // tool definitions per request (default 128)
	MaxStops     int   // stop sequences (default 16; OpenAI's own limit is 4)
	MaxStopBytes int   // bytes per stop sequence (default 256)
}

// Default limits.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultMaxMessages  = 2048
	DefaultMaxTools     = 128
	DefaultMaxStops     = 16
	DefaultMaxStopBytes = 256
)

func (l Limits) withDefaults() Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = DefaultMaxMessages
	}
	if l.MaxTools <= 0 {
		l.MaxTools = DefaultMaxTools
	}
	if l.MaxStops <= 0 {
		l.MaxStops = DefaultMaxStops
	}
	if l.MaxStopBytes <= 0 {
		l.MaxStopBytes = DefaultMaxStopBytes
	}
	return l
}

// Config is what a Server serves.
type Config struct {
	Engine  *engine.Engine
	Batcher *engine.Batcher
	// ModelID is the model's name in the API (/v1/models, responses).
	// Requests may name it, or one of Aliases.
	ModelID string
	Aliases []string
	// APIKey, when set, is required as "Authorization: Bearer KEY" or
	// "x-api-key: KEY" on every endpoint but /health.
	APIKey string
	// RetryAfter is the Retry-After of a 429 (default 1s).
	RetryAfter time.Duration
	Limits     Limits
	// Version goes into /health and system_fingerprint.
	Version string
	// Log, when set, gets one line per request: method, path, status,
	// duration.
	Log io.Writer
}

// Server handles the API. Make one with New.
type Server struct {
	cfg     Config
	lim     Limits
	mux     *http.ServeMux
	started time.Time
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	s := &Server{cfg: cfg, lim: cfg.Limits.withDefaults(), mux: http.NewServeMux(), started: time.Now()}
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.HandleFunc("GET /metrics", s.auth(openAIStyle, s.metrics))
	s.mux.HandleFunc("GET /v1/models", s.auth(openAIStyle, s.models))
	s.mux.HandleFunc("GET /v1/models/{id}", s.auth(openAIStyle, s.model))
	s.mux.HandleFunc("POST /v1/chat/completions", s.auth(openAIStyle, s.chatCompletions))
	s.mux.HandleFunc("POST /v1/messages", s.auth(anthropicStyle, s.messages))
	s.mux.HandleFunc("POST /v1/messages/count_tokens", s.auth(anthropicStyle, s.countTokens))
	return s
}

// ServeHTTP implements http.Handler. Unknown paths and methods get a JSON
// error in the style of the path's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Log != nil {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		t0 := time.Now()
		defer func() {
			fmt.Fprintf(s.cfg.Log, "ftchat: %s %s %d %s\n", r.Method, r.URL.Path, sw.status, time.Since(t0).Round(time.Millisecond))
		}()
		w = sw
	}
	s.route(w, r)
}

// statusWriter records the status; Unwrap keeps http.ResponseController's
// Flush working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		style := openAIStyle
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			style = anthropicStyle
		}
		// The mux answers 405 for a known path with another method.
		rec := &statusProbe{}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeError(w, style, &apiError{Status: http.StatusMethodNotAllowed, Message: fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path)})
			return
		}
		writeError(w, style, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no endpoint %s %s (see docs/serve.md)", r.Method, r.URL.Path)})
		return
	}
	s.mux.ServeHTTP(w, r) // sets the path values
}

// statusProbe captures the status the mux's fallback handler would write.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header {
	if p.header == nil {
		p.header = http.Header{}
	}
	return p.header
}
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }

type apiStyle int

const (
	openAIStyle apiStyle = iota
	anthropicStyle
)

// auth checks the API key in constant time.
func (s *Server) auth(style apiStyle, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.APIKey != "" {
			key := r.Header.Get("x-api-key")
			if a := r.Header.Get("Authorization"); key == "" && a != "" {
				if k, ok := strings.CutPrefix(a, "Bearer "); ok {
					key = strings.TrimSpace(k)
				}
			}
			if subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.APIKey)) != 1 {
				msg := "invalid API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
				if key == "" {
					msg = "missing API key: this server needs 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
				}
				writeError(w, style, &apiError{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: msg})
				return
			}
		}
		h(w, r)
	}
}

// apiError is an error answer; writeError shapes it for either API.
type apiError struct {
	Status     int
	Code       string // OpenAI error code (context_length_exceeded, model_not_found...)
	Param      string
	Message    string
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func (e *apiError) openAIType() string {
	switch e.Status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "server_busy"
	}
	if e.Status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

func (e *apiError) anthropicType() string {
	switch e.Status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if e.Status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (e *apiError) body(style apiStyle) any {
	if style == anthropicStyle {
		return map[string]any{"type": "error", "error": map[string]any{"type": e.anthropicType(), "message": e.Message}}
	}
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	return map[string]any{"error": map[string]any{"message": e.Message, "type": e.openAIType(), "param": param, "code": code}}
}

func writeError(w http.ResponseWriter, style apiStyle, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, e.Status, e.body(style))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"encoding the response failed","type":"server_error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// engineError maps an error from Submit (or the first event) to an answer.
func (s *Server) engineError(err error, maxTokens int) *apiError {
	var cf *engine.ContextFullError
	var pf *kvcache.PoolFullError
	var mt *engine.MaxTokensError
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: s.cfg.RetryAfter,
			Message: fmt.Sprintf("the server is busy: %d requests are running and the wait queue (%d) is full; retry after %s",
				s.cfg.Batcher.Options().MaxRunning, s.cfg.Batcher.Options().MaxQueue, s.cfg.RetryAfter)}
	case errors.Is(err, engine.ErrBatcherClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down"}
	case errors.As(err, &mt):
		return contextError(mt.Prompt, mt.MaxTokens, mt.ContextLen)
	case errors.As(err, &cf):
		return contextError(cf.Need-1, maxTokens, cf.ContextLen)
	case errors.As(err, &pf):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "context_length_exceeded",
			Message: fmt.Sprintf("the prompt needs %d tokens but the server's whole KV pool holds %d (%s); start the server with a larger --kv-tokens (CPU) or --gpu-memory, or --kv-cache-dtype fp8_e4m3",
				pf.Asked, pf.Capacity, kvcache.PairName(pf.DType, pf.VDType))}
	}
	return &apiError{Status: http.StatusBadRequest, Message: err.Error()}
}

func contextError(prompt, maxTokens, ctx int) *apiError {
	msg := fmt.Sprintf("this model's maximum context length is %d tokens, but the prompt has %d tokens", ctx, prompt)
	if maxTokens > 0 {
		msg = fmt.Sprintf("this model's maximum context length is %d tokens, but %d tokens were requested (%d in the messages, %d for the completion); reduce the messages or max_tokens",
			ctx, prompt+maxTokens, prompt, maxTokens)
	}
	return &apiError{Status: http.StatusBadRequest, Code: "context_length_exceeded", Param: "messages", Message: msg}
}

// readBody reads a body of at most the limit (any Content-Type: curl -d
// sends form-urlencoded; the body must parse as JSON all the same).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.lim.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("request body larger than %d bytes", s.lim.MaxBodyBytes)}
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return b, nil
}

// resolveModel checks the request's model name.
func (s *Server) resolveModel(name string) *apiError {
	if name == "" {
		return badRequest("model", "model is required (this server has %q)", s.cfg.ModelID)
	}
	if name == s.cfg.ModelID {
		return nil
	}
	for _, a := range s.cfg.Aliases {
		if strings.EqualFold(name, a) {
			return nil
		}
	}
	return &apiError{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("model %q not found: this server has %q", name, s.cfg.ModelID)}
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	st := s.cfg.Batcher.Stats()
	writeJSON(w, http.StatusOK, map[string]any{
		"status": "ok", "model": s.cfg.ModelID, "version": s.cfg.Version,
		"running": st.Running, "queued": st.Queued,
		"uptime_seconds": int64(time.Since(s.started).Seconds()),
	})
}

func (s *Server) modelObject() map[string]any {
	info := s.cfg.Engine.Info()
	return map[string]any{
		"id": s.cfg.ModelID, "object": "model", "created": s.started.Unix(), "owned_by": "ftchat",
		"context_length": info.ContextLen, "arch": info.Arch, "device": s.cfg.Engine.Stats().Device,
		"kv_cache_dtype": s.cfg.Engine.Stats().KVDType,
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{s.modelObject()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if err := s.resolveModel(r.PathValue("id")); err != nil {
		writeError(w, openAIStyle, err)
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}
