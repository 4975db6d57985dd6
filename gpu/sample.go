package gpu

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/sample"
)

// On-device sampling (kernels/sample.cu): a decode step's logits rows stay
// on the device and the host receives token ids (greedy) or the top-k
// candidates, instead of whole rows (1 MB each for a 248K vocabulary,
// about 420 µs of copy per row on the H200). engine/sample finishes the
// draw. SampleRows serves every row of a step at once: one launch of each
// kernel for all rows and one download, so a batched step pays one round
// trip to the device instead of one per row.

// SampleTopKMax is the largest k the device serves.
const SampleTopKMax = model.MaxDeviceTopK

// Geometry of the kernels (sample.cu): SAMPLE_TILE keys per top-k CTA, and
// the elements each argmax CTA reduces.
const (
	sampleTile    = 2048
	sampleThreads = 1024
	argmaxChunk   = 4096
	sampleModule  = "sample" // kernels/sample.cu
	copyPerThread = 8        // elements per thread of sample_rows_copy
	sampleMaxRows = 65535    // gridDim.y
)

var (
	_ model.LogitsSampler = (*Backend)(nil)
	_ model.RowsSampler   = (*Backend)(nil)
)

// ArgmaxRow returns the argmax of row row of logits after the repetition
// penalty over ids (distinct vocabulary ids; penalty applied as
// engine/sample does: positive logits divided, the others multiplied),
// first index on ties, NaN never wins. logits itself is not modified.
func (b *Backend) ArgmaxRow(logits model.Tensor, row int, penalty float32, ids []int32) (int32, error) {
	a, err := b.sampleOne(logits, row, sample.Query{Penalty: penalty, IDs: ids}, "ArgmaxRow")
	if err != nil {
		return -1, err
	}
	return a.ID, nil
}

// TopKRow returns the k largest values of row row of logits after the
// repetition penalty over ids (as ArgmaxRow), ties to the lower id, with
// their ids: largest first, equal values in id order. 1 ≤ k ≤
// min(SampleTopKMax, row length).
func (b *Backend) TopKRow(logits model.Tensor, row, k int, penalty float32, ids []int32) ([]int32, []float32, error) {
	if t, ok := logits.(*Tensor); ok && (k < 1 || k > SampleTopKMax || k > t.cols) {
		return nil, nil, fmt.Errorf("gpu: TopKRow: k %d must be in 1..%d", k, min(SampleTopKMax, t.cols))
	}
	a, err := b.sampleOne(logits, row, sample.Query{K: k, Penalty: penalty, IDs: ids}, "TopKRow")
	if err != nil {
		return nil, nil, err
	}
	return a.Top, a.Vals, nil
}

func (b *Backend) sampleOne(logits model.Tensor, row int, q sample.Query, op string) (sample.Answer, error) {
	out, err := b.sampleRows(logits, []int{row}, []sample.Query{q}, op)
	if err != nil {
		return sample.Answer{}, err
	}
	if !out[0].OK {
		return sample.Answer{}, fmt.Errorf("gpu: %s: query %+v declined", op, q)
	}
	return out[0], nil
}

// SampleRows answers qs[i] over row rows[i] of logits (model.RowsSampler):
// the argmax (K 0) or the K largest values with their ids, largest first,
// equal values in id order, each after its row's repetition penalty (as
// ArgmaxRow). Rows may repeat. A top-k above min(SampleTopKMax, row
// length), and penalised queries past what the staging ring takes in one
// call, get OK false: the caller serves them row by row.
func (b *Backend) SampleRows(logits model.Tensor, rows []int, qs []sample.Query) ([]sample.Answer, error) {
	return b.sampleRows(logits, rows, qs, "SampleRows")
}

// samplePlan is SampleRows' work for one call: which queries take the
// argmax and the top-k kernels, which rows are penalised copies, and the
// layout of the one scratch buffer (byte offsets, every region 256-aligned).
type samplePlan struct {
	cols      int
	arg, top  []int // indices of the queries each kernel serves
	pen       []int // indices of the penalised queries, in scratch row order
	penRow    []int // per query: its scratch row, or -1
	declined  []bool
	kmax      int
	parts     int // argmax parts per row
	tiles     int // first top-k pass tiles per row
	penIDs    int // penalised ids over all rows
	maxIDs    int // most penalised ids of one row
	penOff    int64
	partOff   int64
	keyOff    int64
	keyStride int64 // keys per row in each of the two key buffers
	resOff    int64
	size      int64 // bytes asked of the scratch cache (a power of two)
}

