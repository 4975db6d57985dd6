package remote

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/ftchat/ftchat/engine"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// maxSamples bounds what one /metrics page may make us keep.
const maxSamples = 50000

// parseMetrics reads the Prometheus text format (0.0.4) tolerantly: a line
// it cannot read is skipped, not an error, since the status pane only wants
// a few known names and a server may add anything.
func parseMetrics(text []byte) []sample {
	var out []sample
	for len(text) > 0 && len(out) < maxSamples {
		var line []byte
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if s, ok := parseSample(string(line)); ok {
			out = append(out, s)
		}
	}
	return out
}

func isNameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// parseSample reads `name{label="value",...} value [timestamp]`.
func parseSample(line string) (sample, bool) {
	i := 0
	for i < len(line) && isNameChar(line[i], i == 0) {
		i++
	}
	if i == 0 {
		return sample{}, false
	}
	s := sample{name: line[:i]}
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		labels, n, ok := parseLabels(rest)
		if !ok {
			return sample{}, false
		}
		s.labels, rest = labels, rest[n:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return sample{}, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return sample{}, false
	}
	s.value = v
	return s, true
}

// parseLabels reads `{a="x",b="y\"z"}` from the start of s and returns the
// labels and the bytes consumed.
func parseLabels(s string) (map[string]string, int, bool) {
	labels := map[string]string{}
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return nil, 0, false
		}
		if s[i] == '}' {
			return labels, i + 1, true
		}
		start := i
		for i < len(s) && isNameChar(s[i], i == start) {
			i++
		}
		name := s[start:i]
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if name == "" || i+1 >= len(s) || s[i] != '=' {
			return nil, 0, false
		}
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) || s[i] != '"' {
			return nil, 0, false
		}
		i++
		var v strings.Builder
		for {
			if i >= len(s) {
				return nil, 0, false
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(s[i])
				}
			} else {
				v.WriteByte(c)
			}
			i++
		}
		if len(labels) < 64 {
			labels[name] = v.String()
		}
	}
}

// metricSet looks samples up by name, keeping those of one model where
// the server labels them by model (vLLM's model_name).
type metricSet struct {
	byName map[string][]sample
	model  string
}

func newMetricSet(samples []sample, model string) metricSet {
	m := metricSet{byName: map[string][]sample{}, model: model}
	for _, s := range samples {
		m.byName[s.name] = append(m.byName[s.name], s)
	}
	return m
}

// series is name's samples, narrowed to the model's when some carry its
// model_name label.
func (m metricSet) series(name string) []sample {
	all := m.byName[name]
	var mine []sample
	for _, s := range all {
		if s.labels["model_name"] == m.model {
			mine = append(mine, s)
		}
	}
	if len(mine) > 0 {
		return mine
	}
	return all
}

// sum adds name's finite, non-negative values; ok says there was one.
func (m metricSet) sum(name string) (float64, bool) {
	total, ok := 0.0, false
	for _, s := range m.series(name) {
		if math.IsNaN(s.value) || math.IsInf(s.value, 0) || s.value < 0 {
			continue
		}
		total += s.value
		ok = true
	}
	return total, ok
}

// mean is the average of name's usable values (a usage fraction per engine).
func (m metricSet) mean(name string) (float64, bool) {
	n := 0
	total := 0.0
	for _, s := range m.series(name) {
		if math.IsNaN(s.value) || math.IsInf(s.value, 0) || s.value < 0 {
			continue
		}
		total += s.value
		n++
	}
	if n == 0 {
		return 0, false
	}
	return total / float64(n), true
}

func (m metricSet) label(name, label string) string {
	for _, s := range m.series(name) {
		if v := s.labels[label]; v != "" {
			return clip(v, 40)
		}
	}
	return ""
}

// count converts a metric value to a count the status pane can show; a
// value beyond 2^50 is junk, not a count.
func count(v float64) int64 {
	if v < 0 || v > 1<<50 || math.IsNaN(v) {
		return 0
	}
	return int64(v + 0.5)
}

func labelInt(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > 1<<50 {
		return 0
	}
	return n
}

// kvStats are the KV pool numbers a server's metrics give.
type kvStats struct {
	source                string // "ftchat serve", "vLLM", "SGLang", "llama.cpp"
	dtype                 string
	pageSize              int
	pagesTotal, pagesUsed int
	tokensCap, tokensUsed int
	bytesPerToken         int
	poolBytes, bytesUsed  int64
	bytesBF16             int64
	running, queued       int // -1: not reported
}

