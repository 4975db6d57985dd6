// Package engine is ftchat's public engine API: Load a model, open
// Sessions, Generate streamed events, read Stats. The UI and the agent talk
// to the engine only through this package.
package engine

import (
	"time"

	"github.com/ftchat/ftchat/engine/chat"
)

// Message, ToolCall and Tool are the chat package's types: the engine
// passes conversations to the chat template as they are.
type (
	// Message is one chat turn (role system, user, assistant or tool).
	Message = chat.Message
	// ToolCall is a function call the model asked for.
	ToolCall = chat.ToolCall
	// Tool is a function definition passed to the model through its chat template.
	Tool = chat.Tool
)

// Request is one generation: the full conversation so far (the session
// reuses whatever prefix it already has in the KV cache).
type Request struct {
	Messages  []Message
	Tools     []Tool
	MaxTokens int // 0: until EOS, stop string, or the pool is full
	Sampling  Sampling
}

// Sampling parameters; zero Temperature means greedy.
type Sampling struct {
	Temperature   float32
	TopK          int
	TopP          float32
	MinP          float32
	RepeatPenalty float32 // 1 or 0: off
	RepeatLastN   int
	Seed          uint64
	Stop          []string
}

// EventKind tells which fields of an Event are set.
type EventKind int

const (
	EventText      EventKind = iota // Text: a decoded delta of the answer
	EventThinking                   // Text: a delta inside <think>...</think>
	EventToolCall                   // ToolCall: a complete parsed call
	EventToolError                  // Text: the raw text of a malformed call; Err: what is wrong
	EventStats                      // Stats: periodic update while working
	EventProgress                   // Progress: prefill progress (done/total tokens)
	EventDone                       // Stop: why generation ended; Stats final
	EventError                      // Err
)

// Event is one item of a Generate stream.
type Event struct {
	Kind     EventKind
	Text     string
	ToolCall *ToolCall
	Stats    Stats
	Done     int // EventProgress: tokens prefilled so far
	Total    int // EventProgress: tokens to prefill
	Stop     StopReason
	Err      error
}

// StopReason says why a generation ended.
type StopReason string

const (
	StopEOS       StopReason = "eos"
	StopString    StopReason = "stop"
	StopMaxTokens StopReason = "length"
	StopCancelled StopReason = "cancelled"
	StopPoolFull  StopReason = "pool_full"
	StopToolCall  StopReason = "tool_call"
)

// Stats is the single source of every number the UI shows.
type Stats struct {
	Model    string
	Device   string // "cpu (2 threads)", "cuda:0 NVIDIA H200"
	KVDType  string // resolved dtype name, e.g. "fp8_e4m3"
	PageSize int

	PagesTotal, PagesUsed int
	TokensCapacity        int // PagesTotal * PageSize
	TokensUsed            int // tokens held by live sessions
	BytesPerToken         int // data + scales, all attention layers
	BytesUsed             int64
	BytesBF16             int64   // what TokensUsed would take in bf16
	CapacityRatio         float64 // bf16 bytes per token / this dtype's
	// FP8TokensCapacity is what the same pool bytes would hold in
	// fp8_e4m3, what /kvdtype fp8_e4m3 gives (0 when already fp8_e4m3).
	FP8TokensCapacity int

	BudgetBytes  int64 // device memory budget (0: unlimited / CPU)
	WeightsBytes int64
	PoolBytes    int64

	PrefillTokens     int64 // total tokens prefilled in this engine's life
	ReusedTokens      int64 // total prompt tokens served from the cache (prefix reuse)
	DecodeTokens      int64
	LastPrefillTokens int     // tokens prefilled by the latest turn
	PrefillTokensPerS float64 // latest turn
	DecodeTokensPerS  float64 // latest turn
	LastTurnDuration  time.Duration

	// Hybrid models (Qwen3.5/3.6): the recurrent state of the Gated
	// DeltaNet layers, beside the KV pool, whose numbers above count the
	// attention layers only. It is fixed per sequence whatever its length,
	// and float32 whatever the KV dtype. All zero for other models.
	StateLayers      int   // recurrent layers
	StateBytesPerSeq int64 // one sequence's state, all recurrent layers (conv + delta rule)
	StateSlots       int   // slots allocated: live sequences plus snapshots
	StateSlotsLive   int   // slots holding a session's live state
	StateSnapshots   int   // slots holding a turn-boundary snapshot
	StateBytes       int64 // StateSlots * StateBytesPerSeq, allocated at load
	StateRestores    int64 // turns that resumed from a snapshot (the prompt diverged from the live state)
	StateRestarts    int64 // turns that had history but recomputed the state from token 0

	// Expert placement (issue 12): set only when some MoE layers' routed
	// experts live in host RAM (--gpu-memory too small for all, or
	// --cpu-moe / --n-cpu-moe); all zero otherwise. Placement is by whole
	// layers: a layer's ExpertsPerLayer experts are all on the GPU or all
	// in RAM.
	ExpertLayers      int   // layers with routed experts
	ExpertLayersHost  int   // of them, those whose experts are in host RAM
	ExpertsPerLayer   int   // routed experts of one layer
	ExpertBytesDevice int64 // routed-expert bytes on the GPU
	ExpertBytesHost   int64 // routed-expert bytes in host RAM
	DenseBytes        int64 // weights other than routed experts (on the GPU)
	WorkspaceBytes    int64 // activations of the largest batch (GPU)
	StagingBytes      int64 // GPU buffers host experts are streamed through
	ExpertRun         string
	ExpertHostPinned  bool // host experts are page-locked for DMA
	// Counters since load (gpu.OffloadStats): MoE calls computed on the
	// host CPU or streamed to the GPU, with their tokens; streamed bytes;
	// expert-cache lookups (0 without a cache).
	ExpertCPUCalls, ExpertCPUTokens       int64
	ExpertStreamCalls, ExpertStreamTokens int64
	ExpertMappedCalls, ExpertMappedTokens int64  // the GPU read the selected experts in host RAM (--expert-run mapped)
	ExpertMapError                        string // why mapped reads are off ("" when they work or never ran)
	ExpertStreamedBytes                   int64
	ExpertCacheHits, ExpertCacheMisses    int64
	ExpertCPUTime, ExpertStreamTime       time.Duration // CPU calls' wall time; the copy stream's time
	ExpertStreamError                     string        // why streaming is off ("" when it works or never ran)
	ExpertPinError                        string        // why the host experts are not page-locked ("" when they are)
	// --expert-run split: decode calls whose selected experts the GPU
	// (mapped) and the host cores computed together; the CPU's slots per
	// token (latest call); those calls' wall time and the CPU's share.
	ExpertSplitCalls, ExpertSplitTokens int64
	ExpertSplitCPUSlots                 int
	ExpertSplitTime, ExpertSplitCPUTime time.Duration

	// Remote engines (ftchat --engine URL): the server that answers, and
	// what it reports. The KV numbers above are then the server's, from its
	// /metrics, when it exposes them (RemoteKV says which ones), else zero.
	Remote          string        // the server's API base URL; "" for the in-process engine
	RemoteKV        string        // where the KV numbers come from ("ftchat serve", "vLLM", ...); "" when unknown
	RequestsRunning int           // the server's running requests (all clients), -1 when unknown
	RequestsQueued  int           // its waiting requests, -1 when unknown
	FirstToken      time.Duration // latest turn: time from sending the request to the first token
}
