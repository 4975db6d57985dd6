package gpu

// The Q4_K and Q6_K batched-decode GEMM from registers (kernels/gemmq.cuh)
// for 1..32 rows: the weights go straight from global memory into the mma
// fragments as small integers, the activations are packed once per call
// into the B fragments, and the block scales are applied per sub-block
// (32 elements for Q4_K, 16 for Q6_K) in float32. Issue 14: the tile GEMMs
// took 3.6-4.3x one row's time at 16 rows; gemmq takes 1.26x (H200,
// docs/benchmarks.md). With q, k, v and gate, up grouped (MatMulShared) it
// also beats the whole-x GEMV at one row: an 8B Q4_K step's matmuls 3.12
// against 3.86 ms, Q6_K 4.78 against 6.95, so it takes the single row too
// (a single Q4_K row goes to gemvq first, gemvq.go).

import (
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
)

const (
	// gemmqMaxTokens is the most rows gemmq32_* takes.
	gemmqMaxTokens = 32
	// gemmqRowsPerCTA is GQ_ROWS in gemmq.cuh.
	gemmqRowsPerCTA = 128
	// gemmqMinSliceSB keeps a k slice at two super-blocks (512 elements) or
	// more, so the float32 partials stay small beside the weights they
	// cover.
	gemmqMinSliceSB = 2
	// gemmqPackMax bounds the packed activations (cols x 8*nt 16-bit
	// values): 4 MiB holds 32 tokens of 65,536 columns. Wider matrices take
	// the other GEMMs.
	gemmqPackMax = 4 << 20
	// gemmqInvOff is where the fp16 flavour's inverse row scales (32
	// floats) follow the packed activations in the workspace.
	gemmqInvOff  = gemmqPackMax
	gemmqWSBytes = gemmqInvOff + 256
	// gemmqSplitCTAsPerSM is the grid the k split aims for, in CTAs per SM,
	// for every token count alike: a row's result then does not depend on
	// how many rows share its step (gemmq8/16/32 differ only in the token
	// columns the same mmas carry). 2 since the H200 sweep of 2026-12-03
	// (2, 3, 4, 6: 2 was fastest at 8 and 16 rows, 16 rows 4.80 against
	// 5.48 ms a step at 3, and level at 32; docs/benchmarks.md).
	gemmqSplitCTAsPerSM = 2
)

// gemmqTiles returns the kernel for n rows and its token tiles of 8.
func gemmqTiles(n int) (name string, nt int) {
	switch {
	case n <= 8:
		return "gemmq8_", 1
	case n <= 16:
		return "gemmq16_", 2
	default:
		return "gemmq32_", 4
	}
}

// gemmqSplits plans the k slices of a gemmq call over weights of rows
// rows in tiles row tiles (one weight: cdiv(rows, gemmqRowsPerCTA)):
// enough CTAs to fill ctasPerSM on each of sms SMs, slices of at least
// gemmqMinSliceSB super-blocks where the width allows, partials of
// gemmqMaxTokens rows within gemmSplitMax (so the plan is the same at
// every row count). splits == 1 writes y directly. Every slice is
// non-empty.
func gemmqSplits(tiles, rows, cols, sms, ctasPerSM int) (splits, kSB int) {
	nsb := cols / 256
	s := min(cdiv(max(ctasPerSM, 1)*max(sms, 1), max(tiles, 1)), max(1, nsb/gemmqMinSliceSB), gemmSplitMaxK)
	if per := int64(gemmqMaxTokens) * int64(rows) * 4; int64(s)*per > gemmSplitMax {
		s = int(gemmSplitMax / per)
	}
	if s < 2 {
		return 1, nsb
	}
	kSB = cdiv(nsb, s)
	return cdiv(nsb, kSB), kSB
}

// useGemmq reports whether MatMul takes gemmq for n rows of a weight of
// type typ (Q4_K, Q6_K) and cols columns.
func (b *Backend) useGemmq(n int, typ gguf.Type, cols int) bool {
	if b.opts.NoGEMMQ || (typ != gguf.Q4_K && typ != gguf.Q6_K) || n > gemmqMaxTokens || cols%256 != 0 {
		return false
	}
	minTok := max(b.opts.GEMMQMinTokens, 1)
	if n < minTok {
		return false
	}
	_, nt := gemmqTiles(n)
	return int64(cols)*int64(8*nt)*2 <= gemmqPackMax
}

