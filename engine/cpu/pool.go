package cpu

import (
	"sync"
	"sync/atomic"
)

// pool runs parallel loops on a fixed number of worker goroutines, so an op
// costs a few channel sends rather than goroutine creations (a decode step
// issues hundreds of small ops).
type pool struct {
	threads int
	work    chan *job
}

type job struct {
	n, grain int
	next     atomic.Int64
	fn       func(lo, hi int)
	wg       sync.WaitGroup
}

func newPool(threads int) *pool {
	p := &pool{threads: threads, work: make(chan *job, threads)}
	for i := 1; i < threads; i++ {
		go func() {
			for j := range p.work {
				j.run()
				j.wg.Done()
			}
		}()
	}
	return p
}

func (j *job) run() {
	for {
		lo := int(j.next.Add(int64(j.grain))) - j.grain
		if lo >= j.n {
			return
		}
		j.fn(lo, min(lo+j.grain, j.n))
	}
}

// parallel calls fn over [0, n) split into chunks of at least grain items,
// on up to p.threads goroutines (the caller is one of them), and returns
// when all are done.
func (p *pool) parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	helpers := min(p.threads-1, (n+grain-1)/grain-1)
	if helpers <= 0 {
		fn(0, n)
		return
	}
	// Chunks of about n/(4*threads) balance load without much contention.
	grain = max(grain, n/(4*p.threads))
	j := &job{n: n, grain: grain, fn: fn}
	j.wg.Add(helpers)
	for range helpers {
		p.work <- j
	}
	j.run()
	j.wg.Wait()
}

func (p *pool) close() { close(p.work) }
