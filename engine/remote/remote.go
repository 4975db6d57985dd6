// Package remote runs ftchat's chat, print mode and agent against an
// OpenAI-compatible server (ftchat --engine URL): vLLM, SGLang,
// llama-server, llama-cpp-python, ollama or another `ftchat serve`. It
// offers the same Stats / Generate surface as the in-process engine, so the
// UI and the agent drive either one; answers stream over SSE from
// POST /chat/completions, and the status pane's KV numbers come from the
// server's Prometheus /metrics when it has one.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// Options configure a connection to a server.
type Options struct {
	// URL is the API base, e.g. http://127.0.0.1:8000/v1; a bare
	// http://host:port gets /v1.
	URL string
	// APIKey, when set, is sent as "Authorization: Bearer KEY".
	APIKey string
	// Model is the model to ask for; "" takes the first one /models lists.
	Model string
	// Timeout bounds every wait on the server: connecting, the response
	// headers, and the silence between two streamed chunks (default 5m: a
	// long prompt's prefill on a busy server sends nothing for a while).
	Timeout time.Duration
	// ConnectTimeout bounds the TCP (and TLS) connection (default 10s).
	ConnectTimeout time.Duration
	// MaxRetryWait is the longest Retry-After a 429 is waited out for,
	// once (default 30s); a longer one is reported at once.
	MaxRetryWait time.Duration
	// Tools is how the agent's tools reach the model: "auto" (or "") sends
	// them in the tools field and falls back to "inline" when the server
	// refuses it; "native" never falls back; "inline" always writes them
	// into the system prompt (for a server that takes the field but drops it).
	Tools string
	// HTTPClient replaces the default client (tests); its timeouts are
	// then the caller's.
	HTTPClient *http.Client
}

// Size caps on what the server sends: everything read from it is untrusted.
const (
	maxJSONBytes   = 4 << 20  // /models, an error body, a non-streamed answer
	maxEventBytes  = 4 << 20  // one SSE line
	maxStreamBytes = 64 << 20 // one streamed answer, all events
	maxArgsBytes   = 1 << 20  // one tool call's arguments
	maxMetricBytes = 8 << 20  // /metrics
	metricsTimeout = 3 * time.Second
)

// ErrRemoteCache is what the engine-only commands (/kvdtype) get: the
// server owns its KV cache.
var ErrRemoteCache = errors.New("the remote server owns its KV cache")

// Engine is a connection to one server and model. It is safe for
// concurrent use.
type Engine struct {
	base    *url.URL
	baseStr string
	key     string
	model   string
	models  []string // what /models listed
	ctxLen  int      // the model's context length when /models says (vLLM, ftchat serve), else 0
	hc      *http.Client
	timeout time.Duration
	maxWait time.Duration

	mu         sync.Mutex
	stats      engine.Stats
	noTools    bool // inline the tools: the server refused the tools parameter, or --remote-tools inline
	nativeOnly bool // --remote-tools native: a refusal is an error
}