// planSample lays out SampleRows for queries over rows of cols entries;
// maxStage bounds the penalised ids' staged bytes.
func planSample(cols int, qs []sample.Query, maxStage int64) (samplePlan, error) {
	p := samplePlan{cols: cols, penRow: make([]int, len(qs)), declined: make([]bool, len(qs))}
	staged := int64(0)
	for i, q := range qs {
		p.penRow[i] = -1
		switch {
		case q.K < 0:
			return p, fmt.Errorf("gpu: SampleRows: query %d asks for top-%d", i, q.K)
		case q.K > SampleTopKMax || q.K > cols:
			p.declined[i] = true
			continue
		}
		for _, id := range q.IDs {
			if id < 0 || int(id) >= cols {
				return p, fmt.Errorf("gpu: SampleRows: penalised id %d outside the %d-entry row", id, cols)
			}
		}
		if len(q.IDs) > 0 && q.Penalty != 1 {
			n := int64(len(q.IDs)) * 4
			if staged+n > maxStage {
				p.declined[i] = true
				continue
			}
			staged += n
			p.penRow[i] = len(p.pen)
			p.pen = append(p.pen, i)
			p.penIDs += len(q.IDs)
			p.maxIDs = max(p.maxIDs, len(q.IDs))
		}
		if q.K == 0 {
			p.arg = append(p.arg, i)
		} else {
			p.top = append(p.top, i)
			p.kmax = max(p.kmax, q.K)
		}
	}
	p.parts = cdiv(cols, argmaxChunk)
	p.tiles = cdiv(cols, sampleTile)
	p.keyStride = int64(p.tiles) * int64(p.kmax)
	align := func(n int64) int64 { return (n + 255) &^ 255 }
	p.penOff = 0
	p.partOff = align(int64(len(p.pen)) * int64(cols) * 4)
	p.keyOff = p.partOff + align(int64(len(p.arg))*int64(p.parts)*8)
	p.resOff = p.keyOff + align(2*int64(len(p.top))*p.keyStride*8)
	end := p.resOff + align(int64(len(p.arg)+2*len(p.top)*p.kmax)*4)
	// Powers of two: the scratch cache keeps one buffer per size, and the
	// sizes of steps of any mix of rows then fall into a few classes.
	p.size = max(int64(1)<<bits.Len64(uint64(end-1)), 256)
	return p, nil
}

func (b *Backend) sampleRows(logits model.Tensor, rows []int, qs []sample.Query, op string) ([]sample.Answer, error) {
	t, ok := logits.(*Tensor)
	if !ok {
		return nil, fmt.Errorf("gpu: %s: tensor of type %T does not belong to the GPU backend", op, logits)
	}
	if len(rows) != len(qs) || len(rows) > sampleMaxRows {
		return nil, fmt.Errorf("gpu: %s: %d rows with %d queries (at most %d)", op, len(rows), len(qs), sampleMaxRows)
	}
	for _, row := range rows {
		if row < 0 || row >= t.rows || t.cols == 0 {
			return nil, fmt.Errorf("gpu: %s: row %d of a %dx%d tensor", op, row, t.rows, t.cols)
		}
	}
	out := make([]sample.Answer, len(qs))
	var p samplePlan
	var res []int32
	err := b.dev.Do(func(c *Ctx) error {
		var err error
		// Half the ring for the ids: the pointer tables and the rest of
		// the call must fit beside them.
		if p, err = planSample(t.cols, qs, b.ring.dev.Size/2); err != nil {
			return err
		}
		if len(p.arg)+len(p.top) == 0 {
			return nil
		}
		buf, err := b.scratch(c, p.size, allocName("sampling scratch"))
		if err != nil {
			return err
		}
		defer b.release(buf)
		res, err = b.runSample(c, t, rows, qs, p, buf.Ptr)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].ID = -1
	}
	if res == nil {
		return out, nil
	}
	for j, i := range p.arg {
		out[i] = sample.Answer{OK: true, ID: res[j]}
	}
	ids := res[len(p.arg):]
	vals := res[len(p.arg)+len(p.top)*p.kmax:]
	for j, i := range p.top {
		k := qs[i].K
		a := sample.Answer{OK: true, ID: -1, Top: make([]int32, k), Vals: make([]float32, k)}
		copy(a.Top, ids[j*p.kmax:j*p.kmax+k]) // the K largest of the kmax, largest first
		for n := range k {
			a.Vals[n] = math.Float32frombits(uint32(vals[j*p.kmax+n]))
		}
		out[i] = a
	}
	return out, nil
}

