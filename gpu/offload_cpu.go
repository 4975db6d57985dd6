package gpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// The CPU path's MoE over host-resident experts.
//
// The CPU backend's MoE (engine/cpu, the reference) runs the active
// experts one after another, each matmul a parallel loop of its own: a
// decode token of a 256-expert top-8 layer is 25 short parallel loops, and
// on the H200 machine's 16 cores it ran at about a quarter of one core's
// speed per core (BenchmarkHostExperts). hostMoE computes the same thing
// in three parallel phases: routing (rows), gate and up of every (active
// expert, slice of its rows) item, then down of every (active expert,
// slice of the model dim) item, plus the weighted sum by rows. Every item
// is a matmul of the CPU backend over a view of the expert's rows, so each
// output is the very dot the reference computes, and the sum runs in the
// reference's expert order: the result is bit-identical to cpu.MoE
// (TestHostMoEMatchesCPU), also on the integer-dot path
// (Placement.CPUIntDot, FTCHAT_CPU_INTDOT=1) against a CPU backend with
// IntDot: each activation row is quantized whole by every item's matmul,
// as by the reference's, so every output is again the same dot.

// hostSliceRows is the rows of an expert's gate/up (ff) or down (dim) a
// work item takes: a few items per expert, so that a decode token's 8
// experts keep every core busy.
func hostSliceRows(rows int) int {
	for _, s := range []int{128, 64, 32} {
		if rows%s == 0 && rows > s {
			return s
		}
	}
	return rows
}

// hostPool runs the items of a phase on one goroutine per worker (the
// caller is worker 0); each worker has a single-threaded CPU backend for
// its matmuls and its own scratch.
type hostPool struct {
	workers []*hostWorker
	start   []chan *hostPhase
	intDot  bool // the workers' backends take the integer-dot path
}

type hostPhase struct {
	n    int
	next atomic.Int64
	fn   func(w *hostWorker, item int)
	wg   sync.WaitGroup
}

type hostWorker struct {
	cb   *cpu.Backend
	ten  map[[3]int]*cpu.Tensor // scratch tensors by (rows, cols, use); Data is set per use
	buf  []float32
	prob []float64
	idx  []int
}

func newHostPool(n int, intDot bool) *hostPool {
	n = max(n, 1)
	p := &hostPool{intDot: intDot}
	for i := range n {
		p.workers = append(p.workers, &hostWorker{cb: cpu.New(cpu.Options{Threads: 1, IntDot: intDot}), ten: map[[3]int]*cpu.Tensor{}})
		if i > 0 {
			ch := make(chan *hostPhase, 1)
			p.start = append(p.start, ch)
			go func(w *hostWorker) {
				for ph := range ch {
					ph.run(w)
					ph.wg.Done()
				}
			}(p.workers[i])
		}
	}
	return p
}

func (p *hostPool) close() {
	for _, ch := range p.start {
		close(ch)
	}
	for _, w := range p.workers {
		w.cb.Close()
	}
}

func (ph *hostPhase) run(w *hostWorker) {
	for {
		i := int(ph.next.Add(1)) - 1
		if i >= ph.n {
			return
		}
		ph.fn(w, i)
	}
}

// parallel runs fn over items 0..n-1 and returns when all are done.
func (p *hostPool) parallel(n int, fn func(w *hostWorker, item int)) {
	if n <= 0 {
		return
	}
	ph := &hostPhase{n: n, fn: fn}
	helpers := min(len(p.start), n-1)
	ph.wg.Add(helpers)
	for _, ch := range p.start[:helpers] {
		ch <- ph
	}
	ph.run(p.workers[0])
	ph.wg.Wait()
}

// tensor returns the worker's scratch tensor of rows×cols over data; use
// tells apart tensors of one shape that an item needs at once.
func (w *hostWorker) tensor(rows, cols, use int, data []float32) *cpu.Tensor {
	k := [3]int{rows, cols, use}
	t := w.ten[k]
	if t == nil {
		if len(w.ten) >= 256 {
			clear(w.ten)
		}
		t = w.cb.NewTensor(rows, cols).(*cpu.Tensor)
		w.ten[k] = t
	}
	t.Data = data[:rows*cols]
	return t
}

// scratch returns n floats of the worker's buffer (reused per item).
func (w *hostWorker) scratch(n int) []float32 {
	if len(w.buf) < n {
		w.buf = make([]float32, n)
	}
	return w.buf[:n]
}