// Dial checks that the server answers and picks the model: GET /models,
// then a first look at /metrics.
func Dial(ctx context.Context, opt Options) (*Engine, error) {
	base, err := parseBase(opt.URL)
	if err != nil {
		return nil, err
	}
	e := &Engine{base: base, baseStr: base.String(), key: opt.APIKey, timeout: opt.Timeout, maxWait: opt.MaxRetryWait, hc: opt.HTTPClient}
	switch opt.Tools {
	case "", "auto":
	case "native":
		e.nativeOnly = true
	case "inline":
		e.noTools = true
	default:
		return nil, fmt.Errorf("--remote-tools %q: want auto, native or inline", opt.Tools)
	}
	if e.timeout <= 0 {
		e.timeout = 5 * time.Minute
	}
	if e.maxWait <= 0 {
		e.maxWait = 30 * time.Second
	}
	if e.hc == nil {
		connect := opt.ConnectTimeout
		if connect <= 0 {
			connect = 10 * time.Second
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = connect
		tr.ResponseHeaderTimeout = e.timeout
		e.hc = &http.Client{Transport: tr}
	}
	if err := e.listModels(ctx, opt.Model); err != nil {
		return nil, err
	}
	e.stats = engine.Stats{
		Model: e.model, Device: "remote " + base.Host, KVDType: "remote", Remote: e.baseStr,
		RequestsRunning: -1, RequestsQueued: -1,
	}
	e.refreshMetrics(ctx)
	return e, nil
}

// parseBase checks the --engine URL and completes a bare host with /v1.
func parseBase(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("--engine: no URL given; want the server's API base, e.g. http://127.0.0.1:8000/v1")
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--engine %q: not an http(s) URL; want the server's API base, e.g. http://127.0.0.1:8000/v1", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("--engine %q: put the key in --api-key (or FTCHAT_API_KEY), not in the URL", u.Redacted())
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimRight(u.Path, "/")
	if u.Path == "" {
		u.Path = "/v1"
	}
	return u, nil
}

// endpoint is base + "/" + name (chat/completions, models).
func (e *Engine) endpoint(name string) string { return e.baseStr + "/" + name }

// metricsURL is /metrics at the server's root: where vLLM, SGLang,
// llama-server and ftchat serve all put it, whatever the API path.
func (e *Engine) metricsURL() string {
	u := *e.base
	u.Path = "/metrics"
	return u.String()
}

func (e *Engine) newRequest(ctx context.Context, method, url string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.key != "" {
		req.Header.Set("Authorization", "Bearer "+e.key)
	}
	return req, nil
}

// listModels reads /models and settles e.model.
func (e *Engine) listModels(ctx context.Context, want string) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	req, err := e.newRequest(ctx, http.MethodGet, e.endpoint("models"), nil)
	if err != nil {
		return err
	}
	resp, err := e.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := readCapped(resp.Body, maxJSONBytes, "the model list")
	if err != nil {
		return e.readErr(err)
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("the engine at %s has no %s (404): --engine wants the API base, usually ending in /v1", e.baseStr, e.endpoint("models"))
		}
		return e.statusErr(resp, body)
	}
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			MaxModelLen   int    `json:"max_model_len"`  // vLLM
			ContextLength int    `json:"context_length"` // ftchat serve
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("the engine at %s answered %s with something that is not an OpenAI model list (%v): is --engine an OpenAI-compatible API base?", e.baseStr, e.endpoint("models"), err)
	}
	for _, m := range list.Data {
		if m.ID == "" {
			continue
		}
		e.models = append(e.models, m.ID)
		if (want == "" && e.model == "") || m.ID == want {
			e.model, e.ctxLen = m.ID, max(m.MaxModelLen, m.ContextLength, 0)
		}
	}
	switch {
	case len(e.models) == 0 && want == "":
		return fmt.Errorf("the engine at %s lists no models; name one with --remote-model", e.baseStr)
	case want != "" && e.model == "":
		if len(e.models) > 0 {
			return fmt.Errorf("the engine at %s has no model %q; it serves: %s (--remote-model)", e.baseStr, want, strings.Join(clipList(e.models, 10), ", "))
		}
		e.model = want // an empty list is not proof: let the server decide
	}
	return nil
}

func clipList(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}

// do sends req, turning a failure to connect into one clear message.
func (e *Engine) do(req *http.Request) (*http.Response, error) {
	resp, err := e.hc.Do(req)
	if err == nil {
		return resp, nil
	}
	if ctxErr := req.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			return nil, fmt.Errorf("the engine at %s did not answer within %s (--remote-timeout)", e.baseStr, e.timeout)
		}
		return nil, ctxErr
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, fmt.Errorf("the engine at %s did not answer in time: %v (--remote-timeout)", e.baseStr, unwrapURL(err))
	}
	return nil, fmt.Errorf("cannot reach the engine at %s: %v; is the server running, and is --engine right?", e.baseStr, unwrapURL(err))
}

// unwrapURL drops url.Error's "Get "...": " prefix, which repeats the URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// readErr words an error while reading a response body.
func (e *Engine) readErr(err error) error {
	var tl *tooLargeError
	if errors.As(err, &tl) {
		return fmt.Errorf("the engine at %s: %w", e.baseStr, err)
	}
	return fmt.Errorf("reading from the engine at %s: %w", e.baseStr, unwrapURL(err))
}

type tooLargeError struct {
	what  string
	limit int64
}

