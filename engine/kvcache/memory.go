package kvcache

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"os"
	"strconv"
	"strings"
)

// fallbackHostMemory is assumed available where the free memory cannot be
// read (no /proc/meminfo): low enough that a typo in --kv-tokens is refused
// rather than swapping the machine to a halt.
const fallbackHostMemory = 16 << 30

// hostMemory reports the bytes a new allocation can take; tests replace it.
var hostMemory = AvailableMemory

// AvailableMemory is the memory this process can still allocate:
// MemAvailable of /proc/meminfo, lowered by the cgroup (v2) limit when one
// is set. ok is false when neither can be read.
func AvailableMemory() (n int64, ok bool) {
	n = math.MaxInt64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// "MemAvailable:   23930340 kB"
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb < math.MaxInt64/1024 {
					n, ok = kb*1024, true
				}
			}
		}
	}
	limit, lerr := readCgroupInt("/sys/fs/cgroup/memory.max")
	used, uerr := readCgroupInt("/sys/fs/cgroup/memory.current")
	if lerr == nil && uerr == nil {
		n, ok = min(n, max(limit-used, 0)), true
	}
	return n, ok
}

func readCgroupInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // "max" fails: no limit
}

// poolBytes is PoolBytes with overflow reported (ok false).
func poolBytes(l Layout) (n uint64, ok bool) {
	if l.Pages < 0 || l.PageSize < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(l.Pages), uint64(l.PageSize))
	if hi != 0 {
		return 0, false
	}
	hi, n = bits.Mul64(lo, uint64(l.BytesPerToken()))
	return n, hi == 0 && n <= math.MaxInt64
}

// CheckHostMemory refuses a host pool for l that does not fit in the
// memory available now, before any of it is allocated: asking for more
// would panic (beyond the address space) or get the process killed.
func CheckHostMemory(l Layout) error {
	need, ok := poolBytes(l)
	return checkHost(uint64(l.Pages)*uint64(l.PageSize), need, ok, l.DType.IsFP8() && l.VType().IsFP8())
}

// CheckHostBudget is CheckHostMemory for a pool planned as tokens of
// bytesPerToken each (the CPU pool is sized in bf16-equivalent tokens).
func CheckHostBudget(tokens, bytesPerToken int, dt DType) error {
	if tokens < 0 || bytesPerToken < 0 {
		return fmt.Errorf("KV pool of %d tokens of %d bytes: sizes must not be negative", tokens, bytesPerToken)
	}
	hi, need := bits.Mul64(uint64(tokens), uint64(bytesPerToken))
	return checkHost(uint64(tokens), need, hi == 0 && need <= math.MaxInt64, dt.IsFP8())
}

// allFP8: K and V are both FP8 already (no dtype advice to give).
func checkHost(tokens, need uint64, ok bool, allFP8 bool) error {
	avail, known := hostMemory()
	if !known {
		avail = fallbackHostMemory
	}
	if ok && need <= uint64(avail) {
		return nil
	}
	needS := "more than 8 EiB"
	if ok {
		needS = FormatBytes(int64(need))
	}
	have := "this machine has " + FormatBytes(avail) + " available"
	if !known {
		have = "the free memory of this machine cannot be read, and the limit without it is " + FormatBytes(avail)
	}
	fix := "lower --kv-tokens/--ctx-size"
	if !allFP8 {
		fix += " or use --kv-cache-dtype fp8_e4m3 (the same memory holds about twice the tokens)"
	}
	return fmt.Errorf("KV pool of %d tokens needs %s, %s; %s", tokens, needS, have, fix)
}
