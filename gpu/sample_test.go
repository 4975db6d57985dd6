package gpu

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/sample"
)

// TestSampleKernelModule checks, without a GPU, that the sampling kernels
// are entries of the module kernelModule names for them (sample).
func TestSampleKernelModule(t *testing.T) {
	for _, arch := range []int{80, 90} {
		for _, n := range []string{"sample_rows_copy", "sample_rows_penalise", "sample_rows_argmax_part", "sample_rows_argmax_final", "sample_rows_topk_tile", "sample_rows_topk_emit"} {
			mod := kernelModule(n)
			ptx, err := KernelPTX(mod, arch)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(ptx, []byte(".visible .entry "+n+"(")) {
				t.Errorf("kernel %s is not in module %s (sm_%d)", n, mod, arch)
			}
		}
	}
}

// deviceSource is row row of a GPU logits tensor as a sample.Logits.
type deviceSource struct {
	t   *testing.T
	b   *Backend
	x   model.Tensor
	row int
}

func (d deviceSource) Len() int { return d.x.Cols() }

func (d deviceSource) Argmax(pen float32, ids []int32) (int32, bool) {
	id, err := d.b.ArgmaxRow(d.x, d.row, pen, ids)
	if err != nil {
		d.t.Fatal(err)
	}
	return id, true
}

func (d deviceSource) TopK(k int, pen float32, ids []int32) ([]int32, []float32, bool) {
	if k > SampleTopKMax {
		return nil, nil, false
	}
	top, vals, err := d.b.TopKRow(d.x, d.row, k, pen, ids)
	if err != nil {
		d.t.Fatal(err)
	}
	return top, vals, true
}

func (d deviceSource) All() []float32 {
	all := make([]float32, d.x.Rows()*d.x.Cols())
	d.b.ToHost(d.x, all)
	return all[d.row*d.x.Cols() : (d.row+1)*d.x.Cols()]
}

// samplingRow is a logits row with exact ties near the top (values on a
// coarse grid), signed zeros and a plateau of equal maxima.
func samplingRow(r *rand.Rand, n int) []float32 {
	lg := make([]float32, n)
	for i := range lg {
		switch x := r.IntN(100); {
		case x < 30:
			lg[i] = float32(r.IntN(24)-12) / 2
		case x < 33:
			lg[i] = float32(math.Copysign(0, float64(r.IntN(2)*2-1)))
		default:
			lg[i] = float32(r.NormFloat64() * 2.5)
		}
	}
	for range 5 { // equal maxima far apart
		lg[r.IntN(n)] = 9.5
	}
	return lg
}

// poisonSampleScratch fills the scratch buffer SampleRows will take for
// qs over rows of cols entries (the backend's cache hands back a freed
// buffer of the same rounded size) with NaN, so a kernel that leaves part
// of its output unwritten fails the comparison.
func poisonSampleScratch(t *testing.T, b *Backend, cols int, qs []sample.Query) {
	t.Helper()
	p, err := planSample(cols, qs, b.ring.dev.Size/2)
	if err != nil {
		t.Fatal(err)
	}
	x := b.NewTensor(1, int(p.size/4))
	b.FromHost(x, nanVec(int(p.size/4)))
	b.FreeTensor(x)
}

// poisonRow is poisonSampleScratch for one row's query.
func poisonRow(t *testing.T, b *Backend, cols, k int, pen float32, ids []int32) {
	poisonSampleScratch(t, b, cols, []sample.Query{{K: k, Penalty: pen, IDs: ids}})
}

