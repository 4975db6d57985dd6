package gpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ComputeDType is the operand type of the tensor-core GEMMs and attention
// (--compute-dtype); accumulation is float32 either way. It picks the PTX
// flavour: bf16 needs sm_80 (Ampere); fp16 is the compute_75 "sm75"
// flavour, the only one Turing (sm_75) runs, which newer GPUs JIT too.
type ComputeDType int

const (
	// ComputeAuto is bf16 on sm_80 and newer, fp16 on sm_75.
	ComputeAuto ComputeDType = iota
	ComputeBF16
	ComputeF16
)

func (d ComputeDType) String() string {
	switch d {
	case ComputeBF16:
		return "bf16"
	case ComputeF16:
		return "fp16"
	}
	return "auto"
}

// ParseComputeDType reads --compute-dtype: auto (or empty), bf16, fp16.
func ParseComputeDType(s string) (ComputeDType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return ComputeAuto, nil
	case "bf16":
		return ComputeBF16, nil
	case "fp16", "f16":
		return ComputeF16, nil
	}
	return 0, fmt.Errorf("--compute-dtype %q: supported values are auto (bf16 on sm_80 and newer, fp16 on sm_75), bf16 and fp16", s)
}

// flavourEnv names a PTX flavour to load instead of the best one
// (FTCHAT_PTX_FLAVOUR=sm75 runs the fp16-compute kernels on any GPU, for
// tests and comparisons).
const flavourEnv = "FTCHAT_PTX_FLAVOUR"

// ptxTargets lists the PTX flavours to load for a compute capability and
// compute dtype, best first: compute_90 (modules that have it: the FP8
// cvt), then compute_89 on sm_90 and newer; compute_89 on sm_89;
// compute_80 on sm_80..88 (FP8 decoded with integer ops); compute_75 on
// sm_75..79, and on any GPU for fp16 compute (ptxgen builds it with
// FT_COMPUTE_F16: fp16 MMA operands, no cp.async, FP8 decoded in software).
// force, when not empty, is FTCHAT_PTX_FLAVOUR: the flavours of that
// compute capability instead of the device's (never a newer one).
func ptxTargets(arch int, cd ComputeDType, force string) ([]string, error) {
	if force != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(force, "sm"))
		if err != nil || !strings.HasPrefix(force, "sm") || !knownFlavour(n) {
			return nil, fmt.Errorf("%s=%q: supported values are sm75, sm80, sm89 and sm90", flavourEnv, force)
		}
		if n > arch {
			return nil, fmt.Errorf("%w: %s=%s needs sm_%d or newer; this GPU is sm_%d", ErrUnsupported, flavourEnv, force, n, arch)
		}
		if n == 75 && cd == ComputeBF16 {
			return nil, fmt.Errorf("%s=sm75 is the fp16-compute flavour; it cannot run --compute-dtype bf16", flavourEnv)
		}
		if n >= 80 && cd == ComputeF16 {
			return nil, fmt.Errorf("%s=%s is a bf16-compute flavour; --compute-dtype fp16 needs sm75", flavourEnv, force)
		}
		arch = n
	}
	switch {
	case arch < MinComputeCapability:
		return nil, fmt.Errorf("%w: sm_%d is older than sm_75 (Turing)", ErrUnsupported, arch)
	case arch < 80:
		if cd == ComputeBF16 {
			return nil, fmt.Errorf("%w: --compute-dtype bf16 needs sm_80 (Ampere) or newer; sm_%d has fp16 tensor cores only (use --compute-dtype fp16 or auto)", ErrUnsupported, arch)
		}
		return []string{"sm75"}, nil
	case cd == ComputeF16:
		return []string{"sm75"}, nil
	case arch >= 90:
		return []string{"sm90", "sm89"}, nil
	case arch >= 89:
		return []string{"sm89"}, nil
	}
	return []string{"sm80"}, nil
}

func knownFlavour(n int) bool { return n == 75 || n == 80 || n == 89 || n == 90 }

// targetsCompute is the compute dtype a flavour list runs.
func targetsCompute(ts []string) ComputeDType {
	if len(ts) == 1 && ts[0] == "sm75" {
		return ComputeF16
	}
	return ComputeBF16
}

// deviceTargets is ptxTargets for an opened device with the environment's
// FTCHAT_PTX_FLAVOUR.
func deviceTargets(arch int, cd ComputeDType) ([]string, error) {
	return ptxTargets(arch, cd, strings.TrimSpace(os.Getenv(flavourEnv)))
}

// Compute is the operand type the device's tensor-core kernels use: the
// compute dtype of the PTX flavour it loads (fp16 for sm75, else bf16).
func (d *Device) Compute() ComputeDType { return targetsCompute(d.c.targets) }
