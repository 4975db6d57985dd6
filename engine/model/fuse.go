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