func (t *tooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than %d MiB; refused (is --engine an LLM server?)", t.what, t.limit>>20)
}

// readCapped reads r to EOF, failing past limit bytes.
func readCapped(r io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &tooLargeError{what, limit}
	}
	return b, nil
}

// serverMessage is the message of an OpenAI-style ({"error": {"message"}}),
// FastAPI-style ({"detail"}) or plain error body.
func serverMessage(body []byte) string {
	var v struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
		Msg    string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return clip(inner.Message, 300)
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return clip(s, 300)
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return clip(s, 300)
		case len(v.Detail) > 0:
			return clip(string(v.Detail), 300)
		case v.Msg != "":
			return clip(v.Msg, 300)
		}
	}
	return clip(strings.TrimSpace(string(body)), 300)
}

func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// statusErr is the one message for a refused request.
func (e *Engine) statusErr(resp *http.Response, body []byte) error {
	msg := serverMessage(body)
	if msg != "" {
		msg = ": " + msg
	}
	code := resp.StatusCode
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		hint := "set --api-key (or FTCHAT_API_KEY)"
		if e.key != "" {
			hint = "check --api-key (or FTCHAT_API_KEY)"
		}
		return fmt.Errorf("the engine at %s refused the request (%d %s)%s; %s", e.baseStr, code, http.StatusText(code), msg, hint)
	case code == http.StatusNotFound:
		return fmt.Errorf("the engine at %s: %s not found (404)%s; it serves: %s (--remote-model)", e.baseStr, resp.Request.URL.Path, msg, strings.Join(clipList(e.models, 10), ", "))
	case code == http.StatusTooManyRequests:
		return fmt.Errorf("the engine at %s is busy (429 Too Many Requests)%s; try again later", e.baseStr, msg)
	}
	return fmt.Errorf("the engine at %s answered %d %s%s", e.baseStr, code, http.StatusText(code), msg)
}

// Model is the model the requests name.
func (e *Engine) Model() string { return e.model }

// Models are the models the server listed.
func (e *Engine) Models() []string { return e.models }

// URL is the API base requests go to.
func (e *Engine) URL() string { return e.baseStr }

// ContextLen is the model's context length when the server says (vLLM,
// ftchat serve), else 0.
func (e *Engine) ContextLen() int { return e.ctxLen }

// Stats is the latest of what the server reported and the client measured.
func (e *Engine) Stats() engine.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// CountTokens estimates: the remote's tokenizer is not here, and the
// servers do not agree on a tokenize endpoint. About 4 bytes per token for
// English and code; the server's usage gives the real counts after a turn.
func (e *Engine) CountTokens(text string) int { return (len(text) + 3) / 4 }

// FitCheck lets every request through: the server knows its context and
// cache, and says so (with its numbers) when a request does not fit.
func (e *Engine) FitCheck(engine.Request) error { return nil }

// SwitchKV refuses: the cache is the server's.
func (e *Engine) SwitchKV(ctx context.Context, dtype string, progress func(done, total int)) error {
	return e.KVFixed()
}

// KVFixed says why /kvdtype cannot change the cache, and how the server's
// own settings do.
func (e *Engine) KVFixed() error {
	kv := "its own dtype"
	if s := e.Stats(); s.KVDType != "" && s.KVDType != "remote" {
		kv = s.KVDType
	}
	return fmt.Errorf("/kvdtype: %w at %s (%s); ftchat cannot change it: start the server with its KV cache option (vLLM, SGLang: --kv-cache-dtype fp8; llama-server: --cache-type-k/-v q8_0; ftchat serve: --kv-cache-dtype fp8_e4m3); nothing changed",
		ErrRemoteCache, e.baseStr, kv)
}

// NewSession opens a conversation. The server is stateless per request;
// its prefix cache (if any) does what the local session's KV reuse does.
func (e *Engine) NewSession() *Session { return &Session{e: e} }

// Close releases idle connections.
func (e *Engine) Close() { e.hc.CloseIdleConnections() }

// Session is one conversation on the server.
type Session struct{ e *Engine }

// Reset does nothing: the server holds no state between requests.
func (s *Session) Reset() {}

// Close does nothing; it matches *engine.Session.
func (s *Session) Close() {}
