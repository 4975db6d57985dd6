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
		for _, n := range []string{"sample_penalise", "sample_argmax_part", "sample_argmax_final", "sample_topk_tile", "sample_topk_emit"} {
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

// poisonSampleScratch fills the scratch buffers ArgmaxRow and TopKRow
// will take (the backend's cache hands back freed buffers of the same
// rounded size) with NaN, so a kernel that leaves part of its output
// unwritten fails the comparison.
func poisonSampleScratch(b *Backend, cols, k int) {
	tiles := cdiv(cols, sampleTile)
	sizes := []int64{int64(cols) * 4, int64(cdiv(cols, argmaxChunk))*8 + 4, 2*int64(tiles)*int64(k)*8 + int64(k)*8}
	for _, n := range sizes {
		n = (n + 255) &^ 255
		x := b.NewTensor(1, int(n/4))
		b.FromHost(x, nanVec(int(n/4)))
		b.FreeTensor(x)
	}
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
			poisonSampleScratch(b, vocab, 1)
			want, _ := sample.Slice(row).Argmax(pen, ids)
			got, err := b.ArgmaxRow(x, 1, pen, ids)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: ArgmaxRow %d, host %d", name, got, want)
			}
			for _, k := range []int{1, 40, 256} {
				poisonSampleScratch(b, vocab, k)
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
