package gpu

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// fp4ScaleKernel multiplies outputs by an NVFP4 weight's per-tensor
// second-level scale (module mm_nvfp4).
const fp4ScaleKernel = "scale_nvfp4"

// LoadScaledWeight is LoadWeight for an NVFP4 weight with a per-tensor
// second-level scale (model.ScaledLoader), applied after its matmuls and
// embedding lookups. Per-expert scales, and scales on stacked experts, are
// refused: the grouped MoE kernels (moe.go) do not apply them yet.
func (b *Backend) LoadScaledWeight(info gguf.TensorInfo, raw []byte, scale []float32) (model.Weight, error) {
	switch {
	case info.Type != gguf.NVFP4:
		return nil, fmt.Errorf("gpu: tensor %q: second-level scales are supported for NVFP4 weights only, not %s", info.Name, info.Type)
	case len(scale) != 1 || len(info.Dims) == 3:
		return nil, fmt.Errorf("gpu: tensor %q: per-expert NVFP4 scales (%d values) are not applied by the GPU MoE yet; use the CPU backend", info.Name, len(scale))
	case scale[0] == 0:
		return nil, fmt.Errorf("gpu: tensor %q: second-level scale 0", info.Name)
	}
	mw, err := b.LoadWeight(info, raw)
	if err != nil {
		return nil, err
	}
	w := mw.(*Weight)
	w.scale = scale[0]
	return w, nil
}

// scaleOut queues y[:n] *= s.
func (b *Backend) scaleOut(c *Ctx, y DevicePtr, n int64, s float32) error {
	return b.launch(c, fp4ScaleKernel, Dim3{X: int(cdiv64(n, 256))}, Dim3{X: 256}, y, n, s)
}

func cdiv64(a, b int64) int64 { return (a + b - 1) / b }
