package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// ropeRef is the RoPE the KV write kernel computes: theta = pos*invf[i] in
// float64, cos/sin rounded to float32, rotation in float32 without fusion.
func ropeRef(row []float32, kvh, d, pos int, r model.Rope) {
	if r.Dim == 0 {
		return
	}
	inv := r.InvFreqs()
	half := r.Dim / 2
	for h := range kvh {
		x := row[h*d : (h+1)*d]
		for i := range half {
			i0, i1 := 2*i, 2*i+1
			if r.NeoX {
				i0, i1 = i, i+half
			}
			s, c := math.Sincos(float64(pos) * inv[i])
			cf, sf := float32(c), float32(s)
			x0, x1 := x[i0], x[i1]
			x[i0] = float32(x0*cf) - float32(x1*sf)
			x[i1] = float32(x0*sf) + float32(x1*cf)
		}
	}
}

type seqShape struct{ cached, new int }

// testBatch lays out seqs over a pool of pages with shuffled, distinct page
// ids, rows in order plus spare rows that belong to no sequence. With
// sparse, pages holding only cached tokens all map to page 0 (for writes,
// which touch only the new tokens' pages).
func testBatch(rng *rand.Rand, seqs []seqShape, pageSize, pages, spare int, sparse bool) (*model.Batch, int) {
	perm := rng.Perm(pages - 1)
	b := &model.Batch{}
	rows, used := 0, 0
	for _, s := range seqs {
		total := s.cached + s.new
		np := (total + pageSize - 1) / pageSize
		pt := make([]int32, np)
		for i := range pt {
			if sparse && (i+1)*pageSize <= s.cached {
				continue // page 0
			}
			pt[i] = int32(perm[used] + 1)
			used++
		}
		b.Seqs = append(b.Seqs, model.SeqSpan{Offset: rows, Cached: s.cached, NewTokens: s.new, Pages: pt})
		for i := range s.new {
			b.Pos = append(b.Pos, int32(s.cached+i))
			b.Tokens = append(b.Tokens, 1)
		}
		rows += s.new
	}
	for range spare {
		b.Pos = append(b.Pos, 0)
		b.Tokens = append(b.Tokens, 1)
	}
	return b, rows + spare
}

// pagesFor counts the pages testBatch needs (plus page 0).
func pagesFor(seqs []seqShape, pageSize int, sparse bool) int {
	n := 1
	for _, s := range seqs {
		n += (s.cached + s.new + pageSize - 1) / pageSize
		if sparse {
			n -= s.cached / pageSize
		}
	}
	return n
}

// randRow fills x with normal values times a per-row magnitude 10^U(-2,2).
func randRow(rng *rand.Rand, x []float32) {
	mag := math.Pow(10, 4*rng.Float64()-2)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * mag)
	}
}

