package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ftchat/ftchat/engine/gguf"
)

// ScaledLoader is implemented by backends that apply a second-level scale
// to a weight's outputs: the float32 <name>.scale tensors llama.cpp's
// converter writes beside NVFP4 weights (ModelOpt weight_scale_2). scale
// has one value for the whole tensor or one per equal group of output rows
// (one per expert of a stacked-experts tensor); every product W·x of output
// row r is multiplied by scale[r / (rows / len(scale))], and so is an
// embedding row.
type ScaledLoader interface {
	LoadScaledWeight(info gguf.TensorInfo, raw []byte, scale []float32) (Weight, error)
}

// secondScale reads the <name>.scale tensor of weight ti, if the file has
// one: nil when absent or all ones. A per-expert scale needs dims of three
// entries ([in, out, n_expert]) and n_expert values; anything else is
// refused with one message naming the tensor and the shapes.
func (ld *loader) secondScale(ti gguf.TensorInfo, dims []int) ([]float32, error) {
	name := gguf.ScaleTensorName(ti.Name)
	st, ok := ld.f.Tensor(name)
	if !ok {
		return nil, nil
	}
	want := "[1]"
	n := uint64(1)
	if len(dims) == 3 {
		n = uint64(dims[2])
		want = fmt.Sprintf("[1] or [%d] (one per expert)", n)
	}
	e := st.Elements()
	if st.Type != gguf.F32 || len(st.Dims) > 1 || (e != 1 && e != n) {
		return nil, fmt.Errorf("tensor %s (%s %v) must be F32 of shape %s, the second-level scale of %s", name, st.Type, st.Dims, want, ti.Name)
	}
	raw, err := ld.f.TensorData(st)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	s := make([]float32, e)
	ones := true
	for i := range s {
		s[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if math.IsNaN(float64(s[i])) || math.IsInf(float64(s[i]), 0) {
			return nil, fmt.Errorf("tensor %s: value %d is %v", name, i, s[i])
		}
		ones = ones && s[i] == 1
	}
	if ones {
		return nil, nil
	}
	return s, nil
}

// loadWeight uploads ti, with its second-level scale when the file has one.
func (ld *loader) loadWeight(ti gguf.TensorInfo, raw []byte, dims []int) (Weight, error) {
	return ld.loadPart(ti, ti, raw, dims)
}

// loadPart uploads part (raw), a piece of the file's tensor src split at
// load (qwen3next's ssm_ba), with src's per-tensor scale when it has one.
func (ld *loader) loadPart(src, part gguf.TensorInfo, raw []byte, dims []int) (Weight, error) {
	scale, err := ld.secondScale(src, dims)
	if err != nil || scale == nil {
		if err != nil {
			return nil, err
		}
		return ld.be.LoadWeight(part, raw)
	}
	sl, ok := ld.be.(ScaledLoader)
	if !ok {
		return nil, fmt.Errorf("tensor %s has a second-level scale (%s), which the %s backend does not apply", src.Name, gguf.ScaleTensorName(src.Name), ld.be.Name())
	}
	return sl.LoadScaledWeight(part, raw, scale)
}