// readKV picks the known metric families out of a /metrics page.
func readKV(samples []sample, model string) (kvStats, bool) {
	m := newMetricSet(samples, model)
	kv := kvStats{running: -1, queued: -1}
	setReqs := func(run, queue string) {
		if v, ok := m.sum(run); ok {
			kv.running = int(count(v))
		}
		if v, ok := m.sum(queue); ok {
			kv.queued = int(count(v))
		}
	}
	get := func(name string) int64 { v, _ := m.sum(name); return count(v) }
	switch {
	case len(m.byName["ftchat_kv_pages_total"]) > 0:
		kv.source = "ftchat serve"
		kv.dtype = m.label("ftchat_kv_info", "dtype")
		kv.pageSize = int(labelInt(m.label("ftchat_kv_info", "page_size")))
		kv.pagesTotal, kv.pagesUsed = int(get("ftchat_kv_pages_total")), int(get("ftchat_kv_pages_used"))
		kv.tokensCap, kv.tokensUsed = int(get("ftchat_kv_tokens_capacity")), int(get("ftchat_kv_tokens_used"))
		kv.bytesPerToken = int(get("ftchat_kv_bytes_per_token"))
		kv.poolBytes, kv.bytesUsed = get("ftchat_kv_pool_bytes"), get("ftchat_kv_bytes_used")
		kv.bytesBF16 = get("ftchat_kv_bytes_bf16_equivalent")
		setReqs("ftchat_requests_running", "ftchat_requests_queued")
	case len(m.byName["vllm:kv_cache_usage_perc"]) > 0 || len(m.byName["vllm:gpu_cache_usage_perc"]) > 0 || len(m.byName["vllm:cache_config_info"]) > 0:
		kv.source = "vLLM"
		kv.dtype = m.label("vllm:cache_config_info", "cache_dtype")
		blocks := labelInt(m.label("vllm:cache_config_info", "num_gpu_blocks"))
		bs := labelInt(m.label("vllm:cache_config_info", "block_size"))
		frac, ok := m.mean("vllm:kv_cache_usage_perc")
		if !ok {
			frac, _ = m.mean("vllm:gpu_cache_usage_perc")
		}
		frac = min(frac, 1)
		kv.pagesTotal, kv.pageSize = int(blocks), int(bs)
		kv.pagesUsed = int(count(frac * float64(blocks)))
		kv.tokensCap, kv.tokensUsed = int(blocks*bs), int(count(frac*float64(blocks*bs)))
		setReqs("vllm:num_requests_running", "vllm:num_requests_waiting")
	case len(m.byName["sglang:max_total_num_tokens"]) > 0 || len(m.byName["sglang:token_usage"]) > 0:
		kv.source = "SGLang"
		kv.tokensCap = int(get("sglang:max_total_num_tokens"))
		if used, ok := m.sum("sglang:num_used_tokens"); ok {
			kv.tokensUsed = int(count(used))
		} else if frac, ok := m.mean("sglang:token_usage"); ok {
			kv.tokensUsed = int(count(min(frac, 1) * float64(kv.tokensCap)))
		}
		setReqs("sglang:num_running_reqs", "sglang:num_queue_reqs")
	case len(m.byName["llamacpp:kv_cache_tokens"]) > 0 || len(m.byName["llamacpp:kv_cache_usage_ratio"]) > 0 || len(m.byName["llamacpp:requests_processing"]) > 0:
		// Newer llama-server versions dropped the two KV gauges; the
		// request counts remain.
		kv.source = "llama.cpp"
		kv.tokensUsed = int(get("llamacpp:kv_cache_tokens"))
		if frac, ok := m.mean("llamacpp:kv_cache_usage_ratio"); ok && frac > 0 && frac <= 1 {
			kv.tokensCap = int(count(float64(kv.tokensUsed) / frac))
		}
		setReqs("llamacpp:requests_processing", "llamacpp:requests_deferred")
	default:
		return kv, false
	}
	kv.tokensUsed = min(kv.tokensUsed, max(kv.tokensCap, 0))
	if kv.tokensCap == 0 {
		kv.tokensUsed = 0
	}
	return kv, true
}

// apply writes kv into st.
func (kv kvStats) apply(st *engine.Stats) {
	st.RemoteKV = kv.source
	if kv.dtype != "" {
		st.KVDType = kv.dtype
	}
	st.PageSize, st.PagesTotal, st.PagesUsed = kv.pageSize, kv.pagesTotal, kv.pagesUsed
	st.TokensCapacity, st.TokensUsed = kv.tokensCap, kv.tokensUsed
	st.BytesPerToken, st.PoolBytes, st.BytesUsed, st.BytesBF16 = kv.bytesPerToken, kv.poolBytes, kv.bytesUsed, kv.bytesBF16
	st.CapacityRatio = 0
	if kv.bytesUsed > 0 && kv.bytesBF16 > 0 {
		st.CapacityRatio = float64(kv.bytesBF16) / float64(kv.bytesUsed)
	}
	st.RequestsRunning, st.RequestsQueued = kv.running, kv.queued
}

// refreshMetrics fetches /metrics into the stats; a server without one
// (404), or one that fails, leaves them as they were. It never takes long.
func (e *Engine) refreshMetrics(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	req, err := e.newRequest(ctx, http.MethodGet, e.metricsURL(), nil)
	if err != nil {
		return
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	body, err := readCapped(resp.Body, maxMetricBytes, "/metrics")
	if err != nil {
		return
	}
	kv, ok := readKV(parseMetrics(body), e.model)
	if !ok {
		return
	}
	e.mu.Lock()
	kv.apply(&e.stats)
	e.mu.Unlock()
}