func float32Bytes(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, x := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// testLayout is a pool storing K in dt and V in vt (Auto: dt too), with
// random static scales when sm asks for them and a half is FP8.
func testLayout(dt, vt kvcache.DType, sm kvcache.ScaleMode, layers, kvh, d, p, pages int, rng *rand.Rand) kvcache.Layout {
	l := kvcache.Layout{Layers: layers, KVHeads: kvh, HeadDim: d, PageSize: p, Pages: pages, DType: dt, Scales: sm}
	if vt != kvcache.Auto {
		l = l.WithDTypes(dt, vt)
	}
	if l.AnyFP8() && sm == kvcache.StaticScales {
		for range layers * kvh {
			l.KScale = append(l.KScale, float32(0.001+0.05*rng.Float64()))
			l.VScale = append(l.VScale, float32(0.001+0.05*rng.Float64()))
		}
	}
	return l
}

// pairName names a K/V dtype pair in test names: "bf16", or "bf16+fp8_e4m3"
// when V (vt, Auto: the same) differs.
func pairName(dt, vt kvcache.DType) string {
	if vt == kvcache.Auto || vt == dt {
		return dt.String()
	}
	return dt.String() + "+" + vt.String()
}

// poisonScales fills the per-token scale pools a HostStore has (nil for a
// 16-bit or static half) with x.
func poisonScales(x float32, scales ...[]float32) {
	for _, s := range scales {
		for i := range s {
			s[i] = x
		}
	}
}

// TestKVWriteMatchesHostStore: the codes and scales kv_write stores are
// bit-identical to kvcache.HostStore.WriteRow's, for every dtype, static
// and dynamic FP8 scales, and the mixed K/V pairs the GPU runs (16-bit K,
// FP8 V), over the pool poisoned with 0xa5 bytes first.
func TestKVWriteMatchesHostStore(t *testing.T) {
	d := openTestDevice(t)
	type dtc struct {
		dt kvcache.DType
		sm kvcache.ScaleMode
		vt kvcache.DType // V's dtype; Auto: dt
	}
	dts := []dtc{{kvcache.BF16, 0, 0}, {kvcache.F16, 0, 0}, {kvcache.FP8E4M3, kvcache.DynamicScales, 0},
		{kvcache.FP8E5M2, kvcache.DynamicScales, 0}, {kvcache.FP8E4M3, kvcache.StaticScales, 0}, {kvcache.FP8E5M2, kvcache.StaticScales, 0},
		{kvcache.BF16, kvcache.DynamicScales, kvcache.FP8E4M3}, {kvcache.BF16, kvcache.StaticScales, kvcache.FP8E5M2},
		{kvcache.F16, kvcache.DynamicScales, kvcache.FP8E5M2}, {kvcache.F16, kvcache.StaticScales, kvcache.FP8E4M3}}
	dims := []int{64, 80, 96, 128, 256}
	pageSizes := []int{1, 8, 16, 64, 256}
	ropes := func(hd int) []model.Rope {
		ff := make([]float32, hd/4)
		for i := range ff {
			ff[i] = 1 + float32(i%5)
		}
		return []model.Rope{
			{Dim: hd, Base: 10000},
			{Dim: hd, Base: 1e6, NeoX: true},
			{Dim: hd / 2, Base: 10000, NeoX: true, Scale: 0.25},
			{Dim: hd / 2, Base: 500000, FreqFactors: ff},
			{},
		}
	}
	seqs := []seqShape{{5, 7}, {0, 1}, {4000, 3}, {130000, 2}}
	for di, dc := range dts {
		for ki, hd := range dims {
			rng := rand.New(rand.NewPCG(uint64(di), uint64(ki)))
			p := pageSizes[(di+ki)%len(pageSizes)]
			rope := ropes(hd)[(di+2*ki)%5]
			kvh := 1 + (di+ki)%3
			name := fmt.Sprintf("%v-%v/d%d/p%d/kvh%d/rope%d-neox%v", pairName(dc.dt, dc.vt), dc.sm, hd, p, kvh, rope.Dim, rope.NeoX)
			t.Run(name, func(t *testing.T) {
				pages := pagesFor(seqs, p, true) + 3
				l := testLayout(dc.dt, dc.vt, dc.sm, 2, kvh, hd, p, pages, rng)
				b, rows := testBatch(rng, seqs, p, pages, 1, true)
				w := kvh * hd
				k, v := make([]float32, rows*w), make([]float32, rows*w)
				for r := range rows {
					for h := range kvh {
						randRow(rng, k[r*w+h*hd:r*w+(h+1)*hd])
						randRow(rng, v[r*w+h*hd:r*w+(h+1)*hd])
					}
				}
				clear(k[w : w+hd])     // a zero K row (dynamic scale 0)
				clear(v[2*w : 2*w+hd]) // a zero V row
				v[3*w+1] = float32(math.Inf(1))
				v[4*w+2] = float32(math.NaN())
				v[5*w+3] = 1e30

				// CPU reference into a host store poisoned like the device pool.
				hs, err := kvcache.NewHostStore(l)
				if err != nil {
					t.Fatal(err)
				}
				hk, hv, hks, hvs := hs.Raw(1)
				for i := range hk {
					hk[i] = 0xa5
				}
				for i := range hv {
					hv[i] = 0xa5
				}
				if l.HasTokenScales() {
					poisonScales(math.Float32frombits(0xa5a5a5a5), hks, hvs)
				}
				kr := make([]float32, w)
				for _, s := range b.Seqs {
					for i := range s.NewTokens {
						r := s.Offset + i
						pos := s.Cached + i
						copy(kr, k[r*w:(r+1)*w])
						ropeRef(kr, kvh, hd, pos, rope)
						hs.WriteRow(1, int(s.Pages[pos/p]), pos%p, kr, v[r*w:(r+1)*w])
					}
				}

				gk := make([]byte, len(hk))
				gv := make([]byte, len(hv))
				var gks, gvs []float32
				if l.KHasScales() {
					gks = make([]float32, len(hks))
				}
				if l.VHasScales() {
					gvs = make([]float32, len(hvs))
				}
				err = d.Do(func(c *Ctx) error {
					kv, err := c.AllocKV(l)
					if err != nil {
						return err
					}
					defer kv.Free(c)
					ly := kv.layers[1]
					if err := c.Memset8(ly.buf.Ptr, 0xa5, ly.buf.Size); err != nil {
						return err
					}
					kb, err := c.Alloc(int64(8*len(k)), "test k/v")
					if err != nil {
						return err
					}
					defer c.Free(kb)
					vb := kb.Ptr.Add(int64(4 * len(k)))
					if err := Upload(c, kb.Ptr, k); err != nil {
						return err
					}
					if err := Upload(c, vb, v); err != nil {
						return err
					}
					if err := kv.Write(c, 1, kb.Ptr, vb, rows, b, rope); err != nil {
						return err
					}
					pk, pv, pks, pvs := kv.LayerPtrs(1)
					if err := Download(c, gk, pk); err != nil {
						return err
					}
					if err := Download(c, gv, pv); err != nil {
						return err
					}
					if gks != nil {
						if err := Download(c, gks, pks); err != nil {
							return err
						}
					}
					if gvs != nil {
						if err := Download(c, gvs, pvs); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				cmpBytes(t, "K codes", gk, hk)
				cmpBytes(t, "V codes", gv, hv)
				if gks != nil {
					cmpBytes(t, "K scales", float32Bytes(gks), float32Bytes(hks))
				}
				if gvs != nil {
					cmpBytes(t, "V scales", float32Bytes(gvs), float32Bytes(hvs))
				}
			})
		}
	}
}

func cmpBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	bad, first := 0, -1
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d bytes differ from kvcache.HostStore.WriteRow; first at byte %d: got %#02x want %#02x",
			what, bad, len(got), first, got[first], want[first])
	}
}

type attnCase struct {
	dt         kvcache.DType
	vt         kvcache.DType // V's dtype when it differs from dt (Auto: dt)
	sm         kvcache.ScaleMode
	kvh, group int
	d, p       int
	seqs       []seqShape
	splits     int     // 0: auto
	qmag       float64 // q magnitude (peakier softmax when larger)
	long       bool
	fa         bool // KVCache.Prefill = PrefillFA, and the FA kernel must run
	faWarps    int  // KVCache.FAWarps
}

func (c attnCase) String() string {
	var lens []string
	for _, s := range c.seqs {
		lens = append(lens, fmt.Sprintf("%d+%d", s.cached, s.new))
	}
	s := fmt.Sprintf("%v-%v/kvh%d/g%d/d%d/p%d/s%d/%s", pairName(c.dt, c.vt), c.sm, c.kvh, c.group, c.d, c.p, c.splits, strings.Join(lens, ","))
	if c.faWarps != 0 {
		s += fmt.Sprintf("/w%d", c.faWarps)
	}
	return s
}

func attnCases() []attnCase {
	dec := []seqShape{{0, 1}, {16, 1}, {299, 1}, {1000, 1}}
	mixed := []seqShape{{0, 37}, {100, 20}, {50, 1}, {7, 9}}
	return []attnCase{
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: dec},
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: dec, splits: 1},
		{dt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 64, seqs: dec, qmag: 3},
		{dt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 64, seqs: dec, splits: 7},
		{dt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 32, seqs: dec, splits: 2},
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 32, seqs: mixed, splits: 5},
		{dt: kvcache.FP8E5M2, kvh: 3, group: 3, d: 64, p: 8, seqs: dec},
		{dt: kvcache.F16, kvh: 2, group: 2, d: 256, p: 32, seqs: dec},
		{dt: kvcache.FP8E4M3, sm: kvcache.StaticScales, kvh: 1, group: 8, d: 96, p: 128, seqs: dec},
		{dt: kvcache.FP8E5M2, sm: kvcache.StaticScales, kvh: 2, group: 7, d: 64, p: 16, seqs: dec},
		{dt: kvcache.BF16, kvh: 4, group: 1, d: 80, p: 256, seqs: dec},
		{dt: kvcache.FP8E4M3, kvh: 1, group: 5, d: 64, p: 16, seqs: dec},
		{dt: kvcache.FP8E4M3, kvh: 2, group: 6, d: 256, p: 8, seqs: dec},
		{dt: kvcache.BF16, kvh: 1, group: 16, d: 128, p: 64, seqs: dec},
		{dt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 80, p: 32, seqs: dec},
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: mixed},
		{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: mixed, splits: 3},
		{dt: kvcache.FP8E4M3, kvh: 2, group: 2, d: 64, p: 32, seqs: mixed, qmag: 3},
		{dt: kvcache.F16, kvh: 3, group: 1, d: 128, p: 8, seqs: mixed},
		{dt: kvcache.FP8E5M2, kvh: 1, group: 3, d: 256, p: 64, seqs: mixed},
		{dt: kvcache.FP8E4M3, kvh: 1, group: 8, d: 128, p: 64, seqs: []seqShape{{131071, 1}, {70000, 1}}, long: true},
		{dt: kvcache.BF16, kvh: 1, group: 8, d: 128, p: 256, seqs: []seqShape{{131071, 1}}, long: true},
		{dt: kvcache.FP8E4M3, kvh: 1, group: 4, d: 128, p: 16, seqs: []seqShape{{32000, 64}}, long: true},

		// K and V in different dtypes (a 16-bit K, an FP8 V): every pair,
		// every head_dim, both scale modes, splits, decode and mixed batches.
		{dt: kvcache.BF16, vt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 16, seqs: dec},
		{dt: kvcache.BF16, vt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 64, seqs: dec, splits: 7, qmag: 3},
		{dt: kvcache.BF16, vt: kvcache.FP8E5M2, kvh: 3, group: 3, d: 64, p: 8, seqs: dec},
		{dt: kvcache.F16, vt: kvcache.FP8E4M3, kvh: 2, group: 2, d: 256, p: 32, seqs: dec},
		{dt: kvcache.F16, vt: kvcache.FP8E5M2, kvh: 4, group: 1, d: 80, p: 256, seqs: dec},
		{dt: kvcache.BF16, vt: kvcache.FP8E4M3, sm: kvcache.StaticScales, kvh: 1, group: 8, d: 96, p: 128, seqs: dec},
		{dt: kvcache.F16, vt: kvcache.FP8E5M2, sm: kvcache.StaticScales, kvh: 2, group: 7, d: 64, p: 16, seqs: dec},
		{dt: kvcache.BF16, vt: kvcache.FP8E5M2, kvh: 2, group: 4, d: 128, p: 32, seqs: mixed, splits: 5},
		{dt: kvcache.F16, vt: kvcache.FP8E4M3, kvh: 3, group: 1, d: 128, p: 8, seqs: mixed, qmag: 3},
		{dt: kvcache.F16, vt: kvcache.FP8E5M2, kvh: 1, group: 3, d: 256, p: 64, seqs: mixed},
		{dt: kvcache.BF16, vt: kvcache.FP8E4M3, kvh: 2, group: 6, d: 96, p: 16, seqs: mixed, splits: 3},
		{dt: kvcache.F16, vt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 80, p: 32, seqs: mixed},
		{dt: kvcache.BF16, vt: kvcache.FP8E5M2, kvh: 2, group: 6, d: 256, p: 8, seqs: dec},
		{dt: kvcache.BF16, vt: kvcache.FP8E4M3, kvh: 1, group: 8, d: 128, p: 64, seqs: []seqShape{{131071, 1}, {70000, 1}}, long: true},
	}
}

