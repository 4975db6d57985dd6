package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// Decode-attention benchmarks. Run on a GPU machine with
//
//	go test -c -o attn.test ./gpu && ./attn.test -test.run '^$' -test.bench Attention -test.benchtime 1x
//
// Each configuration fills a pool with pseudo-random codes (never zeros),
// rotates over enough layers that the KV read per round exceeds the L2
// several times, captures a CUDA graph of the calls and reports the median
// of CUDA-event timings of its replays per call, the KV bytes read (codes
// plus scales) per second, and that as a share of the read bandwidth that
// stream_read measures in the same run. A markdown table is printed at the
// end (and written to $FTCHAT_BENCH_MD when set).
//
// FTCHAT_BENCH_ONLY=fa runs only the FA prefill comparison (FTCHAT_FA_DEPTHS
// sets its depths, default 0,4096,32768): 512 new tokens
// at 0 / 4K / 32K cached, Llama-3.1-8B and Qwen3.6 shapes, bf16 and
// fp8_e4m3, the block kernel (prefill=old) and attn_fa (prefill=fa) in the
// same run, tabulated side by side in TFLOP/s at the end; then attn_fa
// with CTAs of 8 warps and with key splits sized for 1 and 4 waves
// (FTCHAT_FA_LEAN=1: attn_fa alone, as the engine launches it).

type attnShape struct {
	name             string
	heads, kvh, dim  int
	pageSize         int
	dtype            kvcache.DType
	batch, ctx, newT int
	waves            int           // KVCache.Waves
	prefill          PrefillKernel // KVCache.Prefill
	faWarps          int           // KVCache.FAWarps
}

type benchResult struct {
	shape     attnShape
	us, gbs   float64
	bytes     int64
	tflops    float64
	readShare float64
	faSplits  int // key splits of the FA kernel (0: not run)
	faWarps   int // and its warps per CTA
}

// fillBench writes pseudo-random words of kind (see bench_fill) over n bytes.
func fillBench(c *Ctx, p DevicePtr, n int64, seed uint32, kind int) error {
	f, err := c.Function(attentionModule, "bench_fill")
	if err != nil {
		return err
	}
	return c.Launch(f, Dim3{X: 4096}, Dim3{X: 256}, 0, c.Stream(), p, n/4, seed, kind)
}

