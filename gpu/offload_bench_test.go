package gpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// BenchmarkHostExperts times one MoE call at the Qwen3.6-35B-A3B expert
// shape (256 experts of 2048x512, top-8, Q4_K: 453 MB per block) for n
// rows, with the experts on the device, read in place over PCIe by the
// device kernels (mapped), streamed from host RAM, on the host CPU (the
// phased path, cpu-intdot: the same on the integer-dot kernels, and
// cpu-ref: the CPU backend's own MoE; rows 1 and 8 only, being slow), and
// split between mapped device GEMVs and the host CPU (split, split-intdot,
// up to 8 rows: the default CPU share of the slots; at 1 row also
// split-c<N>, split-intdot-c<N>: N of the 8 slots on the CPU, and
// split-late: the device's slots packed and queued after the host wait,
// as for more rows, not before it). Three host blocks are cycled so every streamed call
// copies its block (the next one's copy overlapping the call, as in a
// prefill) and no mapped call finds its experts in L2; the device case is
// the same block every call. The mapped case reports GB/s: the bytes of
// the distinct experts the rows select (routing recomputed on the host)
// over the call's time. h2d-pinned and h2d-registered are the plain
// copy-engine bandwidth (256 MiB from pinned memory; one registered expert
// tensor), the ceiling for both streaming and mapped reads.
func BenchmarkHostExperts(b *testing.B) {
	d := openTestDevice(b)
	const E, dim, ff, K, blocks = 256, 2048, 512, 8, 3
	r := rand.New(rand.NewPCG(7, 8))
	tc := moeCase{gguf.Q4_K, gguf.Q4_K}
	base := newHostMoE(r, 0, tc, E, dim, ff)
	g, err := NewBackend(d, BackendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if err := g.SetPlacement(Placement{HostExperts: []bool{true, true, true}, Run: HostMapped}); err != nil {
		b.Fatal(err)
	}
	var ms [blocks]*model.MoE
	for l := range blocks {
		hm := base
		for i := range hm.infos { // own copies: one registration per block
			hm.infos[i].Name = fmt.Sprintf("blk.%d.%s", l, hm.infos[i].Name[len("blk.0."):])
			hm.raws[i] = append([]byte(nil), base.raws[i]...)
		}
		ms[l] = hm.load(b, g, K)
	}
	dev, err := NewBackend(d, BackendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	devm := base.load(b, dev, K)
	st := g.OffloadStats()
	b.Logf("host experts: %d blocks, %d bytes, pinned %v (%d bytes) %s", st.HostLayers, st.HostBytes, st.Pinned, st.PinnedBytes, st.PinError)
	expertBytes := int64(len(base.raws[1])+len(base.raws[2])+len(base.raws[3])) / E
	router := unsafe.Slice((*float32)(unsafe.Pointer(&base.raws[0][0])), E*dim)
	for _, n := range []int{1, 2, 4, 8, 32, 512} {
		x := randVec(r, n*dim, 1)
		selected := distinctExperts(router, x, E, dim, K)
		modes := []string{"device", "mapped", "stream"}
		if n == 1 || n == 8 {
			modes = append(modes, "cpu", "cpu-intdot", "cpu-ref")
		}
		if n <= 8 {
			modes = append(modes, "split", "split-intdot")
		}
		if n == 1 {
			modes = append(modes, "split-late")
			for c := 1; c <= 4; c++ {
				modes = append(modes, fmt.Sprintf("split-c%d", c), fmt.Sprintf("split-intdot-c%d", c))
			}
		}
		for _, mode := range modes {
			b.Run(fmt.Sprintf("%s/rows=%d", mode, n), func(b *testing.B) {
				be, m := g, ms[:]
				g.host.place.CPUIntDot = strings.Contains(mode, "-intdot")
				g.host.place.SplitCPU = 0
				defer func() { g.host.place.CPUIntDot, g.host.place.SplitCPU = false, 0 }()
				switch base, _, _ := strings.Cut(mode, "-"); base {
				case "device":
					be, m = dev, []*model.MoE{devm}
				case "mapped":
					g.host.place.Run = HostMapped
				case "cpu":
					g.host.place.Run = HostCPU
					hostMoEReference = mode == "cpu-ref"
					defer func() { hostMoEReference = false }()
				case "stream":
					g.host.place.Run = HostStream
				case "split":
					g.host.place.Run = HostSplit
					splitEarly = mode != "split-late"
					defer func() { splitEarly = true }()
					if i := strings.LastIndex(mode, "-c"); i >= 0 {
						c, err := strconv.Atoi(mode[i+2:])
						if err != nil {
							b.Fatal(err)
						}
						g.host.place.SplitCPU = c
					}
				}
				gx, gy := be.NewTensor(n, dim), be.NewTensor(n, dim)
				defer be.FreeTensor(gx)
				defer be.FreeTensor(gy)
				be.FromHost(gx, x)
				be.MoE(gy, gx, m[0]) // warm up (module loads, staging)
				if err := be.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					be.MoE(gy, gx, m[i%len(m)])
				}
				if err := be.Synchronize(); err != nil {
					b.Fatal(err)
				}
				us := float64(b.Elapsed().Nanoseconds()) / 1e3 / float64(b.N)
				b.ReportMetric(us, "µs/call")
				if mode == "mapped" || strings.HasPrefix(mode, "cpu") {
					b.ReportMetric(float64(int64(selected)*expertBytes)/us/1e3, "GB/s")
					b.ReportMetric(float64(selected), "experts")
				}
			})
		}
	}
	const copyBytes = 256 << 20
	gate := ms[0].Gate.(*hostWeight)
	for _, src := range []string{"pinned", "registered"} {
		b.Run("h2d-"+src, func(b *testing.B) {
			n := int64(copyBytes)
			if src == "registered" {
				n = gate.bytes()
			}
			if err := g.dev.Do(func(c *Ctx) error {
				dst, err := c.Alloc(n, "h2d benchmark")
				if err != nil {
					return err
				}
				defer c.Free(dst)
				from := unsafe.Pointer(&gate.raw[0])
				if src == "pinned" {
					hb, err := c.HostAlloc(n)
					if err != nil {
						return err
					}
					defer c.FreeHost(hb)
					from = hb.p
				}
				if err := c.CopyToDeviceAsync(dst.Ptr, from, n); err != nil {
					return err
				}
				if err := c.Sync(); err != nil {
					return err
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := c.CopyToDeviceAsync(dst.Ptr, from, n); err != nil {
						return err
					}
				}
				return c.Sync()
			}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "GB/s")
		})
	}
	st = g.OffloadStats()
	b.Logf("stats %+v", st)
}

// distinctExperts is how many experts the rows of x select (top-k of the
// float32 router, recomputed on the host).
func distinctExperts(router, x []float32, E, dim, K int) int {
	seen := make([]bool, E)
	logits := make([]float64, E)
	idx := make([]int, E)
	for row := 0; row < len(x)/dim; row++ {
		xr := x[row*dim : (row+1)*dim]
		for e := range E {
			var sum float64
			for k, w := range router[e*dim : (e+1)*dim] {
				sum += float64(w) * float64(xr[k])
			}
			logits[e], idx[e] = sum, e
		}
		sort.Slice(idx, func(a, b int) bool { return logits[idx[a]] > logits[idx[b]] })
		for _, e := range idx[:K] {
			seen[e] = true
		}
	}
	n := 0
	for _, s := range seen {
		if s {
			n++
		}
	}
	return n
}

// BenchmarkHostMoECPU times the CPU path's MoE (hostMoE) against the CPU
// backend's MoE over the same Qwen3.6-35B-A3B-shaped Q4_K block (no GPU
// needed), on all host cores, on the float kernels (phases, reference)
// and the integer-dot ones (phases-intdot, reference-intdot: a CPU
// backend with IntDot). On one core phases and reference take the same
// time (the same dots); the phases are for many cores (fewer, larger
// parallel loops). The GB/s metric is the bytes of the distinct experts
// the rows select over the call's time (for 1 row: 8 experts, 14.2 MB),
// the rate the split path's default is derived from (offload_split.go).
func BenchmarkHostMoECPU(b *testing.B) {
	const E, dim, ff, K = 256, 2048, 512, 8
	r := rand.New(rand.NewPCG(9, 10))
	hm := newHostMoE(r, 0, moeCase{gguf.Q4_K, gguf.Q4_K}, E, dim, ff)
	h := &hostExperts{cpu: cpu.New(cpu.Options{Threads: runtime.NumCPU()})}
	defer h.cpu.Close()
	refInt := cpu.New(cpu.Options{Threads: runtime.NumCPU(), IntDot: true})
	defer refInt.Close()
	expertBytes := int64(len(hm.raws[1])+len(hm.raws[2])+len(hm.raws[3])) / E
	router := unsafe.Slice((*float32)(unsafe.Pointer(&hm.raws[0][0])), E*dim)
	l := &hostLayer{}
	var ws [4]model.Weight
	for i := range 4 {
		w, err := h.cpu.LoadWeight(hm.infos[i], hm.raws[i])
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
		if i == 0 {
			l.router = w
			continue
		}
		info := hm.infos[i]
		rows := int(info.Elements() / info.Dims[0])
		hw := &hostWeight{info: info, raw: hm.raws[i], rows: rows, cols: int(info.Dims[0]), rowBytes: int64(len(hm.raws[i]) / rows), cpu: w, host: h}
		*[]**hostWeight{&l.gate, &l.up, &l.down}[i-1] = hw
	}
	m := &model.MoE{Router: ws[0], Gate: ws[1], Up: ws[2], Down: ws[3], Experts: E, TopK: K, NormTopK: true}
	for _, n := range []int{1, 8, 64} {
		xv := randVec(r, n*dim, 1)
		x := h.cpu.NewTensor(n, dim).(*cpu.Tensor)
		copy(x.Data, xv)
		y := h.cpu.NewTensor(n, dim).(*cpu.Tensor)
		selected := int64(distinctExperts(router, xv, E, dim, K))
		rate := func(b *testing.B) {
			us := float64(b.Elapsed().Nanoseconds()) / 1e3 / float64(b.N)
			b.ReportMetric(us, "µs/call")
			b.ReportMetric(float64(selected*expertBytes)/us/1e3, "GB/s")
		}
		for _, intDot := range []bool{false, true} {
			suffix, ref := "", h.cpu
			if intDot {
				suffix, ref = "-intdot", refInt
			}
			b.Run(fmt.Sprintf("phases%s/rows=%d", suffix, n), func(b *testing.B) {
				h.place.CPUIntDot = intDot
				h.workers() // started outside the timing
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := h.hostMoE(y, x, l, m); err != nil {
						b.Fatal(err)
					}
				}
				rate(b)
			})
			b.Run(fmt.Sprintf("reference%s/rows=%d", suffix, n), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					ref.MoE(y, x, m)
				}
				rate(b)
			})
		}
	}
	if h.pool != nil {
		h.pool.close()
	}
}