// runSample queues plan p's kernels over t in scratch and downloads the
// results: the argmax ids, then the top-k ids and the value bits, kmax per
// row.
func (b *Backend) runSample(c *Ctx, t *Tensor, rows []int, qs []sample.Query, p samplePlan, scratch DevicePtr) ([]int32, error) {
	rowBytes := int64(t.cols) * 4
	rowPtr := func(i int) uint64 {
		if r := p.penRow[i]; r >= 0 {
			return uint64(scratch.Add(p.penOff + int64(r)*rowBytes))
		}
		return uint64(t.buf.Ptr.Add(int64(rows[i]) * rowBytes))
	}
	if len(p.pen) > 0 {
		src := make([]uint64, len(p.pen))
		ids := make([]int32, 0, p.penIDs)
		offs := make([]int32, 0, len(p.pen)+1)
		pens := make([]float32, len(p.pen))
		for r, i := range p.pen {
			src[r] = uint64(t.buf.Ptr.Add(int64(rows[i]) * rowBytes))
			offs = append(offs, int32(len(ids)))
			ids = append(ids, qs[i].IDs...)
			pens[r] = qs[i].Penalty
		}
		offs = append(offs, int32(len(ids)))
		srcp, err := stage(c, &b.ring, src)
		if err != nil {
			return nil, err
		}
		idp, err := stage(c, &b.ring, ids)
		if err != nil {
			return nil, err
		}
		offp, err := stage(c, &b.ring, offs)
		if err != nil {
			return nil, err
		}
		penp, err := stage(c, &b.ring, pens)
		if err != nil {
			return nil, err
		}
		dst := scratch.Add(p.penOff)
		np := len(p.pen)
		if err := b.launch(c, "sample_rows_copy", Dim3{X: cdiv(t.cols, 256*copyPerThread), Y: np}, Dim3{X: 256}, srcp, dst, t.cols); err != nil {
			return nil, err
		}
		if err := b.launch(c, "sample_rows_penalise", Dim3{X: cdiv(p.maxIDs, 256), Y: np}, Dim3{X: 256}, srcp, dst, t.cols, idp, offp, penp); err != nil {
			return nil, err
		}
	}
	res := scratch.Add(p.resOff)
	if na := len(p.arg); na > 0 {
		ptrs := make([]uint64, na)
		for j, i := range p.arg {
			ptrs[j] = rowPtr(i)
		}
		xs, err := stage(c, &b.ring, ptrs)
		if err != nil {
			return nil, err
		}
		part := scratch.Add(p.partOff)
		if err := b.launch(c, "sample_rows_argmax_part", Dim3{X: p.parts, Y: na}, Dim3{X: 256}, xs, t.cols, argmaxChunk, part); err != nil {
			return nil, err
		}
		if err := b.launch(c, "sample_rows_argmax_final", Dim3{X: 1, Y: na}, Dim3{X: 256}, part, p.parts, xs, res); err != nil {
			return nil, err
		}
	}
	if nt := len(p.top); nt > 0 {
		ptrs := make([]uint64, nt)
		for j, i := range p.top {
			ptrs[j] = rowPtr(i)
		}
		xs, err := stage(c, &b.ring, ptrs)
		if err != nil {
			return nil, err
		}
		keyBytes := int64(nt) * p.keyStride * 8
		bufs := [2]DevicePtr{scratch.Add(p.keyOff), scratch.Add(p.keyOff + keyBytes)}
		last, err := topkPasses(t.cols, p.kmax, func(tiles, n, src, dst int) error {
			x, in := xs, DevicePtr(0)
			if src >= 0 {
				x, in = 0, bufs[src]
			}
			return b.launch(c, "sample_rows_topk_tile", Dim3{X: tiles, Y: nt}, Dim3{X: sampleThreads}, x, in, p.keyStride, n, p.kmax, bufs[dst])
		})
		if err != nil {
			return nil, err
		}
		idp := res.Add(int64(len(p.arg)) * 4)
		valp := idp.Add(int64(nt*p.kmax) * 4)
		if err := b.launch(c, "sample_rows_topk_emit", Dim3{X: cdiv(p.kmax, 256), Y: nt}, Dim3{X: 256}, bufs[last], p.keyStride, p.kmax, xs, idp, valp); err != nil {
			return nil, err
		}
	}
	out := make([]int32, len(p.arg)+2*len(p.top)*p.kmax)
	if err := Download(c, out, res); err != nil {
		return nil, err
	}
	return out, nil
}

// topkPasses plans the sample_rows_topk_tile launches over rows of cols
// elements: pass(tiles, n, src, dst) reads n keys per row (src -1: the
// rows' values, else key buffer src) and writes tiles*k keys per row to
// key buffer dst (0 or 1, each sized for the first pass's
// cdiv(cols, sampleTile)*k per row). It returns the buffer that holds each
// row's k largest keys at the end.
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
