package gpu

import (
	"errors"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// errKVNotImplemented is returned until the paged KV write and attention
// kernels (gpu/attention*.go, kernels/attention.cu, kernels/kvwrite.cu) are
// wired in.
var errKVNotImplemented = errors.New("gpu: paged KV cache (KVWrite/Attention) is not implemented in the GPU backend yet: use --device cpu")

// AllocKV creates the device KV pool for layout.
func (b *Backend) AllocKV(layout kvcache.Layout) error { return errKVNotImplemented }

// FreeKV drops the KV pool.
func (b *Backend) FreeKV() {}

// KVWrite rotates k and stores k and v into the pages of layer.
func (b *Backend) KVWrite(layer int, k, v model.Tensor, bt *model.Batch, r model.Rope) {
	b.fail(errKVNotImplemented)
}

// Attention runs causal paged attention.
func (b *Backend) Attention(dst, q model.Tensor, layer int, bt *model.Batch, heads int, scale float32) {
	b.fail(errKVNotImplemented)
}