// expertViews are CPU-backend weights over one expert's row slices.
type expertViews struct {
	gate, up, down []model.Weight
}

// hostMoEState is a layer's views, built per expert at its first use.
type hostMoEState struct {
	views              []*expertViews
	ffSlice, dimSlice  int
	ids                []int32   // [n*K] expert of each (row, slot)
	wts                []float32 // [n*K] its weight
	rowsOf             [][]int32
	wOf                [][]float32
	active             []int
	off                []int // arena offset (in rows) of each active expert's rows
	xe, he, ye, logits []float32
	splitIds           []int32   // the split path's CPU slots (offload_split.go)
	splitW             []float32 // and their weights
}

// viewOf is the CPU weight over rows [r0, r0+rows) of stacked weight w
// (one expert's slice), with that expert's second-level scale.
func viewOf(cb *cpu.Backend, w *hostWeight, e, r0, rows, E int) (model.Weight, error) {
	// The whole tensor's name (shared, not copied: a 35B-A3B model has
	// ~160K views).
	info := gguf.TensorInfo{Name: w.info.Name, Type: w.info.Type, Dims: []uint64{uint64(w.cols), uint64(rows)}}
	raw := w.raw[int64(r0)*w.rowBytes : int64(r0+rows)*w.rowBytes]
	if w.scale == nil {
		return cb.LoadWeight(info, raw)
	}
	s := w.scale[0]
	if len(w.scale) == E {
		s = w.scale[e]
	}
	return cb.LoadScaledWeight(info, raw, []float32{s})
}