// attnTol is the largest accepted ||gpu - cpu|| / ||cpu|| per (row, head):
// both read the same codes; the GPU carries q and p with ~16 mantissa bits
// (hi/lo 16-bit pairs) and float32 accumulation, the CPU float32.
const attnTol = 1e-3

func TestAttentionMatchesHostStore(t *testing.T) {
	d := openTestDevice(t)
	for ci, tc := range attnCases() {
		t.Run(tc.String(), func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("long context case skipped in -short mode")
			}
			checkAttention(t, d, ci, tc)
		})
	}
}

// faCases cover the FA prefill kernel: every KV dtype x head_dim 64/128/256,
// each with three (GQA ratio, chunk, cached depth) combinations that
// together take every ratio 1/4/8, chunk 64/100/512 and depth 0/1000/5000,
// and a second sequence (a 64-token chunk at another depth) in the batch;
// then forced splits, static FP8 scales, odd GQA ratios, small pages, and
// a batch mixing FA chunks with decode rows and a short chunk (both
// kernels and both merges in one call); then CTAs of 8 warps (128 rows);
// last, the mixed K/V pairs (16-bit K, FP8 V) x head_dim 64/128/256 and
// their static scales, splits, mixed batches and 8-warp CTAs.
func faCases() []attnCase {
	dts := []struct {
		dt kvcache.DType
		sm kvcache.ScaleMode
	}{{kvcache.BF16, 0}, {kvcache.F16, 0}, {kvcache.FP8E4M3, kvcache.DynamicScales}, {kvcache.FP8E5M2, kvcache.DynamicScales}}
	groups := []int{1, 4, 8}
	chunks := []int{64, 100, 512}
	depths := []int{0, 1000, 5000}
	pages := []int{16, 64, 256}
	var cs []attnCase
	for di, dt := range dts {
		for ki, hd := range []int{64, 128, 256} {
			for i := range 3 {
				a := di + ki
				chunk, depth := chunks[(i+a)%3], depths[(i+2*a)%3]
				cs = append(cs, attnCase{
					dt: dt.dt, sm: dt.sm, kvh: 2, group: groups[(i+ki)%3], d: hd, p: pages[(i+di)%3],
					seqs: []seqShape{{depth, chunk}, {depths[(i+2*a+1)%3], 64}},
					long: chunk == 512 && depth == 5000, fa: true,
				})
			}
		}
	}
	mixed := []seqShape{{1000, 100}, {50, 1}, {0, 64}, {7, 9}, {3000, 1}}
	cs = append(cs,
		attnCase{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: []seqShape{{1000, 100}, {0, 300}}, splits: 3, fa: true},
		attnCase{dt: kvcache.FP8E4M3, kvh: 2, group: 8, d: 256, p: 64, seqs: []seqShape{{5000, 100}}, splits: 7, fa: true, qmag: 3},
		attnCase{dt: kvcache.FP8E4M3, sm: kvcache.StaticScales, kvh: 1, group: 8, d: 128, p: 128, seqs: []seqShape{{200, 130}}, fa: true},
		attnCase{dt: kvcache.FP8E5M2, sm: kvcache.StaticScales, kvh: 2, group: 7, d: 64, p: 16, seqs: []seqShape{{33, 77}}, fa: true},
		attnCase{dt: kvcache.F16, kvh: 3, group: 3, d: 128, p: 8, seqs: []seqShape{{100, 65}}, fa: true, qmag: 3},
		attnCase{dt: kvcache.BF16, kvh: 1, group: 16, d: 128, p: 1, seqs: []seqShape{{10, 70}}, fa: true},
		attnCase{dt: kvcache.BF16, kvh: 2, group: 4, d: 128, p: 16, seqs: mixed, fa: true},
		attnCase{dt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 32, seqs: mixed, splits: 4, fa: true},
		attnCase{dt: kvcache.BF16, kvh: 2, group: 8, d: 128, p: 16, seqs: []seqShape{{1000, 512}, {0, 100}}, fa: true, faWarps: 4},
		attnCase{dt: kvcache.FP8E4M3, kvh: 2, group: 8, d: 256, p: 64, seqs: []seqShape{{5000, 100}, {30, 64}}, fa: true, faWarps: 4},
		attnCase{dt: kvcache.F16, kvh: 2, group: 3, d: 64, p: 16, seqs: []seqShape{{100, 300}}, splits: 3, fa: true, faWarps: 4},
		attnCase{dt: kvcache.FP8E5M2, kvh: 1, group: 16, d: 128, p: 32, seqs: mixed, fa: true, faWarps: 4},
		attnCase{dt: kvcache.BF16, kvh: 2, group: 1, d: 256, p: 256, seqs: []seqShape{{1000, 512}}, fa: true, faWarps: 4},
	)
	for pi, pr := range kvcache.GPUPairs {
		for ki, hd := range []int{64, 128, 256} {
			a := pi + ki
			chunk, depth := chunks[(a+1)%3], depths[a%3]
			cs = append(cs, attnCase{
				dt: pr[0], vt: pr[1], kvh: 2, group: groups[a%3], d: hd, p: pages[(a+1)%3],
				seqs: []seqShape{{depth, chunk}, {depths[(a+2)%3], 64}},
				long: chunk == 512 && depth == 5000, fa: true,
			})
		}
	}
	return append(cs,
		attnCase{dt: kvcache.BF16, vt: kvcache.FP8E4M3, sm: kvcache.StaticScales, kvh: 1, group: 8, d: 128, p: 128, seqs: []seqShape{{200, 130}}, fa: true},
		attnCase{dt: kvcache.F16, vt: kvcache.FP8E5M2, sm: kvcache.StaticScales, kvh: 2, group: 7, d: 64, p: 16, seqs: []seqShape{{33, 77}}, fa: true},
		attnCase{dt: kvcache.BF16, vt: kvcache.FP8E4M3, kvh: 2, group: 4, d: 128, p: 32, seqs: mixed, splits: 4, fa: true},
		attnCase{dt: kvcache.F16, vt: kvcache.FP8E4M3, kvh: 3, group: 3, d: 128, p: 8, seqs: []seqShape{{100, 65}}, fa: true, qmag: 3},
		attnCase{dt: kvcache.F16, vt: kvcache.FP8E4M3, kvh: 2, group: 8, d: 256, p: 64, seqs: []seqShape{{5000, 100}, {30, 64}}, fa: true, faWarps: 4, qmag: 3},
		attnCase{dt: kvcache.BF16, vt: kvcache.FP8E5M2, kvh: 1, group: 16, d: 128, p: 32, seqs: mixed, fa: true, faWarps: 4},
		attnCase{dt: kvcache.BF16, vt: kvcache.FP8E4M3, kvh: 2, group: 8, d: 128, p: 16, seqs: []seqShape{{1000, 512}, {0, 100}}, splits: 3, fa: true, faWarps: 4},
	)
}

