package gpu

// The single-token Q4_K GEMV on integer activations (kernels/gemvq.cuh):
// the decode row is quantized once per x to int16 in blocks of 32 with a
// float scale and sum per block, and each warp dots gemvqDefaultRows
// weight rows with dp2a (16-bit × 8-bit pairs). Issue 13: with one row,
// gemmq (gemmq.go) issued ~410 instructions a warp per KB of weights and
// Nsight Compute found it issue-bound at 1.1 TB/s on the H200; gemvq needs
// ~95 a warp per 512 bytes and reaches 2.7-3.1 TB/s on the large
// matrices. It takes the row MatMul and MatMulShared would give gemmq:
// Q4_K weights without a second-level scale, one row, cols % 256 == 0.
// int16 keeps the activations closer than gemmq's 16-bit float operands
// (int8, as llama.cpp's MMVQ quantizes them, measured 0.4-0.7% off on
// random Q4_K dots against bf16's 0.2%). BackendOptions.NoGEMVQ keeps the
// row on gemmq.

import "github.com/ftchat/ftchat/engine/gguf"

const (
	// gemvqWarps: warps a CTA of gemvq<R>_q4_k, each R rows.
	gemvqWarps = 4
	// gemvqDefaultRows: rows a warp. 4 since the H200 run of 2026-12-03:
	// a Llama-8B Q4_K step's one-row matmuls 3.05 ms at 1, 2.08 at 2, 1.97
	// at 4 (the R rows share the activation loads and keep R weight
	// streams in flight; warps on 4,096-column rows otherwise live for 4
	// iterations). docs/benchmarks.md.
	gemvqDefaultRows = 4
	// gemvqMaxCols bounds cols so the int16 activations and their block
	// scales and sums fit gemmq's workspace (gemmqPackMax bytes) at
	// gemvqXDOff and gemvqXSOff.
	gemvqMaxCols = 1 << 19
	gemvqXDOff   = 2 * gemvqMaxCols
	gemvqXSOff   = gemvqXDOff + gemvqMaxCols/32*4
	// gemvqPackedNT marks gemmqPacked entries that hold gemvq's int16
	// format (gemmq's pack has 1..4 token tiles).
	gemvqPackedNT = -1
)

// useGemvq reports whether MatMul gives n rows of w to gemvq: Q4_K, and
// Q6_K unless BackendOptions.NoGEMVQQ6K.
func (b *Backend) useGemvq(n int, w *Weight) bool {
	typ := w.info.Type
	return n == 1 && !b.opts.NoGEMVQ && !b.opts.NoGEMMQ && (typ == gguf.Q4_K || typ == gguf.Q6_K && !b.opts.NoGEMVQQ6K) &&
		w.scale == 0 && w.cols%256 == 0 && w.cols <= gemvqMaxCols
}

// gemvq queues ys[i] = x·ws[i]ᵀ for one row x and one to three weights
// of one type (useGemvq's), width and row size: the pack of x (unless the workspace
// holds it already) and one gemvq launch over all their rows. done is
// false when the workspace could not be had.
func (b *Backend) gemvq(c *Ctx, ys []DevicePtr, x DevicePtr, ws []*Weight) (done bool, err error) {
	if len(ws) == 0 || len(ws) > gemmqGroupMax || len(ys) != len(ws) {
		return false, nil
	}
	if !b.gemmqWorkspace(c) {
		return false, nil
	}
	w0 := ws[0]
	suf := kernelSuffix[w0.info.Type]
	xq := b.gemmqWS.Ptr
	xd, xs := xq.Add(gemvqXDOff), xq.Add(gemvqXSOff)
	// the int16 pack is the same for every type: a Q4_K_M layer's Q6_K v
	// reuses what its Q4_K q and k packed (t stays unset)
	key := gemmqPacked{x: x, n: 1, cols: w0.cols, nt: gemvqPackedNT}
	if b.packed.reusable(key, c.writes) {
		b.packReuses++
	} else if err := b.launch(c, "gemvq_pack_"+suf, Dim3{X: cdiv(w0.cols/32, 8)}, Dim3{X: 256}, x, w0.cols, xq, xd, xs); err != nil {
		b.packed = gemmqPacked{}
		return true, err
	}
	b.packed = gemmqPacked{}
	var raw [gemmqGroupMax]DevicePtr
	var out [gemmqGroupMax]DevicePtr
	var rows [gemmqGroupMax]int
	total := 0
	var bytes float64
	for i, w := range ws {
		raw[i], out[i], rows[i] = w.raw.Ptr, ys[i], w.rows
		total += w.rows
		bytes += float64(w.rows) * float64(w.rowBytes)
	}
	c.profNote(bytes, 2*float64(total)*float64(w0.cols))
	name, per := gemvqKernel(b.opts.GEMVQRowsPerWarp)
	name += suf
	if err := b.launch(c, name, Dim3{X: cdiv(total, gemvqWarps*per)}, Dim3{X: 32 * gemvqWarps},
		raw[0], raw[1], raw[2], w0.rowBytes, rows[0], rows[1], rows[2], w0.cols, xq, xd, xs,
		out[0], out[1], out[2]); err != nil {
		return true, err
	}
	if len(ws) > 1 {
		b.groupCalls++
	}
	// the next matmul on the same x (q, k, v; gate, up) reuses the pack
	// unless an output overlaps x (keepPacked's rule)
	xEnd := x.Add(int64(w0.cols) * 4)
	for i, y := range ys {
		if yEnd := y.Add(int64(ws[i].rows) * 4); yEnd > x && xEnd > y {
			return true, nil
		}
	}
	key.writes = c.writes
	b.packed = key
	return true, nil
}

// gemvqKernel returns the gemvq kernel (less its type suffix) for rows
// rows a warp (1, 2 or 4; 0 or anything else: gemvqDefaultRows) and the
// rows it takes. Each row's result is the same bit for bit whichever it
// is (TestMatMulGemvq).
func gemvqKernel(rows int) (prefix string, per int) {
	if rows != 1 && rows != 2 && rows != 4 {
		rows = gemvqDefaultRows
	}
	switch rows {
	case 1:
		return "gemvq_", 1
	case 2:
		return "gemvq2_", 2
	}
	return "gemvq4_", 4
}
