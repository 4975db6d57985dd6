package hfmodel

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
)

// TestParallelChunks: every index is visited once whatever the core count,
// and of several failing rows the first in order is the one reported, even
// when a later chunk fails first in time.
func TestParallelChunks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 3, 8} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, repackChunkRows - 1, 5 * repackChunkRows, 10007} {
			seen := make([]atomic.Int32, n)
			if err := parallelChunks(n, func(lo, hi int) error {
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i := range seen {
				if c := seen[i].Load(); c != 1 {
					t.Fatalf("procs %d, n %d: index %d visited %d times", procs, n, i, c)
				}
			}
		}
		n := 10007
		late := make(chan struct{})
		err := parallelChunks(n, func(lo, hi int) error {
			for i := lo; i < hi; i++ {
				if i == 3001 || i == 9000 {
					if i == 3001 && procs > 1 {
						<-late // the chunk holding 9000 fails first
					}
					if i == 9000 {
						close(late)
					}
					return fmt.Errorf("row %d", i)
				}
			}
			return nil
		})
		if err == nil || err.Error() != "row 3001" {
			t.Errorf("procs %d: error %v, want row 3001", procs, err)
		}
	}
}
