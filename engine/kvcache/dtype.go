package kvcache

import (
	"fmt"
	"strings"
)

// FP8 format limits (largest finite magnitudes).
const (
	E4M3Max = 448.0
	E5M2Max = 57344.0
)

// dtypeNames are the canonical option spellings, indexed by DType.
var dtypeNames = [...]string{
	Auto:    "auto",
	BF16:    "bf16",
	F16:     "fp16",
	FP8E4M3: "fp8_e4m3",
	FP8E5M2: "fp8_e5m2",
}

// dtypeAliases are extra spellings ParseDType accepts. "fp8" means E4M3:
// it is the format with more mantissa (the better choice for KV values
// under a per-token scale) and the one the project recommends.
var dtypeAliases = map[string]DType{
	"bfloat16":   BF16,
	"f16":        F16,
	"float16":    F16,
	"half":       F16,
	"fp8":        FP8E4M3,
	"e4m3":       FP8E4M3,
	"fp8_e4m3fn": FP8E4M3,
	"e5m2":       FP8E5M2,
}

// SupportedDTypes is the list shown in error messages.
const SupportedDTypes = "auto, bf16, fp16, fp8_e4m3, fp8_e5m2 (aliases: f16, fp8 = fp8_e4m3)"

// ParseDType parses a --kv-cache-dtype value (case-insensitive, trimmed).
func ParseDType(s string) (DType, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	for d, name := range dtypeNames {
		if v == name {
			return DType(d), nil
		}
	}
	if d, ok := dtypeAliases[v]; ok {
		return d, nil
	}
	return Auto, fmt.Errorf("--kv-cache-dtype %q is not supported; supported: %s", s, SupportedDTypes)
}

// String returns the canonical name (the one ParseDType and Stats use).
func (d DType) String() string {
	if d >= 0 && int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// ElemBytes is the storage size of one code: 1 for FP8, 2 otherwise.
// Auto reports 2 because it always resolves to a 16-bit type.
func (d DType) ElemBytes() int {
	if d.IsFP8() {
		return 1
	}
	return 2
}

// IsFP8 reports whether d is one of the 8-bit float formats (codes plus scales).
func (d DType) IsFP8() bool { return d == FP8E4M3 || d == FP8E5M2 }

// Valid reports whether d is one of the declared constants.
func (d DType) Valid() bool { return d >= Auto && d <= FP8E5M2 }

// Resolve maps Auto to the model's 16-bit compute dtype (BF16 or F16);
// other values are returned unchanged. An unknown compute dtype resolves
// to BF16, the safer range for activations.
func (d DType) Resolve(compute DType) DType {
	if d != Auto {
		return d
	}
	if compute == F16 {
		return F16
	}
	return BF16
}

// FP8Max is the largest finite value of an FP8 dtype, 0 for others.
func (d DType) FP8Max() float32 {
	switch d {
	case FP8E4M3:
		return E4M3Max
	case FP8E5M2:
		return E5M2Max
	}
	return 0
}

// String names the scale mode as in --kv-scales help text.
func (m ScaleMode) String() string {
	switch m {
	case DynamicScales:
		return "dynamic"
	case StaticScales:
		return "static"
	}
	return fmt.Sprintf("ScaleMode(%d)", int(m))
}

// ParseDTypePair parses a K/V storage spec as /kvdtype takes it: one dtype
// for both halves ("fp8_e4m3"), or halves named "k=bf16 v=fp8_e4m3"
// (either order, separated by spaces, commas or a slash, as in a bench
// list entry "k=bf16/v=fp8_e4m3"; "key="/"value=" also
// work). A half the spec leaves out keeps cur (the dtype it has now);
// Auto in the result is for the caller to resolve.
func ParseDTypePair(s string, curK, curV DType) (k, v DType, err error) {
	if !strings.Contains(s, "=") {
		d, err := ParseDType(s)
		return d, d, err
	}
	k, v = curK, curV
	seen := map[string]bool{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '/' || r == '\t' }) {
		name, val, ok := strings.Cut(f, "=")
		half := strings.ToLower(strings.TrimSpace(name))
		switch half {
		case "key":
			half = "k"
		case "value":
			half = "v"
		}
		if !ok || half != "k" && half != "v" {
			return 0, 0, fmt.Errorf("%q: name each half k=DTYPE and/or v=DTYPE (e.g. k=bf16 v=fp8_e4m3), or give one dtype for both", f)
		}
		if seen[half] {
			return 0, 0, fmt.Errorf("%q: %s= is given twice", s, half)
		}
		seen[half] = true
		d, err := ParseDType(val)
		if err != nil {
			return 0, 0, fmt.Errorf("%s=%s is not supported; supported: %s", half, val, SupportedDTypes)
		}
		if half == "k" {
			k = d
		} else {
			v = d
		}
	}
	if len(seen) == 0 {
		return 0, 0, fmt.Errorf("%q names no dtype; use e.g. k=bf16 v=fp8_e4m3, or one dtype for both", s)
	}
	return k, v, nil
}
