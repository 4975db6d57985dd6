//go:build unix

package model_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time: on a shared machine,
// tokens per CPU-second is steadier than tokens per wall-second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
