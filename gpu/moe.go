package gpu

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// Mixture-of-experts feed-forward on the device (kernels/moe.cu, moe.cuh).
//
// Every path routes on the device: router logits in float32 (moe_router_rows
// for up to 16 rows, moe_router_sk split over k for batches; other router
// types through MatMul), then moe_topk (softmax,
// top-k, optional renormalisation; one warp per token) writes the expert
// ids and weights to device memory. No value crosses to the host, so a
// decode step stays one recordable list of launches (graph.go).
//
//   - Decode (at most moeGemvMaxTok rows): moe_gemv_gu (gate and up of
//     every (token, slot) pair in one launch, silu(gate)*up) and
//     moe_gemv_dn (down for every token, summing its top-k experts with
//     their weights into dst): 4 launches with the router. FTCHAT_MOEV=2
//     takes moe_gemv2_gu / moe_gemv2_dn instead (same arguments, a warp
//     per 2 rows, activation staged in shared memory; moe_gemv2.cuh).
//   - Prefill: moe_sort groups the (token, slot) pairs by expert (histogram,
//     scan, permutation and a list of tiles of at most moeBM pairs of one
//     expert), moe_gemm_gu runs gate and up of all active experts as one
//     grouped tensor-core GEMM over the gathered rows, moe_gemm_dn the
//     down projection, and moe_gather_sum adds each token's top-k rows with
//     their weights into dst: 6 launches per chunk of moeChunkTok tokens.
//
// The grid of the grouped GEMMs is sized by a bound on the number of
// tiles (pairs/moeBM + active experts) that depends only on the batch
// shape; tiles past the real count exit at once.

const (
	moeBM   = 32 // MOE_BM in kernels/moe_tile.cuh: pairs per grouped-GEMM tile
	moeRows = 2  // MOE_ROWS in kernels/moe.cuh: output rows per decode-GEMV CTA
	// moeGemvMaxTok: batches of up to this many tokens take the decode
	// GEMVs (weights read once per (token, slot) pair), larger ones the
	// grouped GEMMs (each active expert's weights once per tile). Measured
	// on the H200 at the Qwen3-30B-A3B shape (docs/benchmarks.md): 1 row
	// 58 µs GEMVs / 75 µs grouped, 16 rows 715 / 411 µs; the lines cross
	// near 2 rows.
	moeGemvMaxTok = 2
	// moeRouterRows is RS_MAXT of kernels/moe.cu: batches up to this many
	// rows take moe_router_rows (a CTA per expert), larger ones
	// moe_router_sk.
	moeRouterRows = 16
	// moeChunkTok bounds the tokens of one pass, and so the scratch
	// (pairs x (ff + dim) floats) and the grids.
	moeChunkTok = 2048
)

// moeForce overrides the path (tests and benchmarks): 0 automatic,
// 1 decode GEMVs, 2 grouped GEMMs, 3 the older per-pair GEMV path.
var moeForce atomic.Int32

// moeGemv2 selects the second decode-GEMV pair (kernels/moe_gemv2.cuh:
// a warp per MOE2_RW rows, the activation staged in shared memory):
// the default (FTCHAT_MOEV=1 turns it off), or tests. Either kernel falls back to the first pair
// when its staged activation would not fit moe2MaxShared. It also selects
// moe_topk2 for the routing (moeTopkKernel).
var moeGemv2 atomic.Bool

// On by default since the H200 run of 2026-12-02 (docs/benchmarks.md);
// FTCHAT_MOEV=1 keeps the first pair.
func init() { moeGemv2.Store(os.Getenv("FTCHAT_MOEV") != "1") }

const (
	moe2Rows      = 16       // MOE2_ROWS in kernels/moe_gemv2.cuh: output rows per CTA
	moe2UnitBytes = 36 * 4   // MOE2_UP floats per staged 32-element unit
	moe2MaxShared = 47 << 10 // dynamic shared memory without opting in (48 KiB), less the static arrays
)

// moeTyped maps the typed MoE kernel families to their module prefix:
// moe_<type> holds the grouped GEMMs, moev_<type> the decode GEMVs,
// moev2_<type> the second decode GEMVs (separate modules so each PTX stays
// small and the default path loads none of moev2).
var moeTyped = []struct{ prefix, module string }{
	{"moe_gemm_gu_", "moe_"}, {"moe_gemm_dn_", "moe_"}, {"moe_gemv_gu_", "moev_"}, {"moe_gemv_dn_", "moev_"},
	{"moe_gemv2_gu_", "moev2_"}, {"moe_gemv2_dn_", "moev2_"},
}

