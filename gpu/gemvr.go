package gpu

import (
	"os"

	"github.com/ftchat/ftchat/engine/gguf"
)

// The single-token GEMV with several rows per warp (kernels/gemvr.cuh):
// one copy of x in shared memory per CTA of rowsPerCTA rows, and the first
// weight lines touched before that copy. FTCHAT_GEMV=rows selects it in
// place of gemvx (every type whose module has it: all mm_<type>).

var gemvrTypes = map[gguf.Type]bool{
	gguf.F32: true, gguf.F16: true, gguf.BF16: true,
	gguf.Q4_0: true, gguf.Q4_1: true, gguf.Q5_0: true, gguf.Q5_1: true, gguf.Q8_0: true, gguf.Q8_1: true,
	gguf.Q2_K: true, gguf.Q3_K: true, gguf.Q4_K: true, gguf.Q5_K: true, gguf.Q6_K: true,
	gguf.MXFP4: true, gguf.NVFP4: true, gguf.FP8_E4M3: true, gguf.FP8_E4M3_B32: true,
}

// gemvrByEnv: FTCHAT_GEMV=rows makes gemvr the single-token GEMV.
var gemvrByEnv = os.Getenv("FTCHAT_GEMV") == "rows"

// useGemvr reports whether a single-token whole-x GEMV of w uses gemvr
// (gemvMode 3 forces it, for tests; 1 and 2 force the other kernels).
func (b *Backend) useGemvr(w *Weight) bool {
	if !gemvrTypes[w.info.Type] {
		return false
	}
	switch b.gemvMode.Load() {
	case 3:
		return true
	case 0:
		return gemvrByEnv && !b.opts.ChunkedGEMV
	}
	return false
}

// gemvrRowsPerCTA: one row per warp (8 per CTA) up to about 4 CTAs per SM
// of those; larger matrices give each CTA more rows, in pairs per warp, so
// there stay about 4 CTAs per SM and each copies x once for all its rows.
func gemvrRowsPerCTA(rows, sms int) int {
	target := 4 * max(sms, 1)
	if rows <= target*gemvWarps {
		return gemvWarps
	}
	pair := 2 * gemvWarps
	return cdiv(cdiv(rows, target), pair) * pair
}

// launchGemvr queues y = W·x for one token with gemvr (x needs cols*4
// bytes of shared memory, within gemvxSmem).
func (b *Backend) launchGemvr(c *Ctx, w *Weight, x, y DevicePtr) error {
	f, err := b.fn(c, "gemvr_"+kernelSuffix[w.info.Type])
	if err != nil {
		return err
	}
	shm := w.cols * 4
	if shm > 48<<10 && b.smemSet[f] < shm {
		if err := c.SetMaxDynamicShared(f, b.gemvxSmem(c)); err != nil {
			return err
		}
		b.smemSet[f] = b.gemvxSmem(c)
	}
	per := gemvrRowsPerCTA(w.rows, c.Device().Info().SMs)
	return c.Launch(f, Dim3{X: cdiv(w.rows, per)}, Dim3{X: 32 * gemvWarps}, shm, c.Stream(),
		w.raw, w.rowBytes, w.rows, w.cols, x, y, per)
}
