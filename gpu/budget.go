package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// ErrBudget is wrapped by every allocation refused because it would exceed
// the memory budget (--gpu-memory).
var ErrBudget = errors.New("GPU memory budget exceeded")

// budget accounts device bytes against a limit. It is separate from the
// driver so the policy is testable without a GPU.
type budget struct {
	mu    sync.Mutex
	limit int64 // 0: no limit of our own (the driver still refuses when full)
	used  int64
	peak  int64
}

func (b *budget) reserve(n int64, what string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n < 0 {
		return fmt.Errorf("gpu: negative allocation (%d bytes) for %s", n, what)
	}
	if b.limit > 0 && b.used+n > b.limit {
		return fmt.Errorf("%w: %s needs %s, %s already in use of a %s budget (raise --gpu-memory or shorten the context)",
			ErrBudget, what, kvcache.FormatBytes(n), kvcache.FormatBytes(b.used), kvcache.FormatBytes(b.limit))
	}
	b.used += n
	if b.used > b.peak {
		b.peak = b.used
	}
	return nil
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// MemStats is the allocator's view of device memory.
type MemStats struct {
	Budget int64 // the limit all allocations count against
	Used   int64 // bytes currently allocated through the allocator
	Peak   int64
}

func (b *budget) stats() MemStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return MemStats{Budget: b.limit, Used: b.used, Peak: b.peak}
}

// MemoryPlan splits a device budget into weights, workspace and KV pool.
type MemoryPlan struct {
	Budget    int64
	Weights   int64
	Workspace int64 // activations and scratch for the largest prefill chunk
	Reserve   int64 // kept free for the driver, modules and small buffers
	PageBytes int64 // bytes of one KV page across all layers, K and V, scales included
	Pages     int   // whole pages the pool gets
	Pool      int64 // Pages * PageBytes
}

// PlanMemory gives the KV pool whatever the budget leaves after weights,
// workspace and reserve, rounded down to whole pages. It fails, naming the
// shortfall, when not even one page fits.
func PlanMemory(budget, weights, workspace, reserve, pageBytes int64) (MemoryPlan, error) {
	p := MemoryPlan{Budget: budget, Weights: weights, Workspace: workspace, Reserve: reserve, PageBytes: pageBytes}
	if budget <= 0 || pageBytes <= 0 || weights < 0 || workspace < 0 || reserve < 0 {
		return p, fmt.Errorf("gpu: invalid memory plan (budget %d, weights %d, workspace %d, reserve %d, page %d bytes)",
			budget, weights, workspace, reserve, pageBytes)
	}
	left := budget - weights - workspace - reserve
	if left < pageBytes {
		return p, fmt.Errorf("%w: weights %s + workspace %s + reserve %s leave %s of the %s budget, less than one KV page (%s); raise --gpu-memory, use a smaller model or a smaller prefill chunk",
			ErrBudget, kvcache.FormatBytes(weights), kvcache.FormatBytes(workspace), kvcache.FormatBytes(reserve),
			kvcache.FormatBytes(max(left, 0)), kvcache.FormatBytes(budget), kvcache.FormatBytes(pageBytes))
	}
	p.Pages = int(left / pageBytes)
	p.Pool = int64(p.Pages) * pageBytes
	return p, nil
}