// TestDeviceSampling compares ArgmaxRow and TopKRow with engine/sample's
// host code (exact: same ids, bit-identical values) on random rows of
// real vocabulary sizes, scratch poisoned with NaN first, the tested row
// between rows of +Inf (a wrong row offset wins at once), with and
// without a repetition penalty over a window with duplicates, and then
// whole samplers: SampleFrom over the device against Sample on the host,
// token for token.
func TestDeviceSampling(t *testing.T) {
	b := newTestBackend(t)
	for _, vocab := range []int{32000, 151936, 248320} {
		r := rand.New(rand.NewPCG(uint64(vocab), 5))
		row := samplingRow(r, vocab)
		data := make([]float32, 3*vocab)
		for i := range data {
			data[i] = float32(math.Inf(1))
		}
		copy(data[vocab:], row)
		x := b.NewTensor(3, vocab)
		b.FromHost(x, data)
		window := []int32{}
		for range 80 {
			window = append(window, int32(r.IntN(vocab)))
		}
		window = append(window, window[3], window[7]) // duplicates
		// The ids of the window's top entries, so the penalty changes the answer.
		top := sample.Argmax(row)
		window = append(window, top)
		distinct := distinctIDs(window)
		for _, pen := range []float32{1, 1.3, 0.8} {
			var ids []int32
			if pen != 1 {
				ids = distinct
			}
			name := fmt.Sprintf("vocab %d penalty %v", vocab, pen)
			poisonRow(t, b, vocab, 0, pen, ids)
			want, _ := sample.Slice(row).Argmax(pen, ids)
			got, err := b.ArgmaxRow(x, 1, pen, ids)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: ArgmaxRow %d, host %d", name, got, want)
			}
			for _, k := range []int{1, 40, 256} {
				poisonRow(t, b, vocab, k, pen, ids)
				wantIDs, wantVals, _ := sample.Slice(row).TopK(k, pen, ids)
				gotIDs, gotVals, err := b.TopKRow(x, 1, k, pen, ids)
				if err != nil {
					t.Fatal(err)
				}
				if err := sameCandidates(gotIDs, gotVals, wantIDs, wantVals); err != nil {
					t.Errorf("%s top-%d: %v", name, k, err)
				}
			}
		}
		// The row itself is never penalised in place.
		back := make([]float32, 3*vocab)
		b.ToHost(x, back)
		for i := range back {
			if math.Float32bits(back[i]) != math.Float32bits(data[i]) {
				t.Fatalf("vocab %d: logits[%d] changed to %v", vocab, i, back[i])
			}
		}

		for _, p := range []sample.Params{
			{}, {RepeatPenalty: 1.2},
			{Temperature: 0.8, TopK: 1}, {Temperature: 0.8, TopK: 40, RepeatPenalty: 1.1},
			{Temperature: 1.1, TopK: 256, TopP: 0.9, MinP: 0.02, RepeatPenalty: 1.3, RepeatLastN: 16},
		} {
			for seed := range uint64(3) {
				p.Seed = seed
				host, _ := sample.New(p)
				dev, _ := sample.New(p)
				src := deviceSource{t: t, b: b, x: x, row: 1}
				hist := append([]int32(nil), window...)
				for step := range 8 {
					want := host.Sample(row, hist)
					got := dev.SampleFrom(src, hist)
					if got != want {
						t.Fatalf("vocab %d %+v step %d: device drew %d, host %d", vocab, p, step, got, want)
					}
					hist = append(hist, want)
				}
			}
		}
		b.FreeTensor(x)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceSamplingInStep samples inside recorded steps (BeginStep ..
// EndStep, replayed as a CUDA graph from the second on) with a different
// penalty window each step: the staged ids of each step must reach the
// kernels.
func TestDeviceSamplingInStep(t *testing.T) {
	b := newTestBackend(t)
	const vocab = 151936
	r := rand.New(rand.NewPCG(3, 4))
	row := samplingRow(r, vocab)
	x := b.NewTensor(1, vocab)
	b.FromHost(x, row)
	defer b.FreeTensor(x)
	for step := range 6 {
		window := []int32{sample.Argmax(row), int32(r.IntN(vocab)), int32(r.IntN(vocab))}
		ids := distinctIDs(window[:1+step%3])
		b.BeginStep()
		got, err := b.ArgmaxRow(x, 0, 1.5, ids)
		b.EndStep()
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := sample.Slice(row).Argmax(1.5, ids); got != want {
			t.Errorf("step %d: ArgmaxRow %d, host %d", step, got, want)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	st, _ := b.GraphStats()
	t.Logf("graph stats %+v", st)
}

func TestDeviceSamplingBadInput(t *testing.T) {
	b := newTestBackend(t)
	x := b.NewTensor(2, 100)
	defer b.FreeTensor(x)
	b.FromHost(x, make([]float32, 200))
	if _, err := b.ArgmaxRow(x, 2, 1, nil); err == nil {
		t.Error("ArgmaxRow accepted row 2 of a 2-row tensor")
	}
	if _, err := b.ArgmaxRow(x, 0, 1.2, []int32{100}); err == nil {
		t.Error("ArgmaxRow accepted penalty id 100 of a 100-entry row")
	}
	for _, k := range []int{0, 101, SampleTopKMax + 1} {
		if _, _, err := b.TopKRow(x, 0, k, 1, nil); err == nil {
			t.Errorf("TopKRow accepted k=%d", k)
		}
	}
}

func distinctIDs(w []int32) []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, t := range w {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// sameCandidates compares two top-k answers as sets sorted by id, values
// bit for bit.
func sameCandidates(gotIDs []int32, gotVals []float32, wantIDs []int32, wantVals []float32) error {
	type c struct {
		id int32
		v  float32
	}
	pack := func(ids []int32, vals []float32) []c {
		out := make([]c, len(ids))
		for i := range ids {
			out[i] = c{ids[i], vals[i]}
		}
		slices.SortFunc(out, func(a, b c) int { return cmp.Compare(a.id, b.id) })
		return out
	}
	if len(gotIDs) != len(wantIDs) || len(gotVals) != len(gotIDs) {
		return fmt.Errorf("%d ids and %d values, want %d", len(gotIDs), len(gotVals), len(wantIDs))
	}
	g, w := pack(gotIDs, gotVals), pack(wantIDs, wantVals)
	for i := range g {
		if g[i].id != w[i].id || math.Float32bits(g[i].v) != math.Float32bits(w[i].v) {
			return fmt.Errorf("candidate %d is (%d, %v), want (%d, %v)", i, g[i].id, g[i].v, w[i].id, w[i].v)
		}
	}
	return nil
}

// TestTopKPasses runs TopKRow's launch plan (topkPasses) on the host, each
// pass doing what sample_topk_tile does (sort a tile's keys descending,
// missing elements key 0, keep k), and checks that the final buffer holds
// the row's k largest keys, largest first, and that no pass writes past
// its buffer. No GPU needed: it covers the orchestration the GPU tests
// exercise only at three sizes.
func TestTopKPasses(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, cols := range []int{1, 2, 100, 2047, 2048, 2049, 32000, 151936, 248320, 600000} {
		for _, k := range []int{1, 2, 40, 255, 256} {
			if k > cols {
				continue
			}
			row := make([]float32, cols)
			for i := range row {
				row[i] = float32(r.IntN(64)) // many ties
			}
			keyOf := func(i int) uint64 { return uint64(math.Float32bits(row[i])|0x80000000)<<32 | uint64(^uint32(i)) }
			capKeys := cdiv(cols, sampleTile) * k
			bufs := [2][]uint64{make([]uint64, capKeys), make([]uint64, capKeys)}
			last, err := topkPasses(cols, k, func(tiles, n, src, dst int) error {
				if tiles*k > capKeys {
					return fmt.Errorf("pass writes %d keys into a buffer of %d", tiles*k, capKeys)
				}
				for b := range tiles {
					tile := make([]uint64, sampleTile)
					for i := range tile {
						if g := b*sampleTile + i; g < n {
							if src < 0 {
								tile[i] = keyOf(g)
							} else {
								tile[i] = bufs[src][g]
							}
						}
					}
					slices.SortFunc(tile, func(a, b uint64) int { return cmp.Compare(b, a) })
					copy(bufs[dst][b*k:(b+1)*k], tile[:k])
				}
				return nil
			})
			if err != nil {
				t.Fatalf("cols %d k %d: %v", cols, k, err)
			}
			all := make([]uint64, cols)
			for i := range all {
				all[i] = keyOf(i)
			}
			slices.SortFunc(all, func(a, b uint64) int { return cmp.Compare(b, a) })
			if !slices.Equal(bufs[last][:k], all[:k]) {
				t.Errorf("cols %d k %d: the plan leaves %v, want %v", cols, k, bufs[last][:min(k, 4)], all[:min(k, 4)])
			}
		}
	}
}

// BenchmarkSampleRow times one device sampling call on a 248,320-entry
// row (Qwen3.6's vocabulary) against copying the row to the host, which
// is what each decode step did before: greedy, greedy with a 64-id
// penalty, and top-k 40 and 256 with the penalty.
func BenchmarkSampleRow(b *testing.B) {
	d := openTestDevice(b)
	be, err := NewBackend(d, BackendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const vocab = 248320
	r := rand.New(rand.NewPCG(1, 2))
	row := samplingRow(r, vocab)
	x := be.NewTensor(1, vocab)
	be.FromHost(x, row)
	var ids []int32
	for range 64 {
		ids = append(ids, int32(r.IntN(vocab)))
	}
	ids = distinctIDs(ids)
	host := make([]float32, vocab)
	cases := []struct {
		name string
		run  func() error
	}{
		{"copy row to host", func() error { be.ToHost(x, host); return be.Err() }},
		{"argmax", func() error { _, err := be.ArgmaxRow(x, 0, 1, nil); return err }},
		{"argmax penalty 64", func() error { _, err := be.ArgmaxRow(x, 0, 1.1, ids); return err }},
		{"top-40 penalty 64", func() error { _, _, err := be.TopKRow(x, 0, 40, 1.1, ids); return err }},
		{"top-256 penalty 64", func() error { _, _, err := be.TopKRow(x, 0, 256, 1.1, ids); return err }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDeviceSamplingRows compares SampleRows, many rows in one call, with
// engine/sample's host code (exact: same ids, bit-identical values, top-k
// largest first with ties in id order) on 16 random rows of real
// vocabulary sizes between rows of +Inf (a wrong row offset wins at
// once), scratch poisoned with NaN first. The queries mix greedy and
// top-k 1/40/256, with and without a penalty (over windows with
// duplicates removed, as the sampler gives them), rows asked twice, a
// row with NaNs (NaN at index 0: the argmax is 0) and a top-k above the
// cap (declined). Then whole samplers: Query, one SampleRows for all
// rows, Finish, against Sample on the host rows, token for token.
func TestDeviceSamplingRows(t *testing.T) {
	b := newTestBackend(t)
	const nrows = 16
	for _, vocab := range []int{32000, 128256, 248320} {
		r := rand.New(rand.NewPCG(uint64(vocab), 9))
		host := make([][]float32, nrows)
		data := make([]float32, (nrows+2)*vocab)
		for i := range data {
			data[i] = float32(math.Inf(1))
		}
		for i := range host {
			host[i] = samplingRow(r, vocab)
			copy(data[(i+1)*vocab:], host[i])
		}
		nanRow := nrows - 1 // NaN at index 0 and scattered: greedy queries only
		host[nanRow][0] = float32(math.NaN())
		for range 20 {
			host[nanRow][r.IntN(vocab)] = float32(math.NaN())
		}
		copy(data[(nanRow+1)*vocab:], host[nanRow])
		x := b.NewTensor(nrows+2, vocab)
		b.FromHost(x, data)

		window := func(row []float32) []int32 {
			w := []int32{sample.Argmax(row)} // the penalty changes the answer
			for range 70 {
				w = append(w, int32(r.IntN(vocab)))
			}
			return distinctIDs(append(w, w[3], w[5]))
		}
		var rows []int
		var qs []sample.Query
		add := func(row, k int, pen float32) {
			q := sample.Query{K: k, Penalty: pen}
			if pen != 1 {
				q.IDs = window(host[row])
			}
			rows, qs = append(rows, row+1), append(qs, q)
		}
		pens := []float32{1, 1.3, 0.8}
		for i := range nrows {
			if i == nanRow {
				add(i, 0, 1)
				add(i, 0, 1.2)
				continue
			}
			add(i, []int{0, 1, 40, 256}[i%4], pens[i%3])
		}
		add(2, 40, 1.1)  // a row asked twice
		add(3, 0, 1)     // greedy beside its top-k
		add(4, 300, 1.1) // above the cap: declined
		poisonSampleScratch(t, b, vocab, qs)
		got, err := b.SampleRows(x, rows, qs)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(qs) {
			t.Fatalf("vocab %d: %d answers for %d queries", vocab, len(got), len(qs))
		}
		for i, q := range qs {
			row := host[rows[i]-1]
			name := fmt.Sprintf("vocab %d query %d (row %d, %+v)", vocab, i, rows[i]-1, sample.Query{K: q.K, Penalty: q.Penalty})
			a := got[i]
			switch {
			case q.K > SampleTopKMax:
				if a.OK {
					t.Errorf("%s: answered a top-k above the cap", name)
				}
			case q.K == 0:
				want, _ := sample.Slice(row).Argmax(q.Penalty, q.IDs)
				if !a.OK || a.ID != want {
					t.Errorf("%s: argmax %d (ok %v), host %d", name, a.ID, a.OK, want)
				}
			default:
				wantIDs, wantVals, _ := sample.Slice(row).TopK(q.K, q.Penalty, q.IDs)
				if !a.OK {
					t.Errorf("%s: declined", name)
					continue
				}
				if err := sameCandidates(a.Top, a.Vals, wantIDs, wantVals); err != nil {
					t.Errorf("%s: %v", name, err)
				}
				for n := 1; n < len(a.Top); n++ {
					if a.Vals[n] > a.Vals[n-1] || a.Vals[n] == a.Vals[n-1] && a.Top[n] < a.Top[n-1] {
						t.Errorf("%s: candidate %d (%d, %v) after (%d, %v): not largest first, ties by id", name, n, a.Top[n], a.Vals[n], a.Top[n-1], a.Vals[n-1])
						break
					}
				}
			}
		}
		back := make([]float32, len(data))
		b.ToHost(x, back)
		for i := range back {
			if math.Float32bits(back[i]) != math.Float32bits(data[i]) {
				t.Fatalf("vocab %d: logits[%d] changed to %v", vocab, i, back[i])
			}
		}

		// Whole samplers, one per row, drawn together each step.
		params := []sample.Params{
			{}, {RepeatPenalty: 1.2}, {RepeatPenalty: 1.5, RepeatLastN: -1},
			{Temperature: 0.8, TopK: 1}, {Temperature: 0.8, TopK: 40, RepeatPenalty: 1.1},
			{Temperature: 1.1, TopK: 256, TopP: 0.9, MinP: 0.02, RepeatPenalty: 1.3, RepeatLastN: 16},
			{Temperature: 0.7, TopK: 50, TopP: 0.95},
		}
		var devs, hosts []*sample.Sampler
		var hists [][]int32
		for i := range nrows - 1 { // not the NaN row
			p := params[i%len(params)]
			p.Seed = uint64(i)
			d, _ := sample.New(p)
			h, _ := sample.New(p)
			devs, hosts = append(devs, d), append(hosts, h)
			hists = append(hists, window(host[i]))
		}
		for step := range 6 {
			rows, qs = rows[:0], qs[:0]
			for i, d := range devs {
				q, ok := d.Query(vocab, hists[i])
				if !ok {
					t.Fatalf("sampler %d: no device query", i)
				}
				rows, qs = append(rows, i+1), append(qs, q)
			}
			poisonSampleScratch(t, b, vocab, qs)
			got, err := b.SampleRows(x, rows, qs)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range devs {
				id, ok := d.Finish(qs[i], got[i], vocab)
				want := hosts[i].Sample(host[i], hists[i])
				if !ok || id != want {
					t.Fatalf("vocab %d step %d sampler %d (%+v): device drew %d (ok %v), host %d", vocab, step, i, params[i%len(params)], id, ok, want)
				}
				hists[i] = append(hists[i], want)
			}
		}
		b.FreeTensor(x)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestSampleRowsBadInput: bad rows, ids and k are errors, not panics.
func TestSampleRowsBadInput(t *testing.T) {
	b := newTestBackend(t)
	x := b.NewTensor(2, 100)
	defer b.FreeTensor(x)
	b.FromHost(x, make([]float32, 200))
	for _, c := range []struct {
		name string
		rows []int
		qs   []sample.Query
	}{
		{"row 2 of 2", []int{0, 2}, []sample.Query{{}, {}}},
		{"negative row", []int{-1}, []sample.Query{{}}},
		{"more rows than queries", []int{0, 1}, []sample.Query{{}}},
		{"penalised id 100", []int{0}, []sample.Query{{Penalty: 1.2, IDs: []int32{3, 100}}}},
		{"top -1", []int{1}, []sample.Query{{K: -1}}},
	} {
		if _, err := b.SampleRows(x, c.rows, c.qs); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if _, err := b.SampleRows(b.NewTensor(0, 0), nil, nil); err != nil {
		t.Errorf("no rows: %v", err)
	}
}

// TestSamplePlan checks SampleRows' plan without a GPU: which kernel
// serves each query, the declined ones, and that the scratch regions are
// aligned, disjoint and inside the buffer asked for.
func TestSamplePlan(t *testing.T) {
	ids := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	for _, c := range []struct {
		name                  string
		cols                  int
		qs                    []sample.Query
		stage                 int64
		arg, top, pen, refuse []int
		kmax                  int
		err                   bool
	}{
		{name: "greedy", cols: 32000, qs: []sample.Query{{}, {}}, stage: 1 << 20, arg: []int{0, 1}},
		{name: "mixed", cols: 248320, stage: 1 << 20,
			qs:  []sample.Query{{K: 40}, {Penalty: 1.3, IDs: ids(64)}, {K: 256, Penalty: 1.1, IDs: ids(10)}, {K: 257}, {Penalty: 1, IDs: ids(5)}},
			arg: []int{1, 4}, top: []int{0, 2}, pen: []int{1, 2}, refuse: []int{3}, kmax: 256},
		{name: "k above the row", cols: 100, qs: []sample.Query{{K: 101}, {K: 100}}, stage: 1 << 20, top: []int{1}, refuse: []int{0}, kmax: 100},
		{name: "ids past the stage bound", cols: 1000, stage: 400,
			qs:  []sample.Query{{Penalty: 2, IDs: ids(60)}, {Penalty: 2, IDs: ids(60)}, {Penalty: 2, IDs: ids(40)}},
			arg: []int{0, 2}, pen: []int{0, 2}, refuse: []int{1}},
		{name: "negative k", cols: 100, qs: []sample.Query{{K: -1}}, stage: 1 << 20, err: true},
		{name: "id outside", cols: 100, qs: []sample.Query{{Penalty: 2, IDs: []int32{100}}}, stage: 1 << 20, err: true},
	} {
		p, err := planSample(c.cols, c.qs, c.stage)
		if c.err {
			if err == nil {
				t.Errorf("%s: no error", c.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var refused []int
		for i, d := range p.declined {
			if d {
				refused = append(refused, i)
			}
		}
		if !slices.Equal(p.arg, c.arg) || !slices.Equal(p.top, c.top) || !slices.Equal(p.pen, c.pen) || !slices.Equal(refused, c.refuse) || p.kmax != c.kmax {
			t.Errorf("%s: arg %v top %v pen %v declined %v kmax %d, want %v %v %v %v %d", c.name, p.arg, p.top, p.pen, refused, p.kmax, c.arg, c.top, c.pen, c.refuse, c.kmax)
		}
		regions := []struct{ off, n int64 }{
			{p.penOff, int64(len(p.pen)) * int64(c.cols) * 4},
			{p.partOff, int64(len(p.arg)) * int64(p.parts) * 8},
			{p.keyOff, 2 * int64(len(p.top)) * p.keyStride * 8},
			{p.resOff, int64(len(p.arg)+2*len(p.top)*p.kmax) * 4},
		}
		for i, g := range regions {
			if g.off%256 != 0 || g.off+g.n > p.size || i > 0 && g.off < regions[i-1].off+regions[i-1].n {
				t.Errorf("%s: region %d at %d (+%d) in %d bytes after %+v", c.name, i, g.off, g.n, p.size, regions[:i])
			}
		}
		if p.size&(p.size-1) != 0 {
			t.Errorf("%s: scratch of %d bytes is not a power of two", c.name, p.size)
		}
	}
}

// BenchmarkSampleRows times sampling the 16 rows of a batched decode step
// (248,320-entry rows, 64-id penalty) by one SampleRows against 16
// ArgmaxRow/TopKRow calls, one round trip each (the batcher's earlier path).
func BenchmarkSampleRows(b *testing.B) {
	d := openTestDevice(b)
	be, err := NewBackend(d, BackendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const vocab, nrows = 248320, 16
	r := rand.New(rand.NewPCG(1, 3))
	data := make([]float32, 0, nrows*vocab)
	for range nrows {
		data = append(data, samplingRow(r, vocab)...)
	}
	x := be.NewTensor(nrows, vocab)
	be.FromHost(x, data)
	var ids []int32
	for range 64 {
		ids = append(ids, int32(r.IntN(vocab)))
	}
	ids = distinctIDs(ids)
	rows := make([]int, nrows)
	for i := range rows {
		rows[i] = i
	}
	for _, c := range []struct {
		name string
		q    sample.Query
	}{
		{"greedy", sample.Query{Penalty: 1}},
		{"greedy penalty 64", sample.Query{Penalty: 1.1, IDs: ids}},
		{"top-40 penalty 64", sample.Query{K: 40, Penalty: 1.1, IDs: ids}},
	} {
		qs := make([]sample.Query, nrows)
		for i := range qs {
			qs[i] = c.q
		}
		b.Run(c.name+"/one call", func(b *testing.B) {
			for b.Loop() {
				if _, err := be.SampleRows(x, rows, qs); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/per row", func(b *testing.B) {
			for b.Loop() {
				for _, row := range rows {
					var err error
					if c.q.K == 0 {
						_, err = be.ArgmaxRow(x, row, c.q.Penalty, c.q.IDs)
					} else {
						_, _, err = be.TopKRow(x, row, c.q.K, c.q.Penalty, c.q.IDs)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
