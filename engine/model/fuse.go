package model

// AddRMSNormer is an optional Backend extension: the residual add and the
// RMSNorm that follows it in every block, as one op, so a backend can do
// both in one pass over x (the GPU: one launch instead of two latency-bound
// ones per norm of a decode step). The result must equal Add(x, delta)
// followed by RMSNorm(dst, x, w, eps) on the same backend.
type AddRMSNormer interface {
	// AddRMSNorm: x += delta, then dst = RMSNorm(x)·w.
	AddRMSNorm(dst, x, delta Tensor, w Weight, eps float32)
}

// addRMSNorm is x += delta; h = RMSNorm(x)·w, fused where be can.
func addRMSNorm(be Backend, h, x, delta Tensor, w Weight, eps float32) {
	if f, ok := be.(AddRMSNormer); ok {
		f.AddRMSNorm(h, x, delta, w, eps)
		return
	}
	be.Add(x, delta)
	be.RMSNorm(h, x, w, eps)
}

// SharedMatMuler is an optional Backend extension: the matmuls of one x
// (q, k and v; gate and up) as one op, so a backend can queue them
// together (the GPU's batched decode: one launch over all their row tiles
// and one reduce of the split partials, instead of two launches each).
// Each dsts[i] must equal MatMul(dsts[i], x, ws[i]) on the same backend up
// to the order of float32 sums, and repeat run to run.
type SharedMatMuler interface {
	MatMulShared(dsts []Tensor, x Tensor, ws []Weight)
}

// matMulShared is dsts[i] = x·ws[i]ᵀ for each i, as one op where be can.
func matMulShared(be Backend, x Tensor, dsts []Tensor, ws []Weight) {
	if f, ok := be.(SharedMatMuler); ok {
		f.MatMulShared(dsts, x, ws)
		return
	}
	for i, w := range ws {
		be.MatMul(dsts[i], x, w)
	}
}

// RoPEKVWriter is an optional Backend extension: a block's q and k head
// RMSNorms (Qwen3; qNorm and kNorm nil for none), RoPE on q and KVWrite of
// k and v as one op, so a backend can do them in one pass (the GPU: one
// launch instead of up to four latency-bound ones per block of a decode
// step). It returns false, having queued nothing, when it does not take
// the op for this batch; the caller then runs the separate ops. The results
// must equal those ops' on the same backend.
type RoPEKVWriter interface {
	RoPEKVWrite(layer int, q, k, v Tensor, qNorm, kNorm Weight, headDim int, eps float32, b *Batch, r Rope) bool
}

// ropeKVWrite is HeadRMSNorm of q and k (when qNorm is set), RoPE on q and
// KVWrite, fused where be can.
func ropeKVWrite(be Backend, layer int, q, k, v Tensor, qNorm, kNorm Weight, headDim int, eps float32, b *Batch, r Rope) {
	if f, ok := be.(RoPEKVWriter); ok && f.RoPEKVWrite(layer, q, k, v, qNorm, kNorm, headDim, eps, b, r) {
		return
	}
	if qNorm != nil {
		be.HeadRMSNorm(q, qNorm, headDim, eps)
		be.HeadRMSNorm(k, kNorm, headDim, eps)
	}
	be.RoPE(q, b.Pos, headDim, r)
	be.KVWrite(layer, k, v, b, r)
}
