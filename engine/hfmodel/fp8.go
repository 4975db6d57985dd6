package hfmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/safetensors"
)

// FP8 E4M3 weights with a per-tensor scale stay FP8 (keepsFP8, below),
// those with per-row or block scales become FP8_E4M3_B32 (fp8block.go);
// the others are dequantized to F32 at load (w = code * scale, 4 B/weight).
//
// Scale layouts, found by the scale tensor's shape:
//   - per tensor: a scalar or [1] weight_scale (ModelOpt FP8,
//     compressed-tensors strategy "tensor");
//   - per row: [out] or [out, 1] (compressed-tensors strategy "channel");
//   - per block: [ceil(out/b0), ceil(in/b1)] with [b0, b1] from
//     weight_block_size (quant_method "fp8", DeepSeek/Qwen FP8 style, whose
//     scale is named weight_scale_inv but multiplies like the others) or
//     block_structure, 128x128 when neither says.

// readQuant accepts the FP8 quantization configs and refuses the rest.
func (c *hfConfig) readQuant(path string) error {
	raw := bytes.TrimSpace(c.QuantizationConfig)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var q struct {
		Method    string `json:"quant_method"`
		Fmt       string `json:"fmt"`
		Algo      string `json:"quant_algo"`
		GroupSize int    `json:"group_size"`
		Format    string `json:"format"`
		BlockSize []int  `json:"weight_block_size"`
		Groups    map[string]struct {
			Format  string `json:"format"`
			Weights *struct {
				Type      string `json:"type"`
				NumBits   int    `json:"num_bits"`
				Strategy  string `json:"strategy"`
				GroupSize int    `json:"group_size"`
				Block     []int  `json:"block_structure"`
			} `json:"weights"`
		} `json:"config_groups"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return fmt.Errorf("%s: quantization_config: %w", path, err)
	}
	refuse := func(what string) error {
		return fmt.Errorf("%s: quantization_config (quant_method %q%s) is not read yet; FP8 E4M3 (quant_method fp8, compressed-tensors float-quantized, ModelOpt FP8), NVFP4 (ModelOpt NVFP4 or MIXED_PRECISION, compressed-tensors nvfp4-pack-quantized) and BF16/F16/F32 checkpoints are", path, q.Method, what)
	}
	block := q.BlockSize
	switch q.Method {
	case "fp8":
		if q.Fmt != "" && q.Fmt != "e4m3" {
			return refuse(", fmt " + q.Fmt)
		}
	case "modelopt":
		switch q.Algo {
		case "FP8":
		case "NVFP4", "W4A16_NVFP4":
			if q.GroupSize != 0 && q.GroupSize != 16 {
				return refuse(fmt.Sprintf(", group_size %d (NVFP4 is 16)", q.GroupSize))
			}
			c.nvfp4 = modelOptFP4
			return nil
		case "MIXED_PRECISION": // per layer NVFP4 or FP8; each tensor's dtype and scales say which
			c.nvfp4 = modelOptFP4
		default:
			return refuse(", quant_algo " + q.Algo)
		}
	case "compressed-tensors":
		// "mixed-precision" whose every group is nvfp4-pack-quantized is
		// NVFP4 too, as the converter reads it.
		allFP4 := len(q.Groups) > 0
		for _, g := range q.Groups {
			allFP4 = allFP4 && g.Format == "nvfp4-pack-quantized"
		}
		if q.Format == "nvfp4-pack-quantized" || q.Format == "mixed-precision" && allFP4 {
			for name, g := range q.Groups {
				if w := g.Weights; w == nil || w.Type != "float" || w.NumBits != 4 || (w.GroupSize != 0 && w.GroupSize != 16) {
					return refuse(", format nvfp4-pack-quantized, config group " + name + " weights not 4-bit float in groups of 16")
				}
			}
			c.nvfp4 = compressedFP4
			return nil
		}
		if q.Format != "float-quantized" || len(q.Groups) != 1 {
			return refuse(", format " + q.Format)
		}
		for _, g := range q.Groups {
			if g.Weights == nil || g.Weights.Type != "float" || g.Weights.NumBits != 8 {
				return refuse(", weights not 8-bit float")
			}
			switch g.Weights.Strategy {
			case "tensor", "channel":
			case "block":
				block = g.Weights.Block
			default:
				return refuse(", strategy " + g.Weights.Strategy)
			}
		}
	default:
		return refuse("")
	}
	if len(block) == 2 {
		if block[0] <= 0 || block[1] <= 0 || block[0] > maxShape || block[1] > maxShape {
			return fmt.Errorf("%s: quantization_config block size %v must be two positive sizes", path, block)
		}
		c.fp8Block = [2]int{block[0], block[1]}
	} else if len(block) != 0 {
		return fmt.Errorf("%s: quantization_config block size %v must be [rows, cols]", path, block)
	}
	c.fp8 = true
	return nil
}

func isFP8(d safetensors.DType) bool { return d == safetensors.F8E4M3 || d == safetensors.F8E5M2 }

// scaleOf finds the scale tensor of an FP8 weight and checks its shape.
func (m *mapper) scaleOf(name string, t safetensors.Tensor) (src, error) {
	base := strings.TrimSuffix(name, ".weight")
	var s src
	var sn string
	for _, n := range []string{name + "_scale_inv", name + "_scale", base + ".weight_scale_inv", base + ".weight_scale", name + "_scale_2"} {
		if x, ok := m.ck.tensors[n]; ok {
			s, sn = x, n
			break
		}
	}
	if sn == "" {
		return src{}, fmt.Errorf("%s: FP8 tensor %s has no %s_scale_inv or %s_scale beside it", m.ck.dir, name, name, name)
	}
	if !m.c.fp8 {
		return src{}, fmt.Errorf("%s: tensor %s is %s but config.json has no FP8 quantization_config", m.ck.dir, name, t.DType)
	}
	if _, ok := ggufType[s.t.DType]; !ok {
		return src{}, fmt.Errorf("%s: scale %s has dtype %s; want F32, F16 or BF16", s.f.Path, sn, s.t.DType)
	}
	if len(t.Shape) < 1 || len(t.Shape) > 3 {
		return src{}, fmt.Errorf("%s: FP8 tensor %s has shape %v; want a matrix", t.Name, name, t.Shape)
	}
	if !m.scaleShapeOK(t.Shape, s.t.Shape) {
		return src{}, fmt.Errorf("%s: scale %s has shape %v, which fits neither per-tensor, per-row nor %v-block scales of %s %v",
			s.f.Path, sn, s.t.Shape, m.block(), name, t.Shape)
	}
	return s, nil
}

func (m *mapper) block() [2]int {
	if m.c.fp8Block[0] > 0 {
		return m.c.fp8Block
	}
	return [2]int{128, 128}
}

// scaleKind: 0 per tensor, 1 per row, 2 per block.
func (m *mapper) scaleKind(w, s []uint64) int {
	n := uint64(1)
	for _, d := range s {
		n *= d
	}
	rows := uint64(1)
	for _, d := range w[:len(w)-1] {
		rows *= d
	}
	switch {
	case n == 1:
		return 0
	case n == rows && (len(s) == 1 || len(s) == len(w) && s[len(s)-1] == 1):
		return 1
	}
	return 2
}

func (m *mapper) scaleShapeOK(w, s []uint64) bool {
	for _, d := range s {
		if d == 0 || d > maxShape {
			return false
		}
	}
	switch m.scaleKind(w, s) {
	case 0, 1:
		return true
	}
	if len(w) != 2 || len(s) != 2 {
		return false
	}
	b := m.block()
	return s[0] == (w[0]+uint64(b[0])-1)/uint64(b[0]) && s[1] == (w[1]+uint64(b[1])-1)/uint64(b[1])
}

// scaleValues returns the scale tensor beside FP8 weight name and its
// values as float32.
func (m *mapper) scaleValues(name string, t safetensors.Tensor) (src, []float32, error) {
	sc, err := m.scaleOf(name, t)
	if err != nil {
		return src{}, nil, err
	}
	b, err := sc.f.Data(sc.t)
	if err != nil {
		return src{}, nil, err
	}
	v, err := floats(b, sc.t.DType)
	return sc, v, err
}

// dequantFP8 returns the F32 bytes of an FP8 weight times its scale.
func (m *mapper) dequantFP8(name string, t src) ([]byte, error) {
	sc, scale, err := m.scaleValues(name, t.t)
	if err != nil {
		return nil, err
	}
	codes, err := t.f.Data(t.t)
	if err != nil {
		return nil, err
	}
	dec := kvcache.DecodeE4M3
	if t.t.DType == safetensors.F8E5M2 {
		dec = kvcache.DecodeE5M2
	}
	sh := t.t.Shape
	cols := int(sh[len(sh)-1])
	out := make([]float32, len(codes))
	kind := m.scaleKind(sh, sc.t.Shape)
	b := m.block()
	sCols := 0
	if kind == 2 {
		sCols = int(sc.t.Shape[1])
	}
	for i, c := range codes {
		var s float32
		switch kind {
		case 0:
			s = scale[0]
		case 1:
			s = scale[i/cols]
		default:
			r, col := i/cols, i%cols
			s = scale[(r/b[0])*sCols+col/b[1]]
		}
		v := dec(c) * s
		if math.IsNaN(float64(v)) {
			return nil, fmt.Errorf("%s: FP8 tensor %s holds a NaN code at element %d", t.f.Path, name, i)
		}
		out[i] = v
	}
	return f32bytes(out), nil
}

// Per-tensor FP8 E4M3 weights stay FP8 in memory (W8A16): the codes
// become gguf.FP8_E4M3 blocks (32 codes each, bytes unchanged, moved only
// by the row/column/expert transforms) and the scale the F32 <name>.scale
// tensor beside them (one value, or one per expert of a stacked tensor),
// which engine/model applies after each product as it does NVFP4's. FP8
// with per-row or block scales is kept as FP8_E4M3_B32 (fp8block.go);
// E5M2, block scales whose column size is not a multiple of 32, rows that
// are not whole 32-element runs, and tensors ftchat keeps in F32 (norms,
// the router, conv) are still dequantized to F32 at load.

// keepsFP8 reports whether spec s can keep its FP8 E4M3 codes: a matrix
// whose transform only moves bytes and whose every source has a
// per-tensor scale.
func (m *mapper) keepsFP8(s spec) bool {
	switch s.x {
	case asIs, permQK, vRows, vCols, stackExp, splitQKV, splitZ, splitGate, splitUp:
	default:
		return false
	}
	if s.f32 || len(s.shape) < 2 {
		return false
	}
	for _, n := range s.from {
		t := m.ck.tensors[n]
		if t.t.DType != safetensors.F8E4M3 {
			return false
		}
		sc, err := m.scaleOf(n, t.t)
		if err != nil || m.scaleKind(t.t.Shape, sc.t.Shape) != 0 {
			return false
		}
	}
	return true
}

// fp8Scales returns the second-level scales of an FP8_E4M3 spec: one per
// source (expert), collapsed to one when all are equal, nil when that one
// is 1 (as for NVFP4). Each must be positive and finite.
func (m *mapper) fp8Scales(s spec) ([]float32, error) {
	out := make([]float32, 0, len(s.from))
	for _, n := range s.from {
		sc, v, err := m.scaleValues(n, m.ck.tensors[n].t)
		if err != nil {
			return nil, err
		}
		if !(v[0] > 0) || math.IsInf(float64(v[0]), 0) {
			return nil, fmt.Errorf("%s: FP8 scale of %s is %v; want a positive finite number", sc.f.Path, n, v[0])
		}
		out = append(out, v[0])
	}
	same := true
	for _, v := range out {
		same = same && v == out[0]
	}
	if same {
		out = out[:1]
	}
	if len(out) == 1 && out[0] == 1 {
		return nil, nil
	}
	return out, nil
}

// checkFP8Codes refuses the E4M3 NaN codes (0x7F, 0xFF), which no
// quantizer writes, as the dequantizing path does.
func checkFP8Codes(b []byte) error {
	for i, c := range b {
		if gguf.E4M3IsNaN(c) {
			return fmt.Errorf("FP8 tensor holds a NaN code at byte %d", i)
		}
	}
	return nil
}
