package gpu

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/model"
)

// On-device sampling (kernels/sample.cu): a decode step's logits row stays
// on the device and the host receives a token id (greedy) or the top-k
// candidates, instead of the whole row (1 MB for a 248K vocabulary, about
// 420 µs of copy per step on the H200). engine/sample finishes the draw.

// SampleTopKMax is the largest k TopKRow serves.
const SampleTopKMax = model.MaxDeviceTopK

// Geometry of the kernels (sample.cu): SAMPLE_TILE keys per top-k CTA, and
// the elements each argmax CTA reduces.
const (
	sampleTile    = 2048
	sampleThreads = 1024
	argmaxChunk   = 4096
	sampleModule  = "sample" // kernels/sample.cu
)

var _ model.LogitsSampler = (*Backend)(nil)

// ArgmaxRow returns the argmax of row row of logits after the repetition
// penalty over ids (distinct vocabulary ids; penalty applied as
// engine/sample does: positive logits divided, the others multiplied),
// first index on ties, NaN never wins. logits itself is not modified.
func (b *Backend) ArgmaxRow(logits model.Tensor, row int, penalty float32, ids []int32) (int32, error) {
	t, err := b.sampleRow(logits, row, ids, "ArgmaxRow")
	if err != nil {
		return -1, err
	}
	var out [1]int32
	err = b.dev.Do(func(c *Ctx) error {
		x, done, err := b.penalised(c, t, row, penalty, ids)
		if err != nil {
			return err
		}
		defer done()
		parts := cdiv(t.cols, argmaxChunk)
		pbuf, err := b.scratch(c, int64(parts)*8+4, "argmax parts")
		if err != nil {
			return err
		}
		defer b.release(pbuf)
		res := pbuf.Ptr.Add(int64(parts) * 8)
		if err := b.launch(c, "sample_argmax_part", Dim3{X: parts}, Dim3{X: 256}, x, t.cols, argmaxChunk, pbuf); err != nil {
			return err
		}
		if err := b.launch(c, "sample_argmax_final", Dim3{X: 1}, Dim3{X: 256}, pbuf, parts, x, res); err != nil {
			return err
		}
		return Download(c, out[:], res)
	})
	if err != nil {
		return -1, err
	}
	return out[0], nil
}

// TopKRow returns the k largest values of row row of logits after the
// repetition penalty over ids (as ArgmaxRow), ties to the lower id, with
// their ids: largest first, equal values in id order. 1 ≤ k ≤
// min(SampleTopKMax, row length).
func (b *Backend) TopKRow(logits model.Tensor, row, k int, penalty float32, ids []int32) ([]int32, []float32, error) {
	t, err := b.sampleRow(logits, row, ids, "TopKRow")
	if err != nil {
		return nil, nil, err
	}
	if k < 1 || k > SampleTopKMax || k > t.cols {
		return nil, nil, fmt.Errorf("gpu: TopKRow: k %d must be in 1..%d", k, min(SampleTopKMax, t.cols))
	}
	outIDs, outVals := make([]int32, k), make([]float32, k)
	err = b.dev.Do(func(c *Ctx) error {
		x, done, err := b.penalised(c, t, row, penalty, ids)
		if err != nil {
			return err
		}
		defer done()
		tiles := cdiv(t.cols, sampleTile)
		// Two ping-pong key buffers of the first pass's output size, then
		// the ids and values.
		keys := int64(tiles) * int64(k) * 8
		buf, err := b.scratch(c, 2*keys+int64(k)*8, "top-k keys")
		if err != nil {
			return err
		}
		defer b.release(buf)
		bufs := [2]DevicePtr{buf.Ptr, buf.Ptr.Add(keys)}
		last, err := topkPasses(t.cols, k, func(tiles, n, src, dst int) error {
			row, in := x, DevicePtr(0)
			if src >= 0 {
				row, in = 0, bufs[src]
			}
			return b.launch(c, "sample_topk_tile", Dim3{X: tiles}, Dim3{X: sampleThreads}, row, in, n, k, bufs[dst])
		})
		if err != nil {
			return err
		}
		in := bufs[last]
		idp := buf.Ptr.Add(2 * keys)
		valp := idp.Add(int64(k) * 4)
		if err := b.launch(c, "sample_topk_emit", Dim3{X: cdiv(k, 256)}, Dim3{X: 256}, in, k, x, idp, valp); err != nil {
			return err
		}
		if err := Download(c, outIDs, idp); err != nil {
			return err
		}
		return Download(c, outVals, valp)
	})
	if err != nil {
		return nil, nil, err
	}
	return outIDs, outVals, nil
}

// topkPasses plans TopKRow's sample_topk_tile launches over a row of cols
// elements: pass(tiles, n, src, dst) reads n keys (src -1: the row's
// values, else key buffer src) and writes tiles*k keys to key buffer dst
// (0 or 1, each sized for the first pass's cdiv(cols, sampleTile)*k). It
// returns the buffer that holds the k largest keys at the end.
func topkPasses(cols, k int, pass func(tiles, n, src, dst int) error) (int, error) {
	tiles := cdiv(cols, sampleTile)
	if err := pass(tiles, cols, -1, 0); err != nil {
		return 0, err
	}
	cur := 0
	for tiles > 1 {
		n := tiles * k
		tiles = cdiv(n, sampleTile)
		if err := pass(tiles, n, cur, 1-cur); err != nil {
			return 0, err
		}
		cur = 1 - cur
	}
	return cur, nil
}

// sampleRow checks the arguments of a row sampler.
func (b *Backend) sampleRow(logits model.Tensor, row int, ids []int32, op string) (*Tensor, error) {
	t, ok := logits.(*Tensor)
	if !ok {
		return nil, fmt.Errorf("gpu: %s: tensor of type %T does not belong to the GPU backend", op, logits)
	}
	if row < 0 || row >= t.rows || t.cols == 0 {
		return nil, fmt.Errorf("gpu: %s: row %d of a %dx%d tensor", op, row, t.rows, t.cols)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= t.cols {
			return nil, fmt.Errorf("gpu: %s: penalised id %d outside the %d-entry row", op, id, t.cols)
		}
	}
	return t, nil
}

// penalised returns the address of row row of t, or, when ids are to be
// penalised, of a scratch copy of it with the penalty applied (t is never
// written: a caller falling back to the full row reads it unchanged).
// done releases the scratch after the kernels that read it are queued.
func (b *Backend) penalised(c *Ctx, t *Tensor, row int, penalty float32, ids []int32) (DevicePtr, func(), error) {
	rowBytes := int64(t.cols) * 4
	x := t.buf.Ptr.Add(int64(row) * rowBytes)
	if len(ids) == 0 || penalty == 1 {
		return x, func() {}, nil
	}
	buf, err := b.scratch(c, rowBytes, "penalised logits")
	if err != nil {
		return 0, nil, err
	}
	done := func() { b.release(buf) }
	p, err := stage(c, &b.ring, ids)
	if err == nil {
		err = c.CopyDevice(buf.Ptr, x, rowBytes)
	}
	if err == nil {
		err = b.launch(c, "sample_penalise", Dim3{X: cdiv(len(ids), 256)}, Dim3{X: 256}, x, buf, p, len(ids), t.cols, penalty)
	}
	if err != nil {
		done()
		return 0, nil, err
	}
	return buf.Ptr, done, nil
}