// TestAttentionFAMatchesHostStore checks attn_fa (FTCHAT_PREFILL_ATTN=fa)
// against the CPU attention (kvcache.HostStore) with attnTol, outputs
// poisoned with NaN first.
func TestAttentionFAMatchesHostStore(t *testing.T) {
	d := openTestDevice(t)
	for ci, tc := range faCases() {
		t.Run(tc.String(), func(t *testing.T) {
			if tc.long && testing.Short() {
				t.Skip("long context case skipped in -short mode")
			}
			checkAttention(t, d, 1000+ci, tc)
		})
	}
}

// checkAttention runs one case on the GPU and compares every (row, head)
// with the CPU reference, within attnTol.
func checkAttention(t *testing.T, d *Device, ci int, tc attnCase) {
	t.Helper()
	worst, at := attentionError(t, d, ci, tc)
	if worst > attnTol {
		t.Errorf("max rel. error %.2e at %s exceeds %.0e", worst, at, attnTol)
	}
	t.Logf("max rel. error %.2e at %s", worst, at) // kernel variants are judged by it (scripts/gpu_session13.sh)
}

// attentionError runs one case on the GPU and returns the largest relative
// error of a (row, head) against the CPU reference, and where it is.
func attentionError(t *testing.T, d *Device, ci int, tc attnCase) (float64, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(ci), 7))
	pages := pagesFor(tc.seqs, tc.p, false) + 2
	l := testLayout(tc.dt, tc.vt, tc.sm, 2, tc.kvh, tc.d, tc.p, pages, rng)
	hs, err := kvcache.NewHostStore(l)
	if err != nil {
		t.Fatal(err)
	}
	// Poison the whole layer: rows the kernel must not read are NaN.
	hk, hv, hks, hvs := hs.Raw(1)
	for i := range hk {
		hk[i] = 0xff
	}
	for i := range hv {
		hv[i] = 0xff
	}
	if l.HasTokenScales() {
		poisonScales(float32(math.NaN()), hks, hvs)
	}
	b, rows := testBatch(rng, tc.seqs, tc.p, pages, 1, false)
	w := tc.kvh * tc.d
	kr, vr := make([]float32, w), make([]float32, w)
	for _, s := range b.Seqs {
		for pos := range s.Cached + s.NewTokens {
			for h := range tc.kvh {
				for i := range tc.d {
					kr[h*tc.d+i] = float32(rng.NormFloat64())
				}
				randRow(rng, vr[h*tc.d:(h+1)*tc.d])
			}
			if l.AnyFP8() && l.Scales == kvcache.StaticScales {
				// keep values inside the static scale's range
				for i := range kr {
					kr[i] *= 0.5
					vr[i] = float32(rng.NormFloat64())
				}
			}
			hs.WriteRow(1, int(s.Pages[pos/tc.p]), pos%tc.p, kr, vr)
		}
	}
	heads := tc.kvh * tc.group
	hw := heads * tc.d
	qmag := tc.qmag
	if qmag == 0 {
		qmag = 1
	}
	q := make([]float32, rows*hw)
	for i := range q {
		q[i] = float32(rng.NormFloat64() * qmag)
	}
	scale := float32(1 / math.Sqrt(float64(tc.d)))
	got := make([]float32, rows*hw)
	err = d.Do(func(c *Ctx) error {
		kv, err := c.AllocKV(l)
		if err != nil {
			return err
		}
		defer kv.Free(c)
		kv.Splits = tc.splits
		if tc.fa {
			kv.Prefill = PrefillFA
			kv.FAWarps = tc.faWarps
		}
		pk, pv, pks, pvs := kv.LayerPtrs(1)
		for _, u := range []error{Upload(c, pk, hk), Upload(c, pv, hv)} {
			if u != nil {
				return u
			}
		}
		if l.KHasScales() {
			if err := Upload(c, pks, hks); err != nil {
				return err
			}
		}
		if l.VHasScales() {
			if err := Upload(c, pvs, hvs); err != nil {
				return err
			}
		}
		buf, err := c.Alloc(int64(8*len(q)), "test q/out")
		if err != nil {
			return err
		}
		defer c.Free(buf)
		qp, op := buf.Ptr, buf.Ptr.Add(int64(4*len(q)))
		if err := Upload(c, qp, q); err != nil {
			return err
		}
		if err := c.Memset32(op, 0x7fc00000, int64(len(q))); err != nil { // NaN poison
			return err
		}
		if err := kv.Attend(c, op, qp, rows, 1, b, heads, scale); err != nil {
			return err
		}
		if tc.fa && kv.lastFA == 0 {
			return fmt.Errorf("the FA kernel did not run")
		}
		return Download(c, got, op)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := hostAttend(hs, b, q, rows, heads, scale)
	worst, worstAt := 0.0, ""
	covered := make([]bool, rows)
	for _, s := range b.Seqs {
		for i := range s.NewTokens {
			r := s.Offset + i
			covered[r] = true
			for h := range heads {
				g := got[r*hw+h*tc.d : r*hw+(h+1)*tc.d]
				wv := want[r*hw+h*tc.d : r*hw+(h+1)*tc.d]
				var num, den float64
				for j := range g {
					if math.IsNaN(float64(g[j])) || math.IsInf(float64(g[j]), 0) {
						t.Fatalf("row %d head %d dim %d: %v (not written or not finite)", r, h, j, g[j])
					}
					e := float64(g[j] - wv[j])
					num += e * e
					den += float64(wv[j]) * float64(wv[j])
				}
				rel := math.Sqrt(num / max(den, 1e-30))
				if rel > worst {
					worst, worstAt = rel, fmt.Sprintf("row %d (pos %d) head %d", r, s.Cached+i, h)
				}
			}
		}
	}
	for r := range rows {
		if !covered[r] {
			for j := range hw {
				if !math.IsNaN(float64(got[r*hw+j])) {
					t.Fatalf("row %d belongs to no sequence but was written (%v)", r, got[r*hw+j])
				}
			}
		}
	}
	t.Logf("max rel. error %.2e at %s", worst, worstAt)
	return worst, worstAt
}

// hostAttend is the CPU reference of a batch (layer 1): AttendRows, which
// is bitwise Attend per row, over tiles of 32 rows on all cores.
func hostAttend(hs *kvcache.HostStore, b *model.Batch, q []float32, rows, heads int, scale float32) []float32 {
	hw := heads * hs.Layout().HeadDim
	out := make([]float32, rows*hw)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, s := range b.Seqs {
		for r0 := 0; r0 < s.NewTokens; r0 += 32 {
			n := min(32, s.NewTokens-r0)
			lo, hi := (s.Offset+r0)*hw, (s.Offset+r0+n)*hw
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				hs.AttendRows(out[lo:hi], q[lo:hi], n, 1, s.Pages, s.Cached+r0, heads, scale)
			}()
		}
	}
	wg.Wait()
	return out
}