// gemmq queues the pack of x (unless x is already packed), y = x·Wᵀ with
// gemmq{8,16,32}_* and the reduce of the partials when k is split. done is
// false when a workspace could not be had: the caller then takes the other
// GEMMs.
func (b *Backend) gemmq(c *Ctx, y, x DevicePtr, n int, w *Weight, suf string) (done bool, err error) {
	name, _ := gemmqTiles(n)
	splits, kSB := gemmqSplits(cdiv(w.rows, gemmqRowsPerCTA), w.rows, w.cols, c.Device().Info().SMs, b.gemmqCTAsPerSM())
	xp, xinv, ok, err := b.gemmqPack(c, x, n, w, suf, splits)
	if !ok || err != nil {
		return ok, err
	}
	// matmulRaw's note went to the pack, if it ran: again for the GEMM
	c.profNote(float64(w.rows)*float64(w.rowBytes), 2*float64(n)*float64(w.rows)*float64(w.cols))
	grid := Dim3{X: cdiv(w.rows, gemmqRowsPerCTA), Y: splits}
	if splits == 1 {
		err = b.launch(c, name+suf, grid, Dim3{X: 128}, w.raw, w.rowBytes, w.rows, w.cols, xp, xinv, y, n, kSB)
	} else if err = b.launch(c, name+suf, grid, Dim3{X: 128}, w.raw, w.rowBytes, w.rows, w.cols, xp, xinv, b.splitWS, n, kSB); err == nil {
		count := int64(n) * int64(w.rows)
		err = b.launch(c, "gemm_reduce_"+suf, Dim3{X: int(cdiv64(count, 256))}, Dim3{X: 256}, b.splitWS, y, count, splits)
	}
	if err != nil {
		return true, err
	}
	b.keepPacked(x, n, []*Weight{w}, []DevicePtr{y}, c.writes)
	return true, nil
}

// gemmqGroupMax is the most weights gemmqg_* takes in one launch.
const gemmqGroupMax = 3

// gemmqGroups splits the weights of one MatMulShared call into the sets
// one gemmqg launch takes (indices into ws, in order): up to
// gemmqGroupMax weights of one type, width and row size, each accepted by
// ok (gemmq takes its rows, no second-level scale). A weight that finds no
// partner is a set of its own, for MatMul alone. Q4_K_M files keep some
// layers' v in Q6_K: their q and k still share a launch.
func gemmqGroups(ws []*Weight, ok func(*Weight) bool) [][]int {
	var sets [][]int
	taken := make([]bool, len(ws))
	for i, w := range ws {
		if taken[i] {
			continue
		}
		taken[i] = true
		set := []int{i}
		for j := i + 1; j < len(ws) && len(set) < gemmqGroupMax && ok(w); j++ {
			v := ws[j]
			if !taken[j] && ok(v) && v.info.Type == w.info.Type && v.cols == w.cols && v.rowBytes == w.rowBytes {
				taken[j] = true
				set = append(set, j)
			}
		}
		sets = append(sets, set)
	}
	return sets
}

// groupable reports whether gemmqGroup may take n rows times w.
func (b *Backend) groupable(n int, w *Weight) bool {
	return !b.opts.NoGEMMQGroup && w.scale == 0 && b.useGemmq(n, w.info.Type, w.cols)
}

// gemmqGroup queues ys[i] = x·ws[i]ᵀ for a set of gemmqGroups (two or
// three weights) as one gemmqg launch over all their row tiles (k split as one
// weight of their summed rows) and, when k is split, one gemmq_reduce3.
// done is false when a workspace could not be had.
func (b *Backend) gemmqGroup(c *Ctx, ys []DevicePtr, x DevicePtr, n int, ws []*Weight) (done bool, err error) {
	w0 := ws[0]
	if b.useGemvq(n, w0) { // one row of Q4_K: the set in one gemvq launch
		return b.gemvq(c, ys, x, ws)
	}
	suf := kernelSuffix[w0.info.Type]
	var raw [gemmqGroupMax]DevicePtr
	var out [gemmqGroupMax]DevicePtr
	var rows [gemmqGroupMax]int
	tiles, total := 0, 0
	var bytes float64
	for i, w := range ws {
		raw[i], out[i], rows[i] = w.raw.Ptr, ys[i], w.rows
		tiles += cdiv(w.rows, gemmqRowsPerCTA)
		total += w.rows
		bytes += float64(w.rows) * float64(w.rowBytes)
	}
	splits, kSB := gemmqSplits(tiles, total, w0.cols, c.Device().Info().SMs, b.gemmqCTAsPerSM())
	xp, xinv, ok, err := b.gemmqPack(c, x, n, w0, suf, splits)
	if !ok || err != nil {
		return ok, err
	}
	c.profNote(bytes, 2*float64(n)*float64(total)*float64(w0.cols)) // the profile's bytes and flops of the next launch
	name, _ := gemmqTiles(n)
	if err := b.launch(c, "gemmqg"+strings.TrimPrefix(name, "gemmq")+suf, Dim3{X: tiles, Y: splits}, Dim3{X: 128},
		raw[0], raw[1], raw[2], w0.rowBytes, rows[0], rows[1], rows[2], w0.cols, xp, xinv,
		out[0], out[1], out[2], b.splitWS, n, kSB, splits); err != nil {
		return true, err
	}
	if splits > 1 {
		n0, n1, count := int64(n)*int64(rows[0]), int64(n)*int64(rows[0]+rows[1]), int64(n)*int64(total)
		if err := b.launch(c, "gemmq_reduce3_"+suf, Dim3{X: int(cdiv64(count, 256))}, Dim3{X: 256},
			b.splitWS, out[0], out[1], out[2], n0, n1, count, splits); err != nil {
			return true, err
		}
	}
	b.keepPacked(x, n, ws, ys, c.writes)
	b.groupCalls++
	return true, nil
}

