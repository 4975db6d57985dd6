package gpu

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/ftchat/ftchat/engine/model"
)

// normV2 selects the register-resident RMSNorm kernels of kernels/ops.cu
// (rmsnorm2, and add_rmsnorm for AddRMSNorm): the default (FTCHAT_FUSE=0
// turns it off), or tests.
// Off, RMSNorm runs the first rmsnorm kernel and AddRMSNorm issues add
// and rmsnorm, as the model code did before the extension.
var normV2 atomic.Bool

// On by default since the H200 run of 2026-12-02 (docs/benchmarks.md);
// FTCHAT_FUSE=0 keeps the first kernels.
func init() { normV2.Store(os.Getenv("FTCHAT_FUSE") != "0") }

// rmsnormKernel is the kernel RMSNorm launches.
func rmsnormKernel() string {
	if normV2.Load() {
		return "rmsnorm2"
	}
	return "rmsnorm"
}

// AddRMSNorm: x += delta, then dst = RMSNorm(x)·w (model.AddRMSNormer).
// With normV2 one add_rmsnorm launch, which gives the same bits as Add
// followed by RMSNorm (both run kernels/ops.cu's rms_row).
func (b *Backend) AddRMSNorm(dst, x, delta model.Tensor, w model.Weight, eps float32) {
	if !normV2.Load() {
		b.Add(x, delta)
		b.RMSNorm(dst, x, w, eps)
		return
	}
	d, ok1 := b.ten(dst, "AddRMSNorm")
	s, ok2 := b.ten(x, "AddRMSNorm")
	a, ok3 := b.ten(delta, "AddRMSNorm")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	g, ok := b.vec(w, s.cols, "AddRMSNorm")
	if !ok {
		return
	}
	if d.rows != s.rows || d.cols != s.cols || a.rows != s.rows || a.cols != s.cols {
		b.fail(fmt.Errorf("gpu: AddRMSNorm: dst %dx%d, x %dx%d, delta %dx%d", d.rows, d.cols, s.rows, s.cols, a.rows, a.cols))
		return
	}
	if s.rows == 0 {
		return
	}
	b.post(func(c *Ctx) error {
		return b.launch(c, "add_rmsnorm", Dim3{X: s.rows}, Dim3{X: 256}, d.buf, s.buf, a.buf, g.f32, s.cols, eps)
	})
}
