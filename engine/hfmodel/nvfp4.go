package hfmodel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/safetensors"
	"github.com/ftchat/ftchat/internal/safefile"
)

// NVFP4 checkpoints stay NVFP4 in memory: each weight is repacked at load
// into ggml's NVFP4 blocks (GGUF type 40, 64 elements in 36 bytes) and its
// per-tensor second-level scale becomes the F32 <name>.scale tensor beside
// it, exactly what llama.cpp's converter writes, so engine/model applies
// the scale after the dot product as it does for a GGUF.
//
// Checkpoint layouts (both pack two E2M1 codes per byte, the even column
// in the low nibble, with one E4M3 block scale per 16 inputs):
//   - ModelOpt: X.weight U8 [out, in/2], X.weight_scale F8_E4M3
//     [out, in/16], X.weight_scale_2 F32 scalar, multiplied;
//   - compressed-tensors nvfp4-pack-quantized: X.weight_packed,
//     X.weight_scale, X.weight_global_scale F32 [1], a divisor (the scale
//     is 1/weight_global_scale).
// X.input_scale / X.input_global_scale are activation scales for W4A4
// kernels; ftchat's NVFP4 kernels are W4A16 and do not read them.

// fp4Layout is the NVFP4 layout a quantization config declares.
type fp4Layout int

const (
	noFP4         fp4Layout = iota
	modelOptFP4             // weight + weight_scale + weight_scale_2
	compressedFP4           // weight_packed + weight_scale + weight_global_scale
)

// fp4Tensor is one NVFP4 weight of the checkpoint.
type fp4Tensor struct {
	codes, scales src
	global        float32 // the second-level scale, multiplied
}

// nvfp4Block is ggml's NVFP4 block: 64 elements in 36 bytes.
const (
	nvfp4Block      = 64
	nvfp4BlockBytes = 36
)

// fp4Of returns the NVFP4 weight stored for the checkpoint weight name n
// (…weight), ok false when n is not NVFP4 (a float or FP8 tensor).
func (m *mapper) fp4Of(n string) (fp4Tensor, bool, error) {
	base, ok := strings.CutSuffix(n, ".weight")
	if !ok {
		return fp4Tensor{}, false, nil
	}
	cn := base + ".weight_packed"
	codes, ok := m.ck.tensors[cn]
	if !ok {
		cn = n
		if codes, ok = m.ck.tensors[n]; !ok || codes.t.DType != safetensors.U8 {
			return fp4Tensor{}, false, nil
		}
	}
	if m.c.nvfp4 == noFP4 {
		return fp4Tensor{}, true, fmt.Errorf("%s: tensor %s is %s (packed NVFP4?) but neither config.json's quantization_config nor hf_quant_config.json declares NVFP4 (ModelOpt quant_algo NVFP4, compressed-tensors nvfp4-pack-quantized)",
			m.ck.dir, cn, codes.t.DType)
	}
	if codes.t.DType != safetensors.U8 {
		return fp4Tensor{}, true, fmt.Errorf("%s: NVFP4 tensor %s has dtype %s; want U8 (two E2M1 codes per byte)", codes.f.Path, cn, codes.t.DType)
	}
	sn := base + ".weight_scale"
	scales, ok := m.ck.tensors[sn]
	if !ok {
		return fp4Tensor{}, true, fmt.Errorf("%s: NVFP4 tensor %s has no block scales %s beside it (incomplete or mixed-up checkpoint)", m.ck.dir, cn, sn)
	}
	if scales.t.DType != safetensors.F8E4M3 {
		return fp4Tensor{}, true, fmt.Errorf("%s: NVFP4 block scales %s have dtype %s; want F8_E4M3", scales.f.Path, sn, scales.t.DType)
	}
	gn, divisor := base+".weight_scale_2", false
	g, ok := m.ck.tensors[gn]
	if !ok {
		gn, divisor = base+".weight_global_scale", true
		if g, ok = m.ck.tensors[gn]; !ok {
			return fp4Tensor{}, true, fmt.Errorf("%s: NVFP4 tensor %s has neither %s.weight_scale_2 (ModelOpt) nor %s.weight_global_scale (compressed-tensors) beside it", m.ck.dir, cn, base, base)
		}
	}
	if _, ok := ggufType[g.t.DType]; !ok || g.t.Elements() != 1 {
		return fp4Tensor{}, true, fmt.Errorf("%s: NVFP4 second-level scale %s is %s %v; want one F32, F16 or BF16 value", g.f.Path, gn, g.t.DType, g.t.Shape)
	}
	b, err := g.f.Data(g.t)
	if err != nil {
		return fp4Tensor{}, true, err
	}
	v, err := floats(b, g.t.DType)
	if err != nil {
		return fp4Tensor{}, true, err
	}
	s := v[0]
	if divisor {
		s = 1 / s
	}
	if !(s > 0) || math.IsInf(float64(s), 0) {
		return fp4Tensor{}, true, fmt.Errorf("%s: NVFP4 second-level scale %s is %v; want a positive finite number", g.f.Path, gn, v[0])
	}
	return fp4Tensor{codes: codes, scales: scales, global: s}, true, nil
}

