package gpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// BenchmarkHostExperts times one MoE call at the Qwen3.6-35B-A3B expert
// shape (256 experts of 2048x512, top-8, Q4_K: 453 MB per block) for n
// rows, with the experts on the device, on the host CPU, and streamed
// from host RAM. Three host blocks are cycled so every streamed call
// copies its block (the next one's copy overlapping the call, as in a
// prefill); the device case is the same block every call. The CPU/stream
// crossover is the default StreamMinRows.
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
	if err := g.SetPlacement(Placement{HostExperts: []bool{true, true, true}, Run: HostCPU}); err != nil {
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
	for _, n := range []int{1, 8, 32, 64, 128, 512} {
		x := randVec(r, n*dim, 1)
		for _, mode := range []string{"device", "cpu", "stream"} {
			b.Run(fmt.Sprintf("%s/rows=%d", mode, n), func(b *testing.B) {
				be, m := g, ms[:]
				switch mode {
				case "device":
					be, m = dev, []*model.MoE{devm}
				case "cpu":
					g.host.place.Run = HostCPU
				case "stream":
					g.host.place.Run = HostStream
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
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
			})
		}
	}
	st = g.OffloadStats()
	b.Logf("stats %+v", st)
}

// BenchmarkHostMoECPU times the CPU path's MoE (hostMoE) against the CPU
// backend's MoE over the same Qwen3.6-35B-A3B-shaped Q4_K block (no GPU
// needed), on all host cores. On one core both take the same time (the
// same dots); the phases are for many cores (fewer, larger parallel
// loops).
func BenchmarkHostMoECPU(b *testing.B) {
	const E, dim, ff, K = 256, 2048, 512, 8
	r := rand.New(rand.NewPCG(9, 10))
	hm := newHostMoE(r, 0, moeCase{gguf.Q4_K, gguf.Q4_K}, E, dim, ff)
	h := &hostExperts{cpu: cpu.New(cpu.Options{Threads: runtime.NumCPU()}), pool: newHostPool(runtime.NumCPU())}
	defer h.cpu.Close()
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
		x := h.cpu.NewTensor(n, dim).(*cpu.Tensor)
		copy(x.Data, randVec(r, n*dim, 1))
		y := h.cpu.NewTensor(n, dim).(*cpu.Tensor)
		b.Run(fmt.Sprintf("phases/rows=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := h.hostMoE(y, x, l, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("reference/rows=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.cpu.MoE(y, x, m)
			}
		})
	}
	if h.pool != nil {
		h.pool.close()
	}
}
