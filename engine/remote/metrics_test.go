package remote

import (
	"math"
	"strings"
	"testing"
)

// A vLLM (v1 engine) /metrics page, cut to the families that matter and
// two models' series, as its Prometheus exporter writes them.
const vllmPage = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_running{engine="0",model_name="other"} 9.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.25
vllm:kv_cache_usage_perc{engine="0",model_name="other"} 0.9
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 1234.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",gpu_memory_utilization="0.9",model_name="Qwen/Qwen3-8B",num_gpu_blocks="4000"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 12.0
`

const sglangPage = `# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m"} 200000.0
sglang:num_used_tokens{model_name="m"} 50000.0
sglang:token_usage{model_name="m"} 0.25
sglang:num_running_reqs{model_name="m"} 2.0
sglang:num_queue_reqs{model_name="m"} 0.0
`

const llamacppPage = `# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.5
llamacpp:kv_cache_tokens 1024
llamacpp:requests_processing 1
llamacpp:requests_deferred 0
`

const ftchatPage = `# HELP ftchat_kv_info KV cache configuration (value 1).
# TYPE ftchat_kv_info gauge
ftchat_kv_info{dtype="fp8_e4m3",page_size="16",model="SmolLM2",device="cpu (2 threads)"} 1
ftchat_kv_pages_total 256
ftchat_kv_pages_used 10
ftchat_kv_tokens_capacity 4096
ftchat_kv_tokens_used 150
ftchat_kv_bytes_per_token 23040
ftchat_kv_pool_bytes 94371840
ftchat_kv_bytes_used 3456000
ftchat_kv_bytes_bf16_equivalent 6912000
ftchat_requests_running 2
ftchat_requests_queued 1
`

func TestReadKV(t *testing.T) {
	for _, tc := range []struct {
		name, page, model string
		want              kvStats
	}{
		{"vLLM", vllmPage, "Qwen/Qwen3-8B", kvStats{source: "vLLM", dtype: "fp8", pageSize: 16, pagesTotal: 4000, pagesUsed: 1000, tokensCap: 64000, tokensUsed: 16000, running: 3, queued: 1}},
		{"SGLang", sglangPage, "m", kvStats{source: "SGLang", tokensCap: 200000, tokensUsed: 50000, running: 2, queued: 0}},
		{"llama.cpp", llamacppPage, "x", kvStats{source: "llama.cpp", tokensCap: 2048, tokensUsed: 1024, running: 1, queued: 0}},
		{"llama.cpp without KV gauges", "llamacpp:prompt_tokens_total 6886\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n", "x", kvStats{source: "llama.cpp", running: 2, queued: 1}},
		{"ftchat", ftchatPage, "SmolLM2", kvStats{source: "ftchat serve", dtype: "fp8_e4m3", pageSize: 16, pagesTotal: 256, pagesUsed: 10,
			tokensCap: 4096, tokensUsed: 150, bytesPerToken: 23040, poolBytes: 94371840, bytesUsed: 3456000, bytesBF16: 6912000, running: 2, queued: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := readKV(parseMetrics([]byte(tc.page)), tc.model)
			if !ok || got != tc.want {
				t.Fatalf("readKV:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, ok := readKV(parseMetrics([]byte("go_goroutines 12\nprocess_cpu_seconds_total 3\n")), "m"); ok {
		t.Error("a page without KV metrics was read as one")
	}
}

func TestParseMetrics(t *testing.T) {
	page := "# comment\n" +
		`a_b{x="1",y="q\"uo\\te\n"} 2.5 1700000000` + "\n" +
		"plain 7\n" +
		"nan NaN\n" +
		"inf +Inf\n" +
		"  spaced{ x = \"1\" , } 3 \n" +
		"bad{x=1} 3\n" + // unquoted label: skipped
		"novalue\n" +
		"two 1 2 3\n" +
		"trailing 4" // no final newline
	got := parseMetrics([]byte(page))
	names := []string{}
	for _, s := range got {
		names = append(names, s.name)
	}
	if strings.Join(names, ",") != "a_b,plain,nan,inf,spaced,trailing" {
		t.Fatalf("samples %v", names)
	}
	if got[0].labels["y"] != "q\"uo\\te\n" || got[0].value != 2.5 || !math.IsNaN(got[2].value) || !math.IsInf(got[3].value, 1) || got[4].labels["x"] != "1" {
		t.Errorf("values %+v", got)
	}
}

// FuzzParseMetrics: any page parses without a panic into bounded samples,
// and readKV's numbers stay in range.
func FuzzParseMetrics(f *testing.F) {
	for _, p := range []string{vllmPage, sglangPage, llamacppPage, ftchatPage, `x{a="` + "\\" + `"} 1`, "vllm:kv_cache_usage_perc -5\nvllm:cache_config_info{num_gpu_blocks=\"99999999999999999\",block_size=\"16\"} 1"} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		samples := parseMetrics(page)
		if len(samples) > maxSamples {
			t.Fatalf("%d samples", len(samples))
		}
		kv, _ := readKV(samples, "m")
		if kv.tokensUsed < 0 || kv.tokensCap < 0 || kv.tokensUsed > kv.tokensCap || kv.pagesUsed < 0 || kv.pagesTotal < 0 || kv.running < -1 || kv.queued < -1 {
			t.Fatalf("out of range: %+v", kv)
		}
	})
}
