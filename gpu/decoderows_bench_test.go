package gpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/model"
)

// BenchmarkMatMulDecodeRows times the weight matmuls of one Llama-3.1-8B
// decode step (Q4_K: q, k, v, o, gate, up, down per layer times 32, and
// the 128,256-row output head) at the row counts a batched step carries,
// to tell whether a step of 16 rows is bound by its GEMMs (issue 14: the
// serve load test's 16-row steps took ~7x one row's time). Each row count
// runs with the backend's kernel choice ("default": the Q4_K GEMM from
// registers, gemmq.go, one matmul a weight), with q, k, v and gate, up each
// as one MatMulShared ("group": one gemmqg launch, as the model issues
// them) and with gemmq off ("noq": 1 row the whole-x GEMV, 2..8 rows the
// multi-token GEMV, 9..32 the split-K tile GEMM; shapes whose tiles fill
// the device, like the head, stay unsplit); from 9 rows also the unsplit
// 64x64 tile GEMM ("tile") and the skinny GEMM ("skinny", gemmt.go), at
// 2..8 rows the split-K GEMM ("gemm", GEMMMinTokens 1). Metrics: step_ms (32 layers + head, device time),
// tok/s (rows / step_ms: the ceiling the matmuls leave for a decode step of
// that many rows) and the per-shape µs.
//
//	go test ./gpu/ -run '^$' -bench MatMulDecodeRows -benchtime 20x
//
// FTCHAT_ROWS_SHAPES=down (comma-separated names) times only those shapes;
// step_ms then covers them alone. FTCHAT_GEMM_SPLIT_CTAS=N sets the split-K
// grid (CTAs per SM), FTCHAT_GEMMQ_CTAS=N gemmq's; FTCHAT_ROWS_MODES=default,noq
// runs only those modes; FTCHAT_ROWS_TYPE=Q6_K times another weight type;
// FTCHAT_GEMVQ=0 gives one Q4_K row to gemmq instead of gemvq (gemvq.go),
// FTCHAT_GEMVQ_ROWS=N gives each gemvq warp N rows, FTCHAT_GEMVQ_Q6K=0 one
// Q6_K row to gemmq instead of gemvq.
func BenchmarkMatMulDecodeRows(b *testing.B) {
	g := newTestBackendB(b)
	if v, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMM_SPLIT_CTAS")); v > 0 { // split-K grid sweeps
		setOpts(b, g, func(o *BackendOptions) { o.SplitKCTAsPerSM = v })
		defer setOpts(b, g, func(o *BackendOptions) { o.SplitKCTAsPerSM = 0 })
	}
	if v, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMMQ_CTAS")); v > 0 {
		setOpts(b, g, func(o *BackendOptions) { o.GEMMQCTAsPerSM = v })
		defer setOpts(b, g, func(o *BackendOptions) { o.GEMMQCTAsPerSM = 0 })
	}
	if os.Getenv("FTCHAT_GEMVQ") == "0" { // one row of Q4_K on gemmq, not gemvq
		setGemvq(b, g, false)
		defer setGemvq(b, g, true)
	}
	if os.Getenv("FTCHAT_GEMVQ_Q6K") == "0" { // one Q6_K row on gemmq, not gemvq
		setOpts(b, g, func(o *BackendOptions) { o.NoGEMVQQ6K = true })
		defer setOpts(b, g, func(o *BackendOptions) { o.NoGEMVQQ6K = false })
	}
	if v, _ := strconv.Atoi(os.Getenv("FTCHAT_GEMVQ_ROWS")); v > 0 {
		setOpts(b, g, func(o *BackendOptions) { o.GEMVQRowsPerWarp = v })
		defer setOpts(b, g, func(o *BackendOptions) { o.GEMVQRowsPerWarp = 0 })
	}
	onlyModes := os.Getenv("FTCHAT_ROWS_MODES")
	r := rand.New(rand.NewPCG(14, 16))
	shapes := []struct {
		name     string
		out, in  int
		perLayer int // times per layer; 0: once per step (the head)
	}{
		{name: "q", out: 4096, in: 4096, perLayer: 1},
		{name: "k,v", out: 1024, in: 4096, perLayer: 2},
		{name: "o", out: 4096, in: 4096, perLayer: 1},
		{name: "gate,up", out: 14336, in: 4096, perLayer: 2},
		{name: "down", out: 4096, in: 14336, perLayer: 1},
		{name: "head", out: 128256, in: 4096},
	}
	const layers = 32
	type loaded struct {
		w        model.Weight
		out, in  int
		perLayer int
		name     string
	}
	var ws []loaded
	only := os.Getenv("FTCHAT_ROWS_SHAPES") // e.g. "down": the shapes to time (profiler runs)
	wtype := gguf.Q4_K
	if v := os.Getenv("FTCHAT_ROWS_TYPE"); v != "" { // e.g. Q6_K
		t, err := gguf.ParseType(v)
		if err != nil {
			b.Fatal(err)
		}
		wtype = t
	}
	for _, sh := range shapes {
		if only != "" && !slices.Contains(strings.Split(only, ","), sh.name) {
			continue
		}
		raw := randWeight(r, wtype, sh.out, sh.in)
		w, err := g.LoadWeight(gguf.TensorInfo{Name: "bench " + sh.name, Dims: []uint64{uint64(sh.in), uint64(sh.out)}, Type: wtype}, raw)
		if err != nil {
			b.Fatal(err)
		}
		defer g.FreeWeight(w)
		ws = append(ws, loaded{w, sh.out, sh.in, sh.perLayer, sh.name})
	}
	defaultMin := g.opts.GEMMMinTokens
	defer func() { g.opts.GEMMMinTokens = defaultMin }()
	for _, n := range []int{1, 2, 4, 8, 9, 12, 16, 24, 32} {
		modes := []string{"default", "group", "noq"}
		if n >= defaultMin {
			modes = append(modes, "tile", "gemv", "skinny")
		} else if n > 1 {
			modes = append(modes, "gemm") // the split-K GEMM below its crossover
		}
		for _, mode := range modes {
			if onlyModes != "" && !slices.Contains(strings.Split(onlyModes, ","), mode) {
				continue
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, mode), func(b *testing.B) {
				g.opts.GEMMMinTokens = defaultMin
				switch mode {
				case "gemv":
					g.opts.GEMMMinTokens = 1 << 30
				case "gemm":
					g.opts.GEMMMinTokens = 1
				}
				defer func() { g.opts.GEMMMinTokens = defaultMin }()
				setSplitK(b, g, mode != "tile")
				defer setSplitK(b, g, true)
				setSkinny(b, g, mode == "skinny")
				defer setSkinny(b, g, false)
				grouped := mode == "group"
				setGemmq(b, g, mode == "default" || grouped)
				defer setGemmq(b, g, true)
				stepMS := 0.0
				byName := map[string]loaded{}
				for _, l := range ws {
					byName[l.name] = l
				}
				for _, l := range ws {
					if grouped && (l.name == "q" || l.name == "gate,up") {
						// one x times q, k, v (k and v: the k,v weight
						// twice) or gate, up (the gate,up weight twice)
						group := []loaded{l, l}
						if l.name == "q" {
							kv, ok := byName["k,v"]
							if !ok {
								b.Fatal("group: FTCHAT_ROWS_SHAPES must keep k,v beside q")
							}
							group = []loaded{l, kv, kv}
						}
						x := g.NewTensor(n, l.in)
						g.FromHost(x, randVec(r, n*l.in, 1))
						gw := make([]model.Weight, len(group))
						ys := make([]model.Tensor, len(group))
						for i, m := range group {
							gw[i], ys[i] = m.w, g.NewTensor(n, m.out)
						}
						ms := timeOps(b, g, max(b.N, 20), func() { g.MatMulShared(ys, x, gw) })
						g.FreeTensor(x)
						for _, y := range ys {
							g.FreeTensor(y)
						}
						stepMS += ms * layers
						name := "q,k,v"
						if l.name != "q" {
							name = "gate+up"
						}
						b.ReportMetric(ms*1e3, name+"_us")
						continue
					}
					if grouped && l.name == "k,v" {
						continue // inside q's group
					}
					x := g.NewTensor(n, l.in)
					g.FromHost(x, randVec(r, n*l.in, 1))
					y := g.NewTensor(n, l.out)
					w := l.w
					ms := timeOps(b, g, max(b.N, 20), func() { g.MatMul(y, x, w) })
					g.FreeTensor(x)
					g.FreeTensor(y)
					times := float64(l.perLayer * layers)
					if l.perLayer == 0 {
						times = 1
					}
					stepMS += ms * times
					b.ReportMetric(ms*1e3, l.name+"_us")
				}
				b.ReportMetric(stepMS, "step_ms")
				b.ReportMetric(float64(n)/(stepMS*1e-3), "tok/s")
			})
		}
	}
}