// checkFP4 validates an NVFP4 spec's sources and returns its GGUF tensor
// and the second-level scales (nil when all are 1, as the converter omits them).
func (m *mapper) checkFP4(s spec) (gguf.TensorInfo, []float32, error) {
	switch s.x {
	case asIs, permQK, vRows, stackExp:
	case vCols: // whole 16-column groups move: d_v must be a multiple of 16
		if m.c.LinearValueHeadDim%16 != 0 {
			return gguf.TensorInfo{}, nil, fmt.Errorf("%s: NVFP4 tensor %s needs its value-head columns reordered, which NVFP4 allows only in whole 16-column blocks; linear_value_head_dim %d is not a multiple of 16",
				m.ck.dir, s.from[0], m.c.LinearValueHeadDim)
		}
	default:
		return gguf.TensorInfo{}, nil, fmt.Errorf("%s: tensor %s is NVFP4, but the transform its GGUF form needs (%s) is implemented only for float and FP8 weights",
			m.ck.dir, s.from[0], xformNames[s.x])
	}
	if s.f32 || len(s.shape) != 2 {
		return gguf.TensorInfo{}, nil, fmt.Errorf("%s: tensor %s is NVFP4, but it must be a float tensor (ftchat keeps it in F32)", m.ck.dir, s.from[0])
	}
	rows, cols := s.shape[0], s.shape[1]
	var globals []float32
	ones := true
	for _, n := range s.from {
		f, ok, err := m.fp4Of(n)
		if err != nil {
			return gguf.TensorInfo{}, nil, err
		}
		if !ok {
			return gguf.TensorInfo{}, nil, fmt.Errorf("%s: tensor %s is not NVFP4 but %s is; the experts of one layer must share a format", m.ck.dir, n, s.from[0])
		}
		if cols%nvfp4Block != 0 {
			return gguf.TensorInfo{}, nil, fmt.Errorf("%s: NVFP4 tensor %s has %d input columns, not a multiple of %d (ggml NVFP4 blocks); not supported",
				f.codes.f.Path, n, cols, nvfp4Block)
		}
		if want := []uint64{rows, cols / 2}; !slices.Equal(f.codes.t.Shape, want) {
			return gguf.TensorInfo{}, nil, fmt.Errorf("%s: NVFP4 tensor %s has shape %v but config.json implies %v codes (%v weights, two per byte)",
				f.codes.f.Path, n, f.codes.t.Shape, want, s.shape)
		}
		if want := []uint64{rows, cols / 16}; !slices.Equal(f.scales.t.Shape, want) {
			return gguf.TensorInfo{}, nil, fmt.Errorf("%s: NVFP4 block scales %s have shape %v; want %v (one per 16 of the %v weights)",
				f.scales.f.Path, strings.TrimSuffix(n, ".weight")+".weight_scale", f.scales.t.Shape, want, s.shape)
		}
		globals = append(globals, f.global)
		ones = ones && f.global == 1
	}
	dims := []uint64{cols, rows}
	if s.x == stackExp {
		dims = append(dims, uint64(len(s.from)))
	}
	if ones {
		globals = nil
	}
	return gguf.TensorInfo{Name: s.name, Dims: dims, Type: gguf.NVFP4}, globals, nil
}

