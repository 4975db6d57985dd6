package engine

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/gpu"
)

// Options holds everything a user can set for the engine. Validate is the
// one place that rejects unsupported combinations.
type Options struct {
	Model        string // local GGUF path or a known model name
	Device       string // auto | cpu | cuda | cuda:N
	GPUMemory    int64  // device memory budget in bytes; 0 = what the device has free
	KVDType      string // auto | bf16 | fp16 | fp8_e4m3 | fp8_e5m2
	KVScales     string // "" (dynamic) | "checkpoint" | path to a calibration file
	PageSize     int    // tokens per KV page; 0 = default
	ContextLen   int    // max tokens per sequence; 0 = the model's
	KVTokens     int    // CPU: pool size in bf16-equivalent tokens; 0 = ContextLen
	Threads      int    // CPU threads; 0 = all cores
	PrefillChunk int    // tokens per prefill step; 0 = default
	// StateSlots is, for hybrid models (Qwen3.5/3.6), the recurrent-state
	// slots allocated beside the KV pool: live sequences plus turn-boundary
	// snapshots; 0 = DefaultStateSlots. Ignored for other models.
	StateSlots int

	// Expert placement on the GPU (issue 12): CPUMoE keeps every block's
	// routed experts in host RAM, NCPUMoE those of the first N blocks;
	// neither: automatic, as many as the --gpu-memory budget holds after
	// the dense weights, the KV pool for ContextLen, the state and the
	// workspace. ExpertRun is how host-resident experts are computed:
	// "auto" (default), "cpu" or "stream" (gpu.HostRun).
	CPUMoE    bool
	NCPUMoE   int
	ExpertRun string

	// KVDTypeK and KVDTypeV, when set, override KVDType for the keys or
	// the values alone (--cache-type-k / --cache-type-v, as llama.cpp).
	KVDTypeK, KVDTypeV string

	// ComputeDType is the GPU's tensor-core operand type (--compute-dtype):
	// auto | bf16 | fp16 (gpu.ParseComputeDType); auto is bf16 on sm_80+
	// and fp16 on sm_75. The CPU computes in float32 and ignores it.
	ComputeDType string
}

// DefaultPageSize is the KV page size in tokens when Options.PageSize is 0
// (docs/kv-cache.md explains the choice: page sizes 16–256 measured within
// 2% of each other in GPU decode attention; 64 keeps page tables short).
const DefaultPageSize = kvcache.DefaultPageSize

// MaxThreads bounds --threads.
const MaxThreads = cpu.MaxThreads

// DefaultPrefillChunk bounds the activations of one prefill step.
const DefaultPrefillChunk = 256

// MaxPrefillChunk bounds --ubatch-size: the GPU workspace and the CPU's
// activations grow with it (engine.WorkspaceBytes), so an absurd value
// must be refused before anything is sized from it.
const MaxPrefillChunk = 16384

// Hardware is what Validate needs to know about the machine.
type Hardware struct {
	CUDA        bool   // a usable CUDA device was found
	CUDAReason  string // why not, when CUDA is false
	ComputeCap  int    // e.g. 90 for sm_90
	DeviceName  string
	DeviceCount int
}

var deviceRE = regexp.MustCompile(`^(auto|cpu|cuda(:[0-9]+)?)$`)

// Device is a parsed --device value.
type Device struct {
	Kind    string // auto, cpu, cuda
	Ordinal int
}

// ParseDevice reads --device.
func ParseDevice(s string) (Device, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		s = "auto"
	}
	if !deviceRE.MatchString(s) {
		return Device{}, fmt.Errorf("--device %q: supported values are auto, cpu, cuda, cuda:N", s)
	}
	d := Device{Kind: s}
	if strings.HasPrefix(s, "cuda:") {
		n, _ := strconv.Atoi(s[5:])
		d = Device{Kind: "cuda", Ordinal: n}
	}
	return d, nil
}

// Validate rejects unsupported option values and combinations before
// anything is loaded. Model-dependent checks (head_dim, scales file vs
// model shape) happen in Load, with the same style of message.
func (o Options) Validate(hw Hardware) error {
	dev, err := ParseDevice(o.Device)
	if err != nil {
		return err
	}
	dt := kvcache.Auto
	if o.KVDType != "" {
		if dt, err = kvcache.ParseDType(o.KVDType); err != nil {
			return err
		}
	}
	if o.PageSize != 0 {
		if err := kvcache.ValidatePageSize(o.PageSize); err != nil {
			return fmt.Errorf("--page-size %d: %w", o.PageSize, err)
		}
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--ctx-size", o.ContextLen}, {"--kv-tokens", o.KVTokens}, {"--threads", o.Threads}, {"--state-slots", o.StateSlots}} {
		if c.v < 0 {
			return fmt.Errorf("%s %d: must be 0 (default) or positive", c.name, c.v)
		}
	}
	// Each thread is a goroutine and a queue slot: a huge count exhausts
	// memory before any work starts.
	if o.Threads > MaxThreads {
		return fmt.Errorf("--threads %d: at most %d (this machine has %d cores; 0 uses them all)", o.Threads, MaxThreads, runtime.NumCPU())
	}
	if o.StateSlots > MaxStateSlots {
		return fmt.Errorf("--state-slots %d: at most %d (each holds one sequence's recurrent state; %d is the default)", o.StateSlots, MaxStateSlots, DefaultStateSlots)
	}
	if o.PrefillChunk < 0 || o.PrefillChunk > MaxPrefillChunk {
		return fmt.Errorf("--ubatch-size %d: must be 0 (default %d) or 1 to %d tokens", o.PrefillChunk, DefaultPrefillChunk, MaxPrefillChunk)
	}
	if o.GPUMemory < 0 {
		return fmt.Errorf("--gpu-memory %d: must be positive", o.GPUMemory)
	}
	cd, err := gpu.ParseComputeDType(o.ComputeDType)
	if err != nil {
		return err
	}
	if err := o.validateExperts(); err != nil {
		return err
	}
	if err := o.validateKVTypes(dev); err != nil { // --cache-type-k/-v, --kv-scales (kvtypes.go)
		return err
	}
	if dev.Kind == "cuda" {
		if !hw.CUDA {
			advice := " (use --device cpu or auto)"
			if strings.Contains(hw.CUDAReason, "--device cpu") {
				advice = "" // the reason gives it already
			}
			return fmt.Errorf("--device %s: %s%s", o.Device, hw.CUDAReason, advice)
		}
		if dev.Ordinal >= hw.DeviceCount {
			return fmt.Errorf("--device %s: only %d CUDA device(s) present (cuda:0..cuda:%d)", o.Device, hw.DeviceCount, hw.DeviceCount-1)
		}
		if dt.IsFP8() && hw.ComputeCap < kvcache.MinFP8ComputeCap {
			return fmt.Errorf("--kv-cache-dtype %s: %s (sm_%d) cannot run the fp8 kernels; they need sm_75 or newer (use bf16 or --device cpu)", dt, hw.DeviceName, hw.ComputeCap)
		}
		if cd == gpu.ComputeBF16 && hw.ComputeCap < 80 {
			return fmt.Errorf("--compute-dtype bf16: %s (sm_%d) has no bf16 tensor cores; use --compute-dtype fp16 (or auto, which picks it there)", hw.DeviceName, hw.ComputeCap)
		}
	}
	return nil
}