// TestAttentionBatchErrors checks that malformed batches give one clear
// error (host-side validation; no GPU needed).
func TestAttentionBatchErrors(t *testing.T) {
	l := kvcache.Layout{Layers: 1, KVHeads: 2, HeadDim: 64, PageSize: 16, Pages: 4, DType: kvcache.BF16}
	kv := &KVCache{Layout: l}
	for _, tc := range []struct {
		name string
		b    model.Batch
		rows int
		want string
	}{
		{"page out of pool", model.Batch{Seqs: []model.SeqSpan{{NewTokens: 1, Pages: []int32{9}}}}, 1, "outside the pool"},
		{"short page table", model.Batch{Seqs: []model.SeqSpan{{Cached: 40, NewTokens: 1, Pages: []int32{0, 1}}}}, 1, "page table has 2 pages"},
		{"rows overflow", model.Batch{Seqs: []model.SeqSpan{{Offset: 1, NewTokens: 2, Pages: []int32{0}}}}, 2, "does not fit"},
		{"overlap", model.Batch{Seqs: []model.SeqSpan{{NewTokens: 2, Pages: []int32{0}}, {Offset: 1, NewTokens: 1, Pages: []int32{1}}}}, 2, "two sequences"},
		{"bad pos", model.Batch{Pos: []int32{3}, Seqs: []model.SeqSpan{{Cached: 2, NewTokens: 1, Pages: []int32{0}}}}, 1, "position 3"},
		{"no seqs", model.Batch{}, 1, "no sequences"},
	} {
		_, err := kv.buildMeta(nil, &tc.b, tc.rows, 4, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestBatchMetaAlignment: blocks are read as int2, so their offset in the
// metadata must be even whatever the page-table and row counts are.
func TestBatchMetaAlignment(t *testing.T) {
	l := kvcache.Layout{Layers: 1, KVHeads: 1, HeadDim: 64, PageSize: 8, Pages: 64, DType: kvcache.BF16}
	kv := &KVCache{Layout: l}
	for rows := 1; rows <= 4; rows++ {
		for np := 1; np <= 4; np++ {
			b := model.Batch{Seqs: []model.SeqSpan{{Cached: 8*np - rows, NewTokens: rows, Pages: make([]int32, np)}}}
			m, err := kv.buildMeta(nil, &b, rows, 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			if m.blkOff%2 != 0 || m.seqOff%4 != 0 {
				t.Errorf("rows %d, pages %d: seqs at word %d, blocks at word %d; want multiples of 4 and 2", rows, np, m.seqOff, m.blkOff)
			}
		}
	}
}

func TestChooseSplits(t *testing.T) {
	for _, tc := range []struct{ slots, ctas, maxK, want int }{
		{264, 8, 32768, 33},  // batch 1, 8 kv heads, 32K: one wave
		{264, 128, 32768, 2}, // batch 16
		{264, 8, 100, 1},     // short context: one chunk
		{264, 4096, 512, 1},  // prefill: enough CTAs already
		{396, 8, 1024, 4},    // chunks of at least 256 keys
	} {
		if got := chooseSplits(tc.slots, tc.ctas, tc.maxK, 0); got != tc.want {
			t.Errorf("chooseSplits(%d, %d, %d) = %d, want %d", tc.slots, tc.ctas, tc.maxK, got, tc.want)
		}
	}
}

// TestFASmemMatchesKernel: the launcher's shared-memory size of each FA
// kernel beside the q fragments (faSmemFixed) equals the kernel's own
// (attn_fa_smem), for every K/V pair the kernels are built for.
func TestFASmemMatchesKernel(t *testing.T) {
	d := openTestDevice(t)
	got := make([]int32, 3*len(attnPairs()))
	err := d.Do(func(c *Ctx) error {
		buf, err := c.Alloc(int64(4*len(got)), "test smem sizes")
		if err != nil {
			return err
		}
		defer c.Free(buf)
		f, err := c.Function(attentionModule, "attn_fa_smem")
		if err != nil {
			return err
		}
		if err := c.Launch(f, Dim3{X: 1}, Dim3{X: 32}, 0, c.Stream(), buf.Ptr); err != nil {
			return err
		}
		return Download(c, got, buf.Ptr)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range got {
		pr, dim := attnPairs()[i/3], faHeadDims[i%3]
		if want := faSmemFixed(pr[0].IsFP8(), pr[1].IsFP8(), dim); int(w) != want {
			t.Errorf("%s, head_dim %d: kernel uses %d bytes of shared memory, launcher %d", pairName(pr[0], pr[1]), dim, w, want)
		}
	}
}

// TestBatchMetaFATiles: with FA tiles on, sequences of at least
// faMinTokens new tokens become tiles of faTok tokens and leave the row
// blocks; the two merge row lists split rowSeq between the kernels.
func TestBatchMetaFATiles(t *testing.T) {
	l := kvcache.Layout{Layers: 1, KVHeads: 2, HeadDim: 128, PageSize: 16, Pages: 64, DType: kvcache.BF16}
	kv := &KVCache{Layout: l}
	b := model.Batch{Seqs: []model.SeqSpan{
		{Offset: 0, Cached: 10, NewTokens: 1, Pages: []int32{1}},
		{Offset: 1, Cached: 0, NewTokens: 100, Pages: make([]int32, 7)},
		{Offset: 101, Cached: 5, NewTokens: 63, Pages: make([]int32, 5)},
		{Offset: 164, Cached: 40, NewTokens: 64, Pages: make([]int32, 7)},
	}}
	rows := 229 // one spare row
	m, err := kv.buildMeta(nil, &b, rows, 4, 16)
	if err != nil {
		t.Fatal(err)
	}
	if m.nblocks != 1+32 { // seq 0: one block; seq 2: 63 tokens in blocks of 2
		t.Errorf("%d row blocks, want 33", m.nblocks)
	}
	var tiles [][2]int32
	for i := range m.nfa {
		tiles = append(tiles, [2]int32{m.words[m.faOff+2*i], m.words[m.faOff+2*i+1]})
	}
	want := [][2]int32{{1, 0}, {1, 16}, {1, 32}, {1, 48}, {1, 64}, {1, 80}, {1, 96}, {3, 0}, {3, 16}, {3, 32}, {3, 48}}
	if !slices.Equal(tiles, want) {
		t.Errorf("FA tiles %v, want %v", tiles, want)
	}
	if m.maxK != 68 || m.maxKFA != 104 {
		t.Errorf("maxK %d (blocks), %d (FA); want 68, 104", m.maxK, m.maxKFA)
	}
	for r := range rows {
		all, old, fa := m.words[m.rowOff+r], m.words[m.oldRowOff+r], m.words[m.faRowOff+r]
		isFA := all == 1 || all == 3
		if (isFA && (old != -1 || fa != all)) || (!isFA && (fa != -1 || old != all)) {
			t.Fatalf("row %d: rowSeq %d, old list %d, FA list %d", r, all, old, fa)
		}
	}
	// FA off: the layout is the block kernel's alone.
	m0, err := kv.buildMeta(nil, &b, rows, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m0.nfa != 0 || m0.oldRowOff != m0.rowOff || m0.faRowOff != m0.rowOff || m0.ptOff != m0.blkOff+2*m0.nblocks {
		t.Errorf("FA off: %d tiles, row lists at %d/%d (rowSeq %d), page tables at %d of %d words", m0.nfa, m0.oldRowOff, m0.faRowOff, m0.rowOff, m0.ptOff, len(m0.words))
	}
}

// TestBatchMetaOffsetsIgnorePages: a decode batch whose sequences gain
// pages keeps every section offset but the page tables' contents, so the
// kernels' pointer arguments (and the step's CUDA graphs) stay the same;
// the page tables, last, still hold every sequence's pages in order.
func TestBatchMetaOffsetsIgnorePages(t *testing.T) {
	l := kvcache.Layout{Layers: 1, KVHeads: 2, HeadDim: 64, PageSize: 16, Pages: 256, DType: kvcache.BF16}
	kv := &KVCache{Layout: l}
	batch := func(cached []int) *model.Batch {
		b := &model.Batch{}
		next := int32(0)
		for i, c := range cached {
			pages := make([]int32, (c+1+l.PageSize-1)/l.PageSize)
			for j := range pages {
				pages[j] = next
				next++
			}
			b.Seqs = append(b.Seqs, model.SeqSpan{Offset: i, Cached: c, NewTokens: 1, Pages: pages})
		}
		return b
	}
	for _, faTok := range []int{0, 64} {
		before, err := kv.buildMeta(nil, batch([]int{15, 40, 100}), 3, 2, faTok)
		if err != nil {
			t.Fatal(err)
		}
		after, err := kv.buildMeta(nil, batch([]int{16, 47, 112}), 3, 2, faTok) // the first and last gain a page
		if err != nil {
			t.Fatal(err)
		}
		type offs struct{ seq, pt, row, blk, fa, oldRow, faRow, nblocks, nfa int }
		o := func(m batchMeta) offs {
			return offs{m.seqOff, m.ptOff, m.rowOff, m.blkOff, m.faOff, m.oldRowOff, m.faRowOff, m.nblocks, m.nfa}
		}
		if o(before) != o(after) {
			t.Errorf("faTok %d: offsets moved when pages were added: %+v, then %+v", faTok, o(before), o(after))
		}
		if got, want := len(after.words)-after.ptOff, 2+3+8; got != want {
			t.Errorf("faTok %d: %d page-table words, want %d", faTok, got, want)
		}
		for i := range 13 {
			if after.words[after.ptOff+i] != int32(i) {
				t.Fatalf("faTok %d: page table word %d = %d, want %d", faTok, i, after.words[after.ptOff+i], i)
			}
		}
		if after.words[4*2+3] != 2+3 { // the third sequence's page-table offset
			t.Errorf("faTok %d: third sequence's pages at %d, want 5", faTok, after.words[4*2+3])
		}
	}
}
