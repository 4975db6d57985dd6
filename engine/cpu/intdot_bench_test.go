//go:build unix

package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// BenchmarkIntDotGEMV: one activation row times a weight (rows×cols, the
// MoE expert and a dense decode shape), float path vs integer path, one
// thread and all; reports weight bytes read per second of wall time and,
// for a machine shared with other work, the process CPU time per op
// (cpu-ns/op) and weight bytes per CPU second (cpu-MB/s).
func BenchmarkIntDotGEMV(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K, gguf.Q4_1, gguf.Q8_0} {
		for _, sh := range [][2]int{{512, 2048}, {2048, 512}, {4096, 4096}} {
			rows, cols := sh[0], sh[1]
			raw, err := gguf.Quantize(typ, randVec(r, rows*cols, 1))
			if err != nil {
				b.Fatal(err)
			}
			xv := randVec(r, cols, 1)
			for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
				for _, intDot := range []bool{false, true} {
					path := "float"
					if intDot {
						path = "int"
					}
					b.Run(fmt.Sprintf("%s/%dx%d/threads=%d/%s", typ, rows, cols, threads, path), func(b *testing.B) {
						be := New(Options{Threads: threads, IntDot: intDot})
						defer be.Close()
						w, err := be.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{uint64(cols), uint64(rows)}, Type: typ}, raw)
						if err != nil {
							b.Fatal(err)
						}
						x := tensorOf(be, 1, cols, xv)
						dst := be.NewTensor(1, rows)
						b.SetBytes(int64(len(raw)))
						b.ResetTimer()
						c0 := cpuTime()
						for range b.N {
							be.MatMul(dst, x, w)
						}
						cpu := cpuTime() - c0
						b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
						b.ReportMetric(float64(len(raw))*float64(b.N)/float64(cpu)*1e3, "cpu-MB/s")
					})
				}
			}
		}
	}
}

// cpuTime is the process's user+system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
