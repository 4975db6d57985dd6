//go:build unix

package engine

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBatcherThroughput measures aggregate decode throughput of
// greedy requests decoded together (conc=N) against the same N requests
// one at a time (seq=N). tok/s is generated tokens over wall time, prompts
// included (they are short); step-tok/s is the batcher's own rate over
// the time of its decode steps; tok/cpu-s is tokens per second of the
// process's CPU time, which a busy shared machine disturbs less than wall
// time.
//
//	go test -run '^$' -bench BatcherThroughput -benchtime 3x ./engine/
func BenchmarkBatcherThroughput(b *testing.B) {
	e := load(b, Options{})
	bt := e.NewBatcher(BatcherOptions{PrefixCache: -1})
	defer bt.Close()
	topics := []string{"a dragon", "a robot", "the sea", "a city", "a forest", "a ship", "a cat", "a mountain"}
	const maxTokens = 64
	run := func(b *testing.B, n int, together bool) {
		var tokens int
		var wall time.Duration
		cpu0 := cpuTime()
		for range b.N {
			start := time.Now()
			var wg sync.WaitGroup
			counts := make([]int, n)
			for i := range n {
				req := userReq(maxTokens, "Write a long story about "+topics[i%len(topics)]+".")
				one := func() {
					ch, err := bt.Submit(context.Background(), BatchRequest{Request: req})
					if err != nil {
						b.Error(err)
						return
					}
					counts[i] = drain(b, ch).done.Usage.CompletionTokens
				}
				if together {
					wg.Add(1)
					go func() { defer wg.Done(); one() }()
				} else {
					one()
				}
			}
			wg.Wait()
			wall += time.Since(start)
			for _, c := range counts {
				tokens += c
			}
		}
		b.ReportMetric(float64(tokens)/wall.Seconds(), "tok/s")
		b.ReportMetric(float64(tokens)/(cpuTime()-cpu0).Seconds(), "tok/cpu-s")
		b.ReportMetric(bt.Stats().DecodeTokensPerS, "step-tok/s")
		b.ReportMetric(0, "ns/op")
	}
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("conc=%d", n), func(b *testing.B) { run(b, n, true) })
		if n > 1 {
			b.Run(fmt.Sprintf("seq=%d", n), func(b *testing.B) { run(b, n, false) })
		}
	}
}
