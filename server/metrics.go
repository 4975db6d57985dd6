package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// metrics writes the Prometheus text exposition format (version 0.0.4).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	es := s.cfg.Engine.Stats()
	bs := s.cfg.Batcher.Stats()
	var b strings.Builder
	metric := func(name, typ, help string, v any, labels ...string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		l := ""
		if len(labels) > 0 {
			var parts []string
			for i := 0; i+1 < len(labels); i += 2 {
				parts = append(parts, labels[i]+"="+strconv.Quote(labels[i+1]))
			}
			l = "{" + strings.Join(parts, ",") + "}"
		}
		switch x := v.(type) {
		case float64:
			fmt.Fprintf(&b, "%s%s %s\n", name, l, strconv.FormatFloat(x, 'g', -1, 64))
		default:
			fmt.Fprintf(&b, "%s%s %d\n", name, l, x)
		}
	}
	metric("ftchat_kv_info", "gauge", "KV cache configuration (value 1).", 1, "dtype", es.KVDType, "page_size", strconv.Itoa(es.PageSize), "model", s.cfg.ModelID, "device", es.Device)
	metric("ftchat_kv_pages_total", "gauge", "Pages in the KV pool.", es.PagesTotal)
	metric("ftchat_kv_pages_used", "gauge", "KV pages held by sequences (running and prefix cache).", es.PagesUsed)
	metric("ftchat_kv_pages_free", "gauge", "Free KV pages.", es.PagesTotal-es.PagesUsed)
	metric("ftchat_kv_tokens_capacity", "gauge", "Tokens the KV pool holds.", es.TokensCapacity)
	metric("ftchat_kv_tokens_used", "gauge", "Token slots holding K/V (shared prefixes once).", es.TokensUsed)
	metric("ftchat_kv_tokens_free", "gauge", "Token slots in free pages.", (es.PagesTotal-es.PagesUsed)*es.PageSize)
	metric("ftchat_kv_bytes_per_token", "gauge", "KV bytes per token in the pool's dtype (data and scales, all layers).", es.BytesPerToken)
	metric("ftchat_kv_pool_bytes", "gauge", "Bytes of the whole KV pool.", es.PoolBytes)
	metric("ftchat_kv_bytes_used", "gauge", "KV bytes holding tokens.", es.BytesUsed)
	metric("ftchat_kv_bytes_bf16_equivalent", "gauge", "What the used tokens would take in bf16.", es.BytesBF16)
	metric("ftchat_requests_running", "gauge", "Requests in the batch (prefilling or decoding).", bs.Running)
	metric("ftchat_requests_queued", "gauge", "Requests waiting for room in the KV pool.", bs.Queued)
	metric("ftchat_prefix_cache_sequences", "gauge", "Finished sequences kept for prefix reuse.", bs.Cached)
	metric("ftchat_requests_rejected_total", "counter", "Requests answered 429 (queue full).", bs.Rejected)
	metric("ftchat_preemptions_total", "counter", "Sequences sent back to the queue to free KV pages.", bs.Preempted)
	metric("ftchat_batch_steps_total", "counter", "Batched forward steps.", bs.Steps)
	metric("ftchat_batch_rows_total", "counter", "Token rows over all steps.", bs.StepRows)
	metric("ftchat_batch_multi_sequence_steps_total", "counter", "Steps that held two or more sequences.", bs.MultiSeqSteps)
	metric("ftchat_batch_decode_steps_total", "counter", "Steps that sampled at least one token.", bs.DecodeSteps)
	metric("ftchat_batch_sampled_together_total", "counter", "Tokens drawn by a step's one sampling call for all its rows (the rest were sampled row by row).", bs.SampledTogether)
	// Rows sampled per step: a histogram over the steps that sampled.
	fmt.Fprintf(&b, "# HELP ftchat_batch_sampled_rows Tokens sampled per step (steps that sampled at least one).\n# TYPE ftchat_batch_sampled_rows histogram\n")
	var cum int64
	for i, n := range bs.SampledRows {
		cum += n
		le := "+Inf"
		if i < len(engine.SampledRowsBuckets) {
			le = strconv.Itoa(engine.SampledRowsBuckets[i])
		}
		fmt.Fprintf(&b, "ftchat_batch_sampled_rows_bucket{le=%q} %d\n", le, cum)
	}
	fmt.Fprintf(&b, "ftchat_batch_sampled_rows_sum %d\nftchat_batch_sampled_rows_count %d\n", bs.DecodeTokens, bs.DecodeSteps)
	fmt.Fprintf(&b, "# HELP ftchat_batch_step_seconds_total Host time of the batched steps by phase (forward: issuing the model's ops; wait: the device finishing them, FTCHAT_BATCH_PROFILE=1 only; sample: drawing the tokens; other: the rest).\n# TYPE ftchat_batch_step_seconds_total counter\n")
	for _, ph := range []struct {
		name string
		d    time.Duration
	}{{"forward", bs.Times.Forward}, {"wait", bs.Times.Wait}, {"sample", bs.Times.Sample}, {"other", bs.Times.Other}} {
		fmt.Fprintf(&b, "ftchat_batch_step_seconds_total{phase=%q} %s\n", ph.name, strconv.FormatFloat(ph.d.Seconds(), 'g', -1, 64))
	}
	if g := bs.Graphs; g != (engine.GraphFlushes{}) { // the GPU backend
		fmt.Fprintf(&b, "# HELP ftchat_gpu_graph_flushes_total Recorded decode-step chunks by how they were issued (replay: a cached CUDA graph; capture: a new graph; direct: no graph).\n# TYPE ftchat_gpu_graph_flushes_total counter\n")
		for _, k := range []struct {
			kind string
			n    int
		}{{"replay", g.Replays}, {"capture", g.Captures}, {"direct", g.Direct}} {
			fmt.Fprintf(&b, "ftchat_gpu_graph_flushes_total{kind=%q} %d\n", k.kind, k.n)
		}
	}
	metric("ftchat_prefill_tokens_total", "counter", "Prompt tokens computed.", bs.PrefillTokens)
	metric("ftchat_prompt_tokens_cached_total", "counter", "Prompt tokens served from the KV cache (prefix reuse).", bs.ReusedTokens)
	metric("ftchat_decode_tokens_total", "counter", "Tokens generated.", bs.DecodeTokens)
	metric("ftchat_prefill_tokens_per_second", "gauge", "Prefill throughput over the last 10 s of steps.", bs.PrefillTokensPerS)
	metric("ftchat_decode_tokens_per_second", "gauge", "Aggregate decode throughput over the last 10 s of steps.", bs.DecodeTokensPerS)
	if es.StateSlots > 0 { // hybrid models: the recurrent-state slots beside the pool
		metric("ftchat_state_slots_total", "gauge", "Recurrent-state slots (hybrid models).", es.StateSlots)
		metric("ftchat_state_slots_live", "gauge", "State slots holding a sequence's live state.", es.StateSlotsLive)
		metric("ftchat_state_snapshots", "gauge", "State slots holding a prefix snapshot.", es.StateSnapshots)
		metric("ftchat_state_bytes_per_sequence", "gauge", "Bytes of one sequence's recurrent state.", es.StateBytesPerSeq)
		metric("ftchat_state_restores_total", "counter", "Requests resumed from a state snapshot (prefix sharing).", es.StateRestores)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}