// moeKernels are the type-free kernels of module moe (kernels/moe.cu).
var moeKernels = []string{"moe_topk", "moe_topk2", "moe_sort", "moe_gather_sum", "moe_router_sk", "moe_router_sum", "moe_router_rows", "moe_router_topk", "moe_scale_pairs"}

// moeRouterTopk: batches of up to moeRouterRows rows route in one launch
// (moe_router_topk: the router rows, then the last CTA's top-k) where the
// top-k is moe_topk2's: the default since the H200 run of 2026-12-06;
// FTCHAT_MOE_ROUTER_TOPK=0 keeps the two launches.
var moeRouterTopk = os.Getenv("FTCHAT_MOE_ROUTER_TOPK") != "0"

// moeKernelModule returns the module of an MoE kernel of moe.cu / moe.cuh.
func moeKernelModule(name string) (string, bool) {
	for _, t := range moeTyped {
		if rest, ok := strings.CutPrefix(name, t.prefix); ok {
			for _, suf := range kernelSuffix {
				if rest == suf {
					return t.module + suf, true
				}
			}
		}
	}
	for _, k := range moeKernels {
		if name == k {
			return "moe", true
		}
	}
	return "", false
}

// MoE: dst = sum over each row's top-k experts of weight * down(silu(gate(x)) * up(x)),
// overwriting dst (model.MoE: the CPU backend's MoE is the reference).
func (b *Backend) MoE(dst, x model.Tensor, m *model.MoE) {
	if b.moeHost(dst, x, m) {
		return
	}
	d, ok1 := b.ten(dst, "MoE")
	s, ok2 := b.ten(x, "MoE")
	router, ok3 := b.wt(m.Router, "MoE router")
	gate, ok4 := b.wt(m.Gate, "MoE gate")
	up, ok5 := b.wt(m.Up, "MoE up")
	down, ok6 := b.wt(m.Down, "MoE down")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return
	}
	E, K, n, dim := m.Experts, m.TopK, s.rows, s.cols
	if err := checkMoEShapes("", E, K, [2]int{n, dim}, [2]int{router.rows, router.cols}, [2]int{gate.rows, gate.cols},
		[2]int{up.rows, up.cols}, [2]int{down.rows, down.cols}, [2]int{d.rows, d.cols}); err != nil {
		b.fail(err)
		return
	}
	if n == 0 {
		return
	}
	l := moeLayer{router: router, gate: gate, up: up, down: down, E: E, K: K, dim: dim, ff: gate.rows / E, norm: m.NormTopK,
		gateScale: gate.expertScales(), upScale: up.expertScales(), downScale: down.expertScales()}
	mode := moeForce.Load()
	b.post(func(c *Ctx) error { return b.moeDevice(c, d.buf.Ptr, s.buf.Ptr, n, l, mode) })
}

// checkMoEShapes checks an MoE call's shapes ([rows, cols] of x, the
// router, the stacked gate, up and down, and dst) for E experts, top-K;
// note follows "MoE shapes" in the error.
func checkMoEShapes(note string, E, K int, x, router, gate, up, down, dst [2]int) error {
	n, dim := x[0], x[1]
	if E <= 0 || K <= 0 || K > E || E > 1024 || router[0] != E || router[1] != dim ||
		gate[0]%E != 0 || up[0] != gate[0] || gate[1] != dim || up[1] != dim ||
		down[0] != E*dim || down[1] != gate[0]/E || dst[0] != n || dst[1] != dim {
		return fmt.Errorf("gpu: MoE shapes%s: x %dx%d, %d experts top-%d, router %dx%d, gate %dx%d, up %dx%d, down %dx%d, dst %dx%d",
			note, n, dim, E, K, router[0], router[1], gate[0], gate[1], up[0], up[1], down[0], down[1], dst[0], dst[1])
	}
	return nil
}

