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
