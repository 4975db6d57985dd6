//go:build !amd64 || purego

package kvcache

func decodeBF16(dst []float32, src []byte) { decodeBF16Go(dst, src) }
func decodeFP8(dst []float32, src []byte, e4m3 bool) {
	if e4m3 {
		decodeLUTGo(dst, src, &e4m3Table)
	} else {
		decodeLUTGo(dst, src, &e5m2Table)
	}
}
func dot(a, b []float32) float32     { return dotGo(a, b) }
func axpy(y, x []float32, w float32) { axpyGo(y, x, w) }