func (st *hostMoEState) expert(cb *cpu.Backend, l *hostLayer, e, E, ff, dim int) (*expertViews, error) {
	if v := st.views[e]; v != nil {
		return v, nil
	}
	v := &expertViews{}
	for r := 0; r < ff; r += st.ffSlice {
		g, err := viewOf(cb, l.gate, e, e*ff+r, st.ffSlice, E)
		if err != nil {
			return nil, err
		}
		u, err := viewOf(cb, l.up, e, e*ff+r, st.ffSlice, E)
		if err != nil {
			return nil, err
		}
		v.gate, v.up = append(v.gate, g), append(v.up, u)
	}
	for r := 0; r < dim; r += st.dimSlice {
		d, err := viewOf(cb, l.down, e, e*dim+r, st.dimSlice, E)
		if err != nil {
			return nil, err
		}
		v.down = append(v.down, d)
	}
	st.views[e] = v
	return v, nil
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// workers returns the CPU path's pool, started at its first use (again
// when the integer-dot choice changed: benchmarks compare both).
func (h *hostExperts) workers() *hostPool {
	if id := h.place.intDot(); h.pool == nil || h.pool.intDot != id {
		if h.pool != nil {
			h.pool.close()
		}
		h.pool = newHostPool(runtime.NumCPU(), id)
	}
	return h.pool
}

// state returns layer l's CPU-path state, made at its first use.
func (l *hostLayer) state(E, dim int) *hostMoEState {
	if l.cpuState == nil {
		ff := l.gate.rows / E
		l.cpuState = &hostMoEState{views: make([]*expertViews, E), ffSlice: hostSliceRows(ff), dimSlice: hostSliceRows(dim)}
	}
	return l.cpuState
}

// hostMoE writes y = MoE(x) over layer l's host experts (the CPU
// backend's MoE semantics), x and y being n×dim tensors of cb's.
func (h *hostExperts) hostMoE(y, x *cpu.Tensor, l *hostLayer, m *model.MoE) error {
	p := h.workers()
	n := x.Rows()
	E, K := m.Experts, m.TopK
	st := l.state(E, x.Cols())

	// Router logits on the multi-threaded backend, then top-k per row.
	st.logits = grow(st.logits, n*E)
	lt := p.workers[0].tensor(n, E, 0, st.logits)
	h.cpu.MatMul(lt, x, l.router)
	st.ids, st.wts = grow(st.ids, n*K), grow(st.wts, n*K)
	p.parallel(n, func(w *hostWorker, r int) {
		if len(w.prob) < E {
			w.prob, w.idx = make([]float64, E), make([]int, E)
		}
		cpu.RouteTopK(st.logits[r*E:(r+1)*E], K, m.NormTopK, w.prob, w.idx, st.ids[r*K:(r+1)*K], st.wts[r*K:(r+1)*K])
	})
	return h.expertSum(y, x, l, E, st.ids, st.wts, K)
}

// expertSum writes y[r] = the sum over j < k of wts[r*k+j] times expert
// ids[r*k+j]'s SwiGLU FFN of x[r], adding in expert order (as the CPU
// backend's MoE does): hostMoE after routing, and the split path's CPU
// share with the device's ids (k of each row's slots). ids and wts may be
// the layer state's own.
func (h *hostExperts) expertSum(y, x *cpu.Tensor, l *hostLayer, E int, ids []int32, wts []float32, K int) error {
	p := h.workers()
	n, dim := x.Rows(), x.Cols()
	ff := l.gate.rows / E
	st := l.state(E, dim)
	if len(ids) < n*K || len(wts) < n*K {
		return fmt.Errorf("gpu: host MoE: %d ids and %d weights for %d rows of top-%d", len(ids), len(wts), n, K)
	}
	if len(st.rowsOf) < E {
		st.rowsOf, st.wOf = make([][]int32, E), make([][]float32, E)
	}
	for e := range E {
		st.rowsOf[e], st.wOf[e] = st.rowsOf[e][:0], st.wOf[e][:0]
	}
	for r := range n {
		for j := range K {
			e := ids[r*K+j]
			if e < 0 || int(e) >= E {
				return fmt.Errorf("gpu: host MoE: row %d slot %d routed to expert %d of %d", r, j, e, E)
			}
			st.rowsOf[e] = append(st.rowsOf[e], int32(r))
			st.wOf[e] = append(st.wOf[e], wts[r*K+j])
		}
	}
	st.active, st.off = st.active[:0], st.off[:0]
	total := 0
	for e := range E {
		if k := len(st.rowsOf[e]); k > 0 {
			if _, err := st.expert(h.cpu, l, e, E, ff, dim); err != nil {
				return err
			}
			st.active = append(st.active, e)
			st.off = append(st.off, total)
			total += k
		}
	}
	st.xe, st.he, st.ye = grow(st.xe, total*dim), grow(st.he, total*ff), grow(st.ye, total*dim)
	for i, e := range st.active {
		for j, r := range st.rowsOf[e] {
			copy(st.xe[(st.off[i]+j)*dim:(st.off[i]+j+1)*dim], x.Data[int(r)*dim:(int(r)+1)*dim])
		}
	}

	// Gate and up of each (expert, ff slice), SwiGLU into he.
	fs, ds := st.ffSlice, st.dimSlice
	nfs, nds := ff/fs, dim/ds
	p.parallel(len(st.active)*nfs, func(w *hostWorker, item int) {
		i, s := item/nfs, item%nfs
		e, k, o := st.active[i], len(st.rowsOf[st.active[i]]), st.off[i]
		v := st.views[e]
		xt := w.tensor(k, dim, 0, st.xe[o*dim:])
		buf := w.scratch(2 * k * fs)
		g, u := w.tensor(k, fs, 1, buf), w.tensor(k, fs, 2, buf[k*fs:])
		w.cb.MatMul(g, xt, v.gate[s])
		w.cb.MatMul(u, xt, v.up[s])
		w.cb.SwiGLU(g, g, u)
		for j := range k {
			copy(st.he[(o+j)*ff+s*fs:(o+j)*ff+(s+1)*fs], g.Data[j*fs:(j+1)*fs])
		}
	})
	// Down of each (expert, dim slice) into ye.
	p.parallel(len(st.active)*nds, func(w *hostWorker, item int) {
		i, s := item/nds, item%nds
		e, k, o := st.active[i], len(st.rowsOf[st.active[i]]), st.off[i]
		ht := w.tensor(k, ff, 0, st.he[o*ff:])
		yt := w.tensor(k, ds, 1, w.scratch(k*ds))
		w.cb.MatMul(yt, ht, st.views[e].down[s])
		for j := range k {
			copy(st.ye[(o+j)*dim+s*ds:(o+j)*dim+(s+1)*ds], yt.Data[j*ds:(j+1)*ds])
		}
	})
	// y[r] = sum over r's experts, in expert order (as the reference adds).
	clear(y.Data[:n*dim])
	for i, e := range st.active {
		for j, r := range st.rowsOf[e] {
			out, src, wt := y.Data[int(r)*dim:(int(r)+1)*dim], st.ye[(st.off[i]+j)*dim:(st.off[i]+j+1)*dim], st.wOf[e][j]
			for c := range out {
				out[c] += wt * src[c]
			}
		}
	}
	return nil
}
