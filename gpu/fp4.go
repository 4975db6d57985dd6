package gpu

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// fp4ScaleKernel multiplies outputs by an NVFP4 weight's per-tensor
// second-level scale (module mm_nvfp4).
const fp4ScaleKernel = "scale_nvfp4"

// hostScaledWeight is implemented by weights LoadWeight keeps in host RAM
// (offload.go) that can take a second-level scale; LoadScaledWeight hands
// such a weight its scale instead of refusing it.
type hostScaledWeight interface {
	setSecondScale(scale []float32) error
}

// LoadScaledWeight is LoadWeight with a second-level scale
// (model.ScaledLoader), as the CPU backend applies it:
//   - a matrix (2 dims) of NVFP4 or FP8_E4M3 (Hugging Face per-tensor
//     FP8) takes one per-tensor value, applied after its matmuls and
//     embedding lookups (w.scale);
//   - stacked experts (3 dims, [in, out, n_expert]) of any type take one
//     value per expert, or one for all, which the MoE kernels apply to
//     each expert's output rows. The vector of n_expert floats lives in
//     the weight's f32 buffer, which stacked experts do not otherwise use
//     (expertScales).
func (b *Backend) LoadScaledWeight(info gguf.TensorInfo, raw []byte, scale []float32) (model.Weight, error) {
	experts := len(info.Dims) == 3
	switch {
	case len(scale) == 0:
		return nil, fmt.Errorf("gpu: tensor %q: empty second-level scale", info.Name)
	case experts && info.Dims[2] == 0:
		return nil, fmt.Errorf("gpu: tensor %q: no experts", info.Name)
	case experts && len(scale) != 1 && uint64(len(scale)) != info.Dims[2]:
		return nil, fmt.Errorf("gpu: tensor %q: %d second-level scales for %d experts; want 1 or one per expert", info.Name, len(scale), info.Dims[2])
	case !experts && info.Type != gguf.NVFP4 && info.Type != gguf.FP8_E4M3:
		return nil, fmt.Errorf("gpu: tensor %q: second-level scales on matrices are supported for NVFP4 and FP8_E4M3 weights only, not %s", info.Name, info.Type)
	case !experts && len(scale) != 1:
		return nil, fmt.Errorf("gpu: tensor %q: %d second-level scales for a matrix; the GPU backend takes one per tensor", info.Name, len(scale))
	case !experts && scale[0] == 0:
		return nil, fmt.Errorf("gpu: tensor %q: second-level scale 0", info.Name)
	}
	mw, err := b.LoadWeight(info, raw)
	if err != nil {
		return nil, err
	}
	w, ok := mw.(*Weight)
	if !ok {
		if hw, ok := mw.(hostScaledWeight); ok {
			if err := hw.setSecondScale(scale); err != nil {
				b.FreeWeight(mw)
				return nil, err
			}
			return mw, nil
		}
		b.FreeWeight(mw)
		return nil, fmt.Errorf("gpu: tensor %q: the host-resident copy (%T) does not apply second-level scales", info.Name, mw)
	}
	if !experts {
		w.scale = scale[0]
		return w, nil
	}
	vec := make([]float32, info.Dims[2])
	for i := range vec {
		vec[i] = scale[min(i, len(scale)-1)]
	}
	err = b.dev.Do(func(c *Ctx) error {
		if w.f32.Ptr != 0 {
			return fmt.Errorf("its float32 buffer is taken")
		}
		var err error
		if w.f32, err = c.Alloc(int64(len(vec))*4, "weight "+info.Name+" (per-expert scales)"); err != nil {
			return err
		}
		return Upload(c, w.f32.Ptr, vec)
	})
	if err != nil {
		b.FreeWeight(w)
		return nil, fmt.Errorf("gpu: loading the second-level scales of %s: %w", info.Name, err)
	}
	return w, nil
}

// expertScales is the device address of stacked experts' per-expert
// second-level scales (n_expert floats), 0 when the weight has none.
func (w *Weight) expertScales() DevicePtr {
	if len(w.info.Dims) != 3 {
		return 0
	}
	return w.f32.Ptr
}

// scaleOut queues y[:n] *= s.
func (b *Backend) scaleOut(c *Ctx, y DevicePtr, n int64, s float32) error {
	return b.launch(c, fp4ScaleKernel, Dim3{X: int(cdiv64(n, 256))}, Dim3{X: 256}, y, n, s)
}

func cdiv64(a, b int64) int64 { return (a + b - 1) / b }
