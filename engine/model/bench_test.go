package model_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// BenchmarkDecode measures single-sequence decode on SmolLM2-135M Q4_1
// (CPU, 1 thread and all cores, fp16 KV) after a 32-token prompt; reports tokens/s.
func BenchmarkDecode(b *testing.B) {
	for _, th := range benchThreads() {
		b.Run(fmt.Sprintf("threads=%d", th), func(b *testing.B) { benchDecode(b, th) })
	}
}

func benchThreads() []int {
	if n := runtime.GOMAXPROCS(0); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

func benchDecode(b *testing.B, threads int) {
	m, _ := loadModel(b, smolPath(b), threads, false)
	const ctx = 512
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(100 + 37*i)
	}
	s := newSession(b, m, ctx, kvcache.F16)
	s.feed(b, prompt, []int{len(prompt) - 1})
	tok := int32(42)
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if s.cached >= ctx {
			b.StopTimer()
			s.cached = 0
			s.feed(b, prompt, nil)
			b.StartTimer()
		}
		lg := s.feed(b, []int32{tok}, []int{0})
		tok = argmax(lg)
	}
	reportCPU(b, b.N, cpuTime()-c0)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefill measures a 128-token prompt in one batch (logits for the
// last row only); reports prompt tokens/s.
func BenchmarkPrefill(b *testing.B) {
	for _, th := range benchThreads() {
		b.Run(fmt.Sprintf("threads=%d", th), func(b *testing.B) { benchPrefill(b, th) })
	}
}

func benchPrefill(b *testing.B, threads int) {
	m, _ := loadModel(b, smolPath(b), threads, false)
	const n = 128
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(100 + 37*i)
	}
	s := newSession(b, m, n, kvcache.F16)
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		s.cached = 0
		s.feed(b, prompt, []int{n - 1})
	}
	reportCPU(b, b.N*n, cpuTime()-c0)
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tok/s")
}

// reportCPU adds tokens per CPU-second (all threads' CPU time; includes
// time spent while the timer was stopped, which the decode benchmark keeps
// rare).
func reportCPU(b *testing.B, tokens int, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(tokens)/cpu.Seconds(), "tok/cpu-s")
	}
}
