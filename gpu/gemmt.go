package gpu

// The skinny tensor-core GEMM (kernels/gemmt.cuh) for the GEMMMinTokens..32
// rows of batched decode steps: one pass over the weights for all rows, a
// warp per 32 weight rows, split over k when its CTAs alone would leave
// SMs idle. Issue 14: at 16 rows the 64x64-tile GEMM ran at 23-270 GB/s.

const (
	// gemmtMaxTokens is the most rows gemmt32_* takes.
	gemmtMaxTokens = 32
	// gemmtRowsPerCTA is GT_WARPS*GT_ROWS in gemmt.cuh.
	gemmtRowsPerCTA = 256
	// gemmtStepK is GT_K: the k elements a warp step covers.
	gemmtStepK = 64
	// gemmtCTAsPerSM: two CTAs of 8 warps (128 registers a thread) fit an SM.
	gemmtCTAsPerSM = 2
	// gemmtMinSliceSteps keeps a k slice at 4 steps or more where the
	// row count allows, so a warp's fixed costs stay small beside its loads.
	gemmtMinSliceSteps = 4
)

// gemmtSplits plans the k slices of a gemmt call: enough CTAs for
// gemmtCTAsPerSM per SM, slices of at least gemmtMinSliceSteps steps (when
// there are that many), partials within gemmSplitMax. splits == 1 writes y
// directly. Every slice is non-empty.
func gemmtSplits(n, rows, cols, sms int) (splits, kSteps int) {
	steps := cdiv(cols, gemmtStepK) // units of 32, two a step
	ctas := cdiv(rows, gemmtRowsPerCTA)
	s := min(cdiv(gemmtCTAsPerSM*max(sms, 1), ctas), max(1, steps/gemmtMinSliceSteps), gemmSplitMaxK)
	if per := int64(n) * int64(rows) * 4; int64(s)*per > gemmSplitMax {
		s = int(gemmSplitMax / per)
	}
	if s < 2 {
		return 1, steps
	}
	kSteps = cdiv(steps, s)
	return cdiv(steps, kSteps), kSteps
}

// useGemmt reports whether MatMul takes gemmt for n rows (the caller has
// checked n >= GEMMMinTokens and cols % 32 == 0).
func (b *Backend) useGemmt(n int) bool {
	return n <= gemmtMaxTokens && b.opts.SkinnyGEMM
}

// gemmt queues y = x·Wᵀ for n <= gemmtMaxTokens rows with gemmt16_* or
// gemmt32_*, and the reduce of its partials when it splits k. done is
// false when the split needs the workspace and it could not be had: the
// caller then uses the tile GEMM.
func (b *Backend) gemmt(c *Ctx, y, x DevicePtr, n int, w *Weight, suf string) (done bool, err error) {
	splits, kSteps := gemmtSplits(n, w.rows, w.cols, c.Device().Info().SMs)
	name := "gemmt32_" + suf
	if n <= 16 {
		name = "gemmt16_" + suf
	}
	grid := Dim3{X: cdiv(w.rows, gemmtRowsPerCTA), Y: splits}
	if splits == 1 {
		return true, b.launch(c, name, grid, Dim3{X: 256}, w.raw, w.rowBytes, w.rows, w.cols, x, y, n, kSteps)
	}
	if !b.splitWorkspace(c) {
		return false, nil
	}
	if err := b.launch(c, name, grid, Dim3{X: 256}, w.raw, w.rowBytes, w.rows, w.cols, x, b.splitWS, n, kSteps); err != nil {
		return true, err
	}
	count := int64(n) * int64(w.rows)
	return true, b.launch(c, "gemm_reduce_"+suf, Dim3{X: int(cdiv64(count, 256))}, Dim3{X: 256}, b.splitWS, y, count, splits)
}
