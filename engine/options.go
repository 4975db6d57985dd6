package engine

// Options holds everything a user can set for the engine. Validate is the
// one place that rejects unsupported combinations.
type Options struct {
	Model        string // local GGUF path or a known model name
	Device       string // auto | cpu | cuda | cuda:N
	GPUMemory    int64  // device memory budget in bytes; 0 = what the device has
	KVDType      string // auto | bf16 | fp16 | fp8_e4m3 | fp8_e5m2
	KVScales     string // "" (dynamic) | "checkpoint" | path to a calibration file
	PageSize     int    // tokens per KV page; 0 = default
	ContextLen   int    // max tokens per sequence; 0 = the model's
	KVTokens     int    // CPU: pool size in tokens; 0 = ContextLen
	Threads      int    // CPU threads; 0 = all cores
	PrefillChunk int    // tokens per prefill step; 0 = default
}