var xformNames = map[xform]string{asIs: "as is", toF32: "F32", plusOne: "1 + w", negExp: "-exp", permQK: "rope row permutation",
	vRows: "value-head row reorder", vCols: "value-head column reorder", vConv: "conv squeeze", vVecF32: "value-head vector",
	vNegExp: "-exp(A_log)", stackExp: "expert stacking", splitGate: "fused gate_up split", splitUp: "fused gate_up split",
	splitQKV: "qkvz split", splitZ: "qkvz split", convF32: "conv squeeze"}

// buildFP4 returns the ggml NVFP4 blocks of an NVFP4 spec: each source
// repacked, experts concatenated, rows permuted as the transform asks. Rows
// are repacked straight into the one output buffer from the mapped shards
// (a permuted row is read from its source row, a column-reordered one
// through a row-sized staging copy), in parallel chunks.
func (m *mapper) buildFP4(s spec) ([]byte, error) {
	rows, cols := int(s.shape[0]), int(s.shape[1])
	rowBytes := cols / nvfp4Block * nvfp4BlockBytes
	type part struct {
		name          string
		codes, scales []byte
	}
	parts := make([]part, len(s.from))
	for i, n := range s.from {
		f, _, err := m.fp4Of(n)
		if err != nil {
			return nil, err
		}
		codes, err := f.codes.f.Data(f.codes.t)
		if err != nil {
			return nil, err
		}
		scales, err := f.scales.f.Data(f.scales.t)
		if err != nil {
			return nil, err
		}
		parts[i] = part{n, codes, scales}
	}
	var perm, groups []int
	switch s.x {
	case permQK:
		perm = qkPerm(rows, s.heads)
	case vRows:
		perm = m.vRowPerm(rows)
	case vCols:
		// Heads span whole 16-column groups (checkFP4), so each group
		// moves with its scale: 8 code bytes and 1 scale byte.
		groups = m.rowPerm(cols/16, 0, m.c.LinearValueHeadDim/16)
	}
	out := make([]byte, len(parts)*rows*rowBytes)
	err := parallelChunks(len(parts)*rows, func(lo, hi int) error {
		var cbuf, sbuf []byte
		if groups != nil {
			cbuf, sbuf = make([]byte, cols/2), make([]byte, cols/16)
		}
		for g := lo; g < hi; g++ {
			p, r := &parts[g/rows], g%rows
			if perm != nil {
				r = perm[r]
			}
			c, sc := p.codes[r*cols/2:(r+1)*cols/2], p.scales[r*cols/16:(r+1)*cols/16]
			if groups != nil {
				for i, src := range groups {
					copy(cbuf[8*i:8*i+8], c[8*src:8*src+8])
					sbuf[i] = sc[src]
				}
				c, sc = cbuf, sbuf
			}
			if err := repackRow(out[g*rowBytes:(g+1)*rowBytes], c, sc, r); err != nil {
				return fmt.Errorf("%s.weight_scale: %w", strings.TrimSuffix(p.name, ".weight"), err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// repackChunkRows is the fewest rows a parallel chunk of repacking gets
// (a 2048-column row is 1152 bytes of output).
const repackChunkRows = 256

// parallelChunks runs fn over [0, n) in contiguous chunks, one per
// available core, and returns the error of the first chunk (in order) that
// failed, so the error reported is the first in row order.
func parallelChunks(n int, fn func(lo, hi int) error) error {
	workers := min(runtime.GOMAXPROCS(0), (n+repackChunkRows-1)/repackChunkRows)
	if workers <= 1 {
		return fn(0, n)
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = fn(w*n/workers, (w+1)*n/workers)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// repackNVFP4 appends to dst the ggml NVFP4 blocks of a row-major
// [rows, cols] NVFP4 weight: codes two per byte (element 2k in the low
// nibble of byte k), one E4M3 scale per 16 elements. A ggml block holds 64
// elements as four scale bytes, then per 16-element sub-block s the bytes
// qs[8s+j] = code(16s+j) | code(16s+j+8)<<4. The scales keep their E4M3
// bits without the sign (ggml reads them as UE4M3); the NaN code is refused.
func repackNVFP4(dst, codes, scales []byte, rows, cols int) ([]byte, error) {
	rowBytes := cols / nvfp4Block * nvfp4BlockBytes
	n := len(dst)
	dst = slices.Grow(dst, rows*rowBytes)[:n+rows*rowBytes]
	for r := 0; r < rows; r++ {
		if err := repackRow(dst[n+r*rowBytes:n+(r+1)*rowBytes], codes[r*cols/2:(r+1)*cols/2], scales[r*cols/16:(r+1)*cols/16], r); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// repackRow writes to out the ggml NVFP4 blocks of one row (repackNVFP4's
// layout) from its codes and block scales; row names it in the error.
func repackRow(out, codes, scales []byte, row int) error {
	nb := len(out) / nvfp4BlockBytes
	codes, scales = codes[:32*nb], scales[:4*nb]
	for b := 0; b < nb; b++ {
		o := out[b*nvfp4BlockBytes : (b+1)*nvfp4BlockBytes]
		// The four scale bytes at once: sign bits cleared, then a byte
		// equal to 0x7F (NaN) is a zero byte of sc ^ 0x7F7F7F7F.
		sc := binary.LittleEndian.Uint32(scales[4*b:]) & 0x7F7F7F7F
		if v := sc ^ 0x7F7F7F7F; (v-0x01010101)&^v&0x80808080 != 0 {
			for sb := range 4 {
				if byte(sc>>(8*sb)) == 0x7F {
					return fmt.Errorf("block scale of row %d, columns %d..%d is NaN", row, 64*b+16*sb, 64*b+16*sb+15)
				}
			}
		}
		binary.LittleEndian.PutUint32(o, sc)
		// Sub-block sb's 16 codes: byte k of lo holds elements 2k, 2k+1
		// and byte k of hi elements 2k+8, 2k+9, so qs[2k] = (2k | 2k+8<<4)
		// and qs[2k+1] = (2k+1 | 2k+9<<4): a holds the even output bytes,
		// c the odd ones, and spread interleaves them.
		c := codes[32*b : 32*b+32]
		for sb := range 4 {
			lo, hi := binary.LittleEndian.Uint32(c[8*sb:]), binary.LittleEndian.Uint32(c[8*sb+4:])
			a := lo&0x0F0F0F0F | (hi&0x0F0F0F0F)<<4
			d := (lo>>4)&0x0F0F0F0F | hi&0xF0F0F0F0
			binary.LittleEndian.PutUint64(o[4+8*sb:], spread(a)|spread(d)<<8)
		}
	}
	return nil
}

// spread moves byte k of x to byte 2k.
func spread(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000FFFF0000FFFF
	return (v | v<<8) & 0x00FF00FF00FF00FF
}

// readHFQuantConfig takes the quantization of hf_quant_config.json (older
// ModelOpt exports: {"producer": {"name": "modelopt"}, "quantization":
// {"quant_algo": …}}) when config.json has no quantization_config.
func (c *hfConfig) readHFQuantConfig(dir string) error {
	if raw := bytes.TrimSpace(c.QuantizationConfig); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		return nil
	}
	p := filepath.Join(dir, "hf_quant_config.json")
	b, err := safefile.ReadFile(p, MaxJSON, "hf_quant_config.json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var hq struct {
		Producer struct {
			Name string `json:"name"`
		} `json:"producer"`
		Quantization map[string]json.RawMessage `json:"quantization"`
	}
	if err := json.Unmarshal(b, &hq); err != nil {
		return fmt.Errorf("%s: not valid JSON: %w", p, err)
	}
	if len(hq.Quantization) == 0 {
		return fmt.Errorf("%s: no \"quantization\" object", p)
	}
	q := hq.Quantization
	if _, ok := q["quant_method"]; !ok {
		name, _ := json.Marshal(strings.ToLower(hq.Producer.Name))
		q["quant_method"] = name
	}
	if c.QuantizationConfig, err = json.Marshal(q); err != nil {
		return err
	}
	return c.readQuant(p)
}