func (b *Backend) gemmqCTAsPerSM() int {
	if b.opts.GEMMQCTAsPerSM > 0 {
		return b.opts.GEMMQCTAsPerSM
	}
	return gemmqSplitCTAsPerSM
}

// gemmqPack queues the pack of n rows of x for weights like w (unless the
// workspace holds them already) and returns the packed fragments and the
// fp16 flavour's inverse row scales. ok is false when a workspace (the
// split partials' too, for splits > 1) could not be had.
func (b *Backend) gemmqPack(c *Ctx, x DevicePtr, n int, w *Weight, suf string, splits int) (xp, xinv DevicePtr, ok bool, err error) {
	if !b.gemmqWorkspace(c) || (splits > 1 && !b.splitWorkspace(c)) {
		return 0, 0, false, nil
	}
	_, nt := gemmqTiles(n)
	xp, xinv = b.gemmqWS.Ptr, b.gemmqWS.Ptr.Add(gemmqInvOff)
	key := gemmqPacked{x: x, n: n, cols: w.cols, nt: nt, t: w.info.Type}
	if b.packed.reusable(key, c.writes) {
		b.packReuses++
	} else if err := b.launch(c, "gemmq_pack_"+suf, Dim3{X: cdiv(w.cols, 1024), Y: 8 * nt}, Dim3{X: 256}, x, w.cols, n, nt, xp, xinv); err != nil {
		b.packed = gemmqPacked{}
		return 0, 0, true, err
	}
	b.packed = gemmqPacked{} // valid again only once the caller's launches are queued (keepPacked)
	return xp, xinv, true, nil
}

// keepPacked marks the workspace as holding x packed for weights like
// ws[0] once a gemmq call's launches are queued: the next gemmq on the
// same x (q, k and v, or gate and up, read one x) reuses it if nothing
// else is queued in between (writes) and none of the call's outputs ys[i]
// (n rows of ws[i]) overlaps x.
func (b *Backend) keepPacked(x DevicePtr, n int, ws []*Weight, ys []DevicePtr, writes uint64) {
	w := ws[0]
	xEnd := x.Add(int64(n) * int64(w.cols) * 4)
	for i, y := range ys {
		if yEnd := y.Add(int64(n) * int64(ws[i].rows) * 4); yEnd > x && xEnd > y {
			return
		}
	}
	_, nt := gemmqTiles(n)
	b.packed = gemmqPacked{x: x, n: n, cols: w.cols, nt: nt, t: w.info.Type, writes: writes}
}

// gemmqPacked names the activations gemmq's workspace holds: x's address,
// rows, width, token tiles and the pack order's weight type, valid while
// the context's write count is still writes (nothing queued since).
type gemmqPacked struct {
	x           DevicePtr
	n, cols, nt int
	t           gguf.Type
	writes      uint64
}

func (p gemmqPacked) reusable(k gemmqPacked, writes uint64) bool {
	return p.x != 0 && p.writes == writes && p.x == k.x && p.n == k.n && p.cols == k.cols && p.nt == k.nt && p.t == k.t
}

// gemmqWorkspace allocates the packed-activation workspace at first use
// (a plain allocation, fine while a step is being recorded).
func (b *Backend) gemmqWorkspace(c *Ctx) bool {
	if b.gemmqWS.Ptr != 0 {
		return true
	}
	if b.gemmqWSErr != nil {
		return false
	}
	var err error
	if b.gemmqWS, err = c.Alloc(gemmqWSBytes, "gemmq activation workspace"); err != nil {
		b.gemmqWS, b.gemmqWSErr = Buffer{}, err
		return false
	}
	return true
}