// moeDevice runs an MoE call whose experts are in device memory (or, for
// offload_stream.go and offload_mapped.go, viewed there) with mode as
// moeForce gives it.
func (b *Backend) moeDevice(c *Ctx, dst, x DevicePtr, n int, l moeLayer, mode int32) error {
	// The device paths need whole 32-element units and one type for gate
	// and up (the fused kernels decode both with one decoder).
	fast := l.gate.info.Type == l.up.info.Type && l.dim%32 == 0 && l.ff%32 == 0 && l.K <= 32 && mode != 3
	if !fast {
		return b.moePairs(c, dst, x, n, l)
	}
	chunk := min(moeChunkTok, 65535/l.K) // grid.y of the pair-indexed launches
	for t0 := 0; t0 < n; t0 += chunk {
		nt := min(chunk, n-t0)
		xp, dp := x.Add(int64(t0*l.dim*4)), dst.Add(int64(t0*l.dim*4))
		var err error
		if mode == 1 || (mode == 0 && nt <= moeGemvMaxTok) {
			err = b.moeDecode(c, dp, xp, nt, l)
		} else {
			err = b.moeGrouped(c, dp, xp, nt, l)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// moeLayer is one MoE call's weights and shape. gateScale, upScale and
// downScale are the experts' second-level scales (E floats each, fp4.go's
// LoadScaledWeight), 0 for none: every kernel multiplies an expert's
// output rows by its entry, as the CPU backend scales its matmuls.
type moeLayer struct {
	router, gate, up, down        *Weight
	E, K, dim, ff                 int
	norm                          bool
	gateScale, upScale, downScale DevicePtr
}

// moeScratch takes the scratch buffers of sizes (bytes) and returns them
// with a function that releases them all.
func (b *Backend) moeScratch(c *Ctx, what string, sizes ...int) ([]DevicePtr, func(), error) {
	bufs := make([]Buffer, 0, len(sizes))
	done := func() {
		for _, g := range bufs {
			b.release(g)
		}
	}
	ptrs := make([]DevicePtr, len(sizes))
	for i, n := range sizes {
		g, err := b.scratch(c, int64(n), allocName(what))
		if err != nil {
			done()
			return nil, nil, err
		}
		bufs = append(bufs, g)
		ptrs[i] = g.Ptr
	}
	return ptrs, done, nil
}

// moeDecodeSizes, moeGroupedSizes and moePairsSizes are the scratch
// buffers (bytes) of one pass of n tokens of each path; MoEScratchBytes
// sums them for the memory plan, so the plan and the allocations share
// one formula.
func moeDecodeSizes(n, E, K, ff int) []int {
	pairs := n * K
	return []int{n * E * 4, pairs * 4, pairs * 4, pairs * ff * 4}
}

func moeGroupedSizes(n, E, K, dim, ff int) []int {
	pairs := n * K
	nt := moeTiles(pairs, E)
	return []int{n * E * 4, pairs * 4, pairs * 4, pairs * 4, pairs * 4, nt * 3 * 4, pairs * ff * 4, pairs * dim * 4}
}

func moePairsSizes(n, E, K, dim, ff int) []int {
	pairs := n * K
	return []int{n * E * 4, pairs * 4, pairs * 4, pairs * ff * 4, pairs * ff * 4, pairs * dim * 4}
}

// scratchTotal is what the scratch allocator takes for buffers of sizes
// (each rounded up to 256 bytes, as Backend.scratch does).
func scratchTotal(sizes []int) int64 {
	var t int64
	for _, n := range sizes {
		t += (int64(n) + 255) &^ 255
	}
	return t
}

// MoEScratchBytes is the most device scratch one MoE call over rows
// tokens may hold at once (experts E, top-k K, model dim, expert ff): the
// largest of the three paths' buffers for a pass of min(rows, the pass
// bound) tokens (passes run one after another and release their scratch).
// The GPU memory plan reserves it beside the activations (engine
// WorkspaceBytes), so a planned prefill chunk never asks the driver for
// memory the KV pool was given.
func MoEScratchBytes(rows, E, K, dim, ff int) int64 {
	if rows <= 0 || K <= 0 {
		return 0
	}
	n := min(rows, moeChunkTok, 65535/K)
	return max(scratchTotal(moeDecodeSizes(min(n, moeGemvMaxTok), E, K, ff)),
		scratchTotal(moeGroupedSizes(n, E, K, dim, ff)),
		scratchTotal(moePairsSizes(rows, E, K, dim, ff)))
}

// moeRoute writes the n rows' router logits, then their top-k expert ids
// and weights. part (partBytes) is scratch the router may use for its
// partial sums before the caller needs it (0 for none).
func (b *Backend) moeRoute(c *Ctx, x DevicePtr, n int, l moeLayer, logits, ids, wts, part DevicePtr, partBytes int) error {
	r := l.router
	if r.info.Type == gguf.F32 && n <= moeRouterRows && r.cols%4 == 0 && moeRouterTopk && moeTopkKernel() == "moe_topk2" {
		done, err := b.routerCounter(c)
		if err != nil {
			return err
		}
		return b.launch(c, "moe_router_topk", Dim3{X: l.E}, Dim3{X: 256}, r.raw, l.E, r.cols, x, n, logits, done, l.K, l.norm, ids, wts)
	}
	if r.info.Type == gguf.F32 && n <= moeRouterRows && r.cols%4 == 0 {
		if err := b.launch(c, "moe_router_rows", Dim3{X: l.E}, Dim3{X: 256}, r.raw, l.E, r.cols, x, n, logits); err != nil {
			return err
		}
	} else if r.info.Type == gguf.F32 && r.cols%4 == 0 {
		if part == 0 {
			partBytes = 0
		}
		if err := b.routerLogits(c, r, l.E, x, n, logits, part, routerSlices(n, l.E, r.cols, c.d.info.SMs, partBytes)); err != nil {
			return err
		}
	} else if err := b.matmul(c, logits, x, n, r); err != nil {
		return err
	}
	return b.launch(c, moeTopkKernel(), Dim3{X: cdiv(n, 4)}, Dim3{X: 128}, logits, n, l.E, l.K, l.norm, ids, wts)
}

// routerCounter is moe_router_topk's count of finished CTAs: 4 bytes,
// zero between launches (the last CTA of each puts it back), allocated and
// cleared at first use.
func (b *Backend) routerCounter(c *Ctx) (DevicePtr, error) {
	if b.routerDone.Ptr != 0 {
		return b.routerDone.Ptr, nil
	}
	buf, err := c.Alloc(4, "MoE router counter")
	if err != nil {
		return 0, err
	}
	if err := c.Memset32(buf.Ptr, 0, 1); err != nil {
		c.Free(buf)
		return 0, err
	}
	b.routerDone = buf
	return buf.Ptr, nil
}

// routerSlices is the k split of moe_router_sk for n rows of E experts
// over cols: slices enough for two CTAs per SM (sms), at least 64 k each,
// their partials (slices x n x E floats) within partBytes; 1 writes the
// logits directly.
func routerSlices(n, E, cols, sms, partBytes int) int {
	tiles := cdiv(n, 64) * cdiv(E, 64)
	s := min(cdiv(2*max(sms, 1), tiles), cols/64, partBytes/(n*E*4))
	if s <= 1 {
		return 1
	}
	return cdiv(cols, routerKSlice(cols, s))
}

// routerKSlice is the k range of one of slices slices of cols (a multiple
// of moe_router_sk's k step, 16).
func routerKSlice(cols, slices int) int { return (cdiv(cols, slices) + 15) &^ 15 }

// routerLogits writes the float32 router logits of n rows of x for the
// F32 router r of E experts through moe_router_sk in slices k slices
// (routerSlices), their partials in part, then moe_router_sum.
func (b *Backend) routerLogits(c *Ctx, r *Weight, E int, x DevicePtr, n int, logits, part DevicePtr, slices int) error {
	ks := routerKSlice(r.cols, slices)
	out := logits
	if slices > 1 {
		out = part
	}
	if err := b.launch(c, "moe_router_sk", Dim3{X: cdiv(E, 64), Y: cdiv(n, 64), Z: slices}, Dim3{X: 256},
		r.raw, E, r.cols, x, n, ks, out); err != nil {
		return err
	}
	if slices == 1 {
		return nil
	}
	return b.launch(c, "moe_router_sum", Dim3{X: cdiv(n*E, 256)}, Dim3{X: 256}, part, slices, n*E, logits)
}

// moeTopkKernel is the softmax/top-k kernel moeRoute launches: moe_topk2
// (logits in registers, same bits) with moeGemv2, else moe_topk.
func moeTopkKernel() string {
	if moeGemv2.Load() {
		return "moe_topk2"
	}
	return "moe_topk"
}

// moeDecode: the GEMV path (n*K pairs <= 65535).
func (b *Backend) moeDecode(c *Ctx, dst, x DevicePtr, n int, l moeLayer) error {
	pairs := n * l.K
	p, done, err := b.moeScratch(c, "MoE decode scratch", moeDecodeSizes(n, l.E, l.K, l.ff)...)
	if err != nil {
		return err
	}
	defer done()
	logits, ids, wts, h := p[0], p[1], p[2], p[3]
	if err := b.moeRoute(c, x, n, l, logits, ids, wts, h, pairs*l.ff*4); err != nil {
		return err
	}
	v2 := moeGemv2.Load()
	gu, guGrid, guShared := "moe_gemv_gu_", Dim3{X: cdiv(l.ff, moeRows), Y: pairs}, 0
	if sh := l.dim / 32 * moe2UnitBytes; v2 && sh <= moe2MaxShared {
		gu, guGrid, guShared = "moe_gemv2_gu_", Dim3{X: cdiv(l.ff, moe2Rows), Y: pairs}, sh
	}
	// The profile's GB/s: each (token, slot) pair reads its expert's rows.
	c.profNote(2*float64(pairs*l.ff)*float64(l.gate.rowBytes), 4*float64(pairs)*float64(l.ff)*float64(l.dim))
	if err := b.launchShared(c, gu+kernelSuffix[l.gate.info.Type], guGrid, Dim3{X: 256}, guShared,
		l.gate.raw, l.up.raw, l.gate.rowBytes, l.ff, l.dim, x, l.K, ids, h, l.gateScale, l.upScale); err != nil {
		return err
	}
	dn, dnGrid, dnShared := "moe_gemv_dn_", Dim3{X: cdiv(l.dim, moeRows), Y: n}, 0
	if sh := l.K * l.ff / 32 * moe2UnitBytes; v2 && sh <= moe2MaxShared {
		dn, dnGrid, dnShared = "moe_gemv2_dn_", Dim3{X: cdiv(l.dim, moe2Rows), Y: n}, sh
	}
	c.profNote(float64(pairs*l.dim)*float64(l.down.rowBytes), 2*float64(pairs)*float64(l.dim)*float64(l.ff))
	return b.launchShared(c, dn+kernelSuffix[l.down.info.Type], dnGrid, Dim3{X: 256}, dnShared,
		l.down.raw, l.down.rowBytes, l.dim, l.ff, h, l.K, ids, wts, dst, l.downScale)
}

// moeTiles bounds the grouped GEMMs' tile count for a batch of pairs:
// sum over experts of ceil(count/moeBM) <= pairs/moeBM + active experts.
func moeTiles(pairs, experts int) int { return pairs/moeBM + min(experts, pairs) }

// moeGrouped: the grouped-GEMM path (n*K pairs <= 65535).
func (b *Backend) moeGrouped(c *Ctx, dst, x DevicePtr, n int, l moeLayer) error {
	pairs := n * l.K
	nt := moeTiles(pairs, l.E)
	p, done, err := b.moeScratch(c, "MoE prefill scratch", moeGroupedSizes(n, l.E, l.K, l.dim, l.ff)...)
	if err != nil {
		return err
	}
	defer done()
	logits, ids, wts, sorted, inv, tiles, h, y := p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]
	// h is free until moe_gemm_gu: the router's partial sums go there.
	if err := b.moeRoute(c, x, n, l, logits, ids, wts, h, pairs*l.ff*4); err != nil {
		return err
	}
	if err := b.launch(c, "moe_sort", Dim3{X: 1}, Dim3{X: 1024}, ids, pairs, l.E, nt, sorted, inv, tiles); err != nil {
		return err
	}
	if err := b.launch(c, "moe_gemm_gu_"+kernelSuffix[l.gate.info.Type], Dim3{X: cdiv(l.ff, 64), Y: nt}, Dim3{X: 256},
		l.gate.raw, l.up.raw, l.gate.rowBytes, l.ff, l.dim, x, l.K, sorted, tiles, h, l.gateScale, l.upScale); err != nil {
		return err
	}
	if err := b.launch(c, "moe_gemm_dn_"+kernelSuffix[l.down.info.Type], Dim3{X: cdiv(l.dim, 128), Y: nt}, Dim3{X: 256},
		l.down.raw, l.down.rowBytes, l.dim, l.ff, h, tiles, y, l.downScale); err != nil {
		return err
	}
	return b.launch(c, "moe_gather_sum", Dim3{X: cdiv(n*l.dim, 256)}, Dim3{X: 256}, y, inv, wts, n, l.K, l.dim, dst)
}

// moePairs is the older path, kept for shapes the fused kernels do not
// take (gate and up of different types, rows that are not whole 32-element
// units, top-k > 32): router and top-k on the device, then one expert GEMV
// per (token, slot) pair for gate, up and down (mm.cuh's moe_gemv_*),
// SwiGLU and the weighted sum.
func (b *Backend) moePairs(c *Ctx, dst, x DevicePtr, n int, l moeLayer) error {
	E, K, dim, ff := l.E, l.K, l.dim, l.ff
	pairs := n * K
	p, done, err := b.moeScratch(c, "MoE scratch", moePairsSizes(n, E, K, dim, ff)...)
	if err != nil {
		return err
	}
	defer done()
	logits, ids, wts, gb, ub, yd := p[0], p[1], p[2], p[3], p[4], p[5]
	if err := b.matmul(c, logits, x, n, l.router); err != nil {
		return err
	}
	if err := b.launch(c, "moe_route", Dim3{X: cdiv(n, 128)}, Dim3{X: 128}, logits, n, E, K, l.norm, ids, wts); err != nil {
		return err
	}
	// grid.y is limited to 65535: chunk the (token, slot) pairs, whole tokens per chunk.
	chunk := 65535 / K * K
	for p0 := 0; p0 < pairs; p0 += chunk {
		np := min(chunk, pairs-p0)
		idp := ids.Add(int64(p0 * 4))
		xin := x.Add(int64(p0 / K * dim * 4))
		if err := b.moeGemv(c, l.gate, ff, xin, K, idp, gb.Add(int64(p0*ff*4)), np); err != nil {
			return err
		}
		if err := b.moeGemv(c, l.up, ff, xin, K, idp, ub.Add(int64(p0*ff*4)), np); err != nil {
			return err
		}
	}
	if err := b.moeScalePairs(c, gb, ids, l.gateScale, pairs, ff); err != nil {
		return err
	}
	if err := b.moeScalePairs(c, ub, ids, l.upScale, pairs, ff); err != nil {
		return err
	}
	if err := b.launch(c, "swiglu", Dim3{X: cdiv(pairs*ff, 256)}, Dim3{X: 256}, gb, gb, ub, int64(pairs*ff)); err != nil {
		return err
	}
	for p0 := 0; p0 < pairs; p0 += chunk {
		np := min(chunk, pairs-p0)
		if err := b.moeGemv(c, l.down, dim, gb.Add(int64(p0*ff*4)), 1, ids.Add(int64(p0*4)), yd.Add(int64(p0*dim*4)), np); err != nil {
			return err
		}
	}
	if err := b.moeScalePairs(c, yd, ids, l.downScale, pairs, dim); err != nil {
		return err
	}
	return b.launch(c, "moe_combine", Dim3{X: cdiv(n*dim, 256)}, Dim3{X: 256}, yd, wts, n, K, dim, dst)
}

// moeScalePairs multiplies each pair's row of n outputs in y by its
// expert's second-level scale (none when scale is 0).
func (b *Backend) moeScalePairs(c *Ctx, y, ids, scale DevicePtr, pairs, n int) error {
	if scale == 0 {
		return nil
	}
	return b.launch(c, "moe_scale_pairs", Dim3{X: cdiv(pairs*n, 256)}, Dim3{X: 256}, y, ids, scale, pairs, n)
}

func (b *Backend) moeGemv(c *Ctx, w *Weight, rowsPerExpert int, x DevicePtr, xDiv int, ids, y DevicePtr, pairs int) error {
	if w.cols%32 != 0 {
		return fmt.Errorf("gpu: MoE weight %q: row length %d is not a multiple of 32", w.info.Name, w.cols)
	}
	return b.launch(c, "moe_gemv_"+kernelSuffix[w.info.Type], Dim3{X: cdiv(rowsPerExpert, gemvWarps), Y: pairs}, Dim3{X: 32 * gemvWarps},
		w.raw, w.rowBytes, rowsPerExpert, w.cols, x, xDiv, ids, y)
}

// launchShared is launch with shmem bytes of dynamic shared memory.
func (b *Backend) launchShared(c *Ctx, name string, grid, block Dim3, shmem int, args ...any) error {
	f, err := b.fn(c, name)
	if err != nil {
		return err
	}
	return c.Launch(f, grid, block, shmem, c.Stream(), args...)
}
