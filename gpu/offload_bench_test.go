package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