// timeGraph captures calls of run (i = 0..calls-1) into a graph and
// returns the median of reps event-timed replays, in microseconds per call.
func timeGraph(c *Ctx, calls, reps int, run func(i int) error) (float64, error) {
	for i := range min(calls, 3) { // warm up: module load, uploads, workspace
		if err := run(i); err != nil {
			return 0, err
		}
	}
	if err := c.Sync(); err != nil {
		return 0, err
	}
	s := c.Stream()
	if err := c.BeginCapture(s); err != nil {
		return 0, err
	}
	for i := range calls {
		if err := run(i); err != nil {
			c.EndCapture(s)
			return 0, err
		}
	}
	g, err := c.EndCapture(s)
	if err != nil {
		return 0, err
	}
	defer c.DestroyGraph(g)
	start, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer c.DestroyEvent(start)
	end, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer c.DestroyEvent(end)
	var ts []float64
	for r := range reps + 1 {
		if err := c.Record(start, s); err != nil {
			return 0, err
		}
		if err := c.LaunchGraph(g, s); err != nil {
			return 0, err
		}
		if err := c.Record(end, s); err != nil {
			return 0, err
		}
		ms, err := c.Elapsed(start, end)
		if err != nil {
			return 0, err
		}
		if r > 0 { // the first replay uploads the graph
			ts = append(ts, float64(ms)*1000/float64(calls))
		}
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}

// readBandwidth measures stream_read over 4 GiB of random data: the best
// of a few grid sizes, each the median of event-timed runs, in GB/s.
func readBandwidth(c *Ctx) (float64, error) {
	const n = 4 << 30
	buf, err := c.Alloc(n, "read-bandwidth probe")
	if err != nil {
		return 0, err
	}
	defer c.Free(buf)
	sink, err := c.Alloc(1<<20, "read-bandwidth sink")
	if err != nil {
		return 0, err
	}
	defer c.Free(sink)
	if err := fillBench(c, buf.Ptr, n, 1, 3); err != nil {
		return 0, err
	}
	f, err := c.Function(attentionModule, "stream_read")
	if err != nil {
		return 0, err
	}
	best := 0.0
	for _, perSM := range []int{4, 8, 16} {
		grid := perSM * c.d.info.SMs
		us, err := timeGraph(c, 4, 10, func(int) error {
			return c.Launch(f, Dim3{X: grid}, Dim3{X: 256}, 0, c.Stream(), buf.Ptr, int64(n/16), sink.Ptr)
		})
		if err != nil {
			return 0, err
		}
		best = max(best, float64(n)/us/1e3)
	}
	return best, nil
}

// benchAttention sets up one configuration and times Attend on it.
func benchAttention(c *Ctx, s attnShape) (benchResult, error) {
	res := benchResult{shape: s}
	rng := rand.New(rand.NewPCG(uint64(s.ctx), uint64(s.batch)))
	total := s.ctx // tokens per sequence after this step
	pagesPerSeq := (total + s.pageSize - 1) / s.pageSize
	pages := s.batch * pagesPerSeq
	l := kvcache.Layout{Layers: 1, KVHeads: s.kvh, HeadDim: s.dim, PageSize: s.pageSize, Pages: pages, DType: s.dtype}
	layerBytes := int64(l.LayerElems())*int64(l.DType.ElemBytes())*2 + int64(l.LayerScales())*8
	l.Layers = int(min(max((1<<30+layerBytes-1)/layerBytes, 1), 32)) // >= 1 GiB per round (L2: 60 MB)
	kv, err := c.AllocKV(l)
	if err != nil {
		return res, err
	}
	defer kv.Free(c)
	kv.Waves = s.waves
	kv.Prefill = s.prefill
	kv.FAWarps = s.faWarps
	codes, scales := kv.LayerBytes()
	for i := range l.Layers {
		k, v, ks, vs := kv.LayerPtrs(i)
		kind := 0
		if l.DType.IsFP8() {
			kind = 1
		}
		for j, p := range []DevicePtr{k, v} {
			if err := fillBench(c, p, codes, uint32(4*i+j+7), kind); err != nil {
				return res, err
			}
		}
		if scales > 0 {
			for j, p := range []DevicePtr{ks, vs} {
				if err := fillBench(c, p, scales, uint32(4*i+j+9), 2); err != nil {
					return res, err
				}
			}
		}
	}
	perm := rng.Perm(pages)
	b := &model.Batch{}
	rows := 0
	for q := range s.batch {
		pt := make([]int32, pagesPerSeq)
		for i := range pt {
			pt[i] = int32(perm[q*pagesPerSeq+i])
		}
		b.Seqs = append(b.Seqs, model.SeqSpan{Offset: rows, Cached: total - s.newT, NewTokens: s.newT, Pages: pt})
		rows += s.newT
	}
	qb, err := c.Alloc(int64(rows*s.heads*s.dim*4*2), "bench q/out")
	if err != nil {
		return res, err
	}
	defer c.Free(qb)
	qp, op := qb.Ptr, qb.Ptr.Add(int64(rows*s.heads*s.dim*4))
	if err := fillBench(c, qp, int64(rows*s.heads*s.dim*4), 3, 3); err != nil {
		return res, err
	}
	scale := float32(1 / math.Sqrt(float64(s.dim)))
	calls := max(l.Layers, 20)
	us, err := timeGraph(c, calls, 15, func(i int) error {
		return kv.Attend(c, op, qp, rows, i%l.Layers, b, s.heads, scale)
	})
	if err != nil {
		return res, err
	}
	// Bytes a step must read: the codes and scales of every cached token.
	tokens := int64(s.batch) * int64(total)
	res.bytes = tokens * int64(s.kvh) * int64(s.dim*l.DType.ElemBytes()) * 2
	if l.HasTokenScales() {
		res.bytes += tokens * int64(s.kvh) * 8
	}
	var flops float64
	for i := range s.newT {
		flops += 4 * float64(s.heads*s.dim) * float64(total-s.newT+i+1)
	}
	res.us = us
	if kv.lastFA > 0 {
		res.faSplits, res.faWarps = kv.lastFAsp, kv.faWarps(c)
	}
	res.gbs = float64(res.bytes) / us / 1e3
	res.tflops = flops * float64(s.batch) / us / 1e6
	return res, nil
}

var benchShapes = []struct {
	name            string
	heads, kvh, dim int
}{{"Llama-3.1-8B", 32, 8, 128}, {"SmolLM2-135M", 9, 3, 64}}

// faBenchShapes are the prefill shapes of the FA comparison: Llama-3.1-8B,
// Qwen3-30B-A3B (32 q heads, 4 kv heads: groups of 8) and Qwen3.6's
// full-attention layers (16 q heads, 2 kv heads, head_dim 256).
var faBenchShapes = []struct {
	name            string
	heads, kvh, dim int
}{{"Llama-3.1-8B", 32, 8, 128}, {"Qwen3-30B-A3B", 32, 4, 128}, {"Qwen3.6", 16, 2, 256}}

func BenchmarkAttention(b *testing.B) {
	d := openTestDevice(b)
	var readBW float64
	if err := d.Do(func(c *Ctx) (err error) { readBW, err = readBandwidth(c); return }); err != nil {
		b.Fatal(err)
	}
	b.Logf("read bandwidth (stream_read, 4 GiB): %.0f GB/s", readBW)
	var results []benchResult
	run := func(s attnShape) {
		name := fmt.Sprintf("%s/%v/p%d/b%d/ctx%d/new%d/w%d", s.name, s.dtype, s.pageSize, s.batch, s.ctx, s.newT, s.waves)
		if s.prefill != PrefillDefault {
			name += "/" + s.prefill.String()
		}
		if s.faWarps != 0 {
			name += fmt.Sprintf("/warps%d", s.faWarps)
		}
		b.Run(name, func(b *testing.B) {
			var r benchResult
			if err := d.Do(func(c *Ctx) (err error) { r, err = benchAttention(c, s); return }); err != nil {
				b.Fatal(err)
			}
			r.readShare = r.gbs / readBW
			b.ReportMetric(r.us, "us/call")
			b.ReportMetric(r.gbs, "GB/s")
			b.ReportMetric(100*r.readShare, "%readBW")
			b.ReportMetric(r.tflops, "TFLOP/s")
			results = append(results, r)
		})
	}
	only := os.Getenv("FTCHAT_BENCH_ONLY") // e.g. "decode", "pages", "prefill"
	if only == "" || only == "decode" {
		for _, sh := range benchShapes {
			for _, batch := range []int{1, 16} {
				for _, ctx := range []int{1024, 4096, 8192, 32768, 131072} {
					for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
						run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: batch, ctx: ctx, newT: 1})
					}
				}
			}
		}
	}
	if only == "" || only == "pages" {
		for _, p := range []int{16, 32, 64, 128, 256} {
			for _, bc := range [][2]int{{1, 32768}, {16, 8192}} {
				for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
					sh := benchShapes[0]
					run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: p, dtype: dt, batch: bc[0], ctx: bc[1], newT: 1})
				}
			}
		}
	}
	if only == "key" { // the target configurations, for comparing kernel builds
		for _, sh := range benchShapes {
			for _, bc := range [][2]int{{1, 32768}, {1, 131072}, {16, 8192}, {16, 32768}} {
				for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
					run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: bc[0], ctx: bc[1], newT: 1})
				}
			}
		}
		for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
			sh := benchShapes[0]
			run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: 1, ctx: 2048, newT: 2048})
		}
	}
	if only == "variants" {
		for _, waves := range []int{2, 4} {
			for _, bc := range [][2]int{{1, 32768}, {16, 32768}} {
				for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
					sh := benchShapes[0]
					run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: bc[0], ctx: bc[1], newT: 1, waves: waves})
				}
			}
		}
	}
	if only == "" || only == "prefill" {
		for _, ctx := range []int{2048, 32768} {
			for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
				sh := benchShapes[0]
				run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: 1, ctx: ctx, newT: 2048})
			}
		}
	}
	if only == "" || only == "fa" {
		// FA prefill against the block kernel: 512 new tokens on top of
		// 0 / 4K / 32K cached, causal FLOPs (benchTable's last table).
		depths := []int{0, 4096, 32768}
		if v := os.Getenv("FTCHAT_FA_DEPTHS"); v != "" { // e.g. 0,4096,32768,130560
			depths = depths[:0]
			for _, f := range strings.Split(v, ",") {
				d, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || d < 0 {
					b.Fatalf("FTCHAT_FA_DEPTHS: %q is not a depth", f)
				}
				depths = append(depths, d)
			}
		}
		// FTCHAT_FA_LEAN=1: attn_fa as the engine launches it, nothing else
		// (kernel variants priced side by side).
		lean := os.Getenv("FTCHAT_FA_LEAN") != ""
		for _, sh := range faBenchShapes {
			for _, depth := range depths {
				for _, dt := range []kvcache.DType{kvcache.BF16, kvcache.FP8E4M3} {
					if lean {
						run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: 1, ctx: depth + 512, newT: 512, prefill: PrefillFA})
						continue
					}
					for _, k := range []PrefillKernel{PrefillBlocks, PrefillFA} {
						if k == PrefillBlocks && depth > 32768 {
							continue // 3x FA's time or more from 4K on; minutes at 128K
						}
						run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: 1, ctx: depth + 512, newT: 512, prefill: k})
					}
					// CTAs of 4 warps (64 query rows) instead of the default 8
					run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: 1, ctx: depth + 512, newT: 512, prefill: PrefillFA, faWarps: 4})
					if depth > 0 { // FA key splitting sized for 1 and 4 waves instead of faWaves
						for _, w := range []int{1, 4} {
							run(attnShape{name: sh.name, heads: sh.heads, kvh: sh.kvh, dim: sh.dim, pageSize: kvcache.DefaultPageSize, dtype: dt, batch: 1, ctx: depth + 512, newT: 512, prefill: PrefillFA, waves: w})
						}
					}
				}
			}
		}
	}
	md := benchTable(results, readBW)
	fmt.Print(md)
	if p := os.Getenv("FTCHAT_BENCH_MD"); p != "" {
		if err := os.WriteFile(p, []byte(md), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// benchTable renders the results as markdown, with the fp8/bf16 time ratio
// of matching decode configurations.
func benchTable(rs []benchResult, readBW float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nread bandwidth (stream_read over 4 GiB): %.0f GB/s\n\n", readBW)
	sb.WriteString("| shape | KV dtype | page | batch | context | new tokens | variant | time (µs) | KV read (GB/s) | % of read BW | fp8/bf16 time | TFLOP/s |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	key := func(s attnShape) string {
		return fmt.Sprintf("%s/%d/%d/%d/%d/%d/%d", s.name, s.pageSize, s.batch, s.ctx, s.newT, s.waves, s.prefill)
	}
	bf := map[string]float64{}
	for _, r := range rs {
		if r.shape.dtype == kvcache.BF16 {
			bf[key(r.shape)] = r.us
		}
	}
	for _, r := range rs {
		ratio := ""
		if r.shape.dtype != kvcache.BF16 {
			if t, ok := bf[key(r.shape)]; ok {
				ratio = fmt.Sprintf("%.2f", r.us/t)
			}
		}
		s := r.shape
		variant := "default"
		if s.waves != 0 {
			variant = fmt.Sprintf("waves=%d", s.waves)
		}
		if s.prefill != PrefillDefault {
			variant = "prefill=" + s.prefill.String()
			if s.waves != 0 {
				variant += fmt.Sprintf(",waves=%d", s.waves)
			}
			if s.faWarps != 0 {
				variant += fmt.Sprintf(",warps=%d", s.faWarps)
			}
			if r.faSplits > 0 {
				variant += fmt.Sprintf(",splits=%d", r.faSplits)
			}
		}
		fmt.Fprintf(&sb, "| %s (%d/%d/%d) | %v | %d | %d | %d | %d | %s | %.1f | %.0f | %.0f%% | %s | %.1f |\n",
			s.name, s.heads, s.kvh, s.dim, s.dtype, s.pageSize, s.batch, s.ctx, s.newT, variant, r.us, r.gbs, 100*r.readShare, ratio, r.tflops)
	}
	sb.WriteString(faTable(rs))
	return sb.String()
}

// faTable puts each FA prefill run beside the block kernel's on the same
// configuration: TFLOP/s (causal FLOPs) and the speed-up.
func faTable(rs []benchResult) string {
	base := func(s attnShape) attnShape {
		s.prefill, s.waves, s.faWarps = PrefillBlocks, 0, 0
		return s
	}
	old := map[attnShape]benchResult{}
	for _, r := range rs {
		if r.shape.prefill == PrefillBlocks && r.shape.waves == 0 {
			old[base(r.shape)] = r
		}
	}
	var sb strings.Builder
	for _, r := range rs {
		o, ok := old[base(r.shape)]
		if r.shape.prefill != PrefillFA || !ok {
			continue
		}
		if sb.Len() == 0 {
			sb.WriteString("\n| prefill shape | KV dtype | cached | new tokens | fa variant | old (µs) | old TFLOP/s | fa (µs) | fa TFLOP/s | fa speed-up |\n")
			sb.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		}
		s := r.shape
		variant := fmt.Sprintf("warps=%d,splits=%d", r.faWarps, r.faSplits)
		if s.waves != 0 {
			variant += fmt.Sprintf(",waves=%d", s.waves)
		}
		fmt.Fprintf(&sb, "| %s (%d/%d/%d) | %v | %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.2fx |\n",
			s.name, s.heads, s.kvh, s.dim, s.dtype, s.ctx-s.newT, s.newT, variant, o.us, o.tflops, r.us, r.tflops, o.us/r.us)
	}
	return sb.String()
}
