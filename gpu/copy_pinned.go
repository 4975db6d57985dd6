package gpu

import (
	"os"
	"unsafe"
)

// Device-to-host copies through a pinned staging buffer.
//
// The per-kernel profile (FTCHAT_PROFILE, H200, 2026-12-02) showed each
// decode step's logits copy (248,320 floats, 1 MB, on the Qwen3.6 vocab)
// taking 419 µs, 2.4 GB/s: 28% of the step's GPU time, more than the
// output-head GEMV. The destination is pageable Go memory, which the
// driver copies through its own small staging. So CopyToHost copies into a
// page-locked buffer of this context (grown to the largest copy, at most
// pinnedD2HMax; longer copies go in pieces) and from there with copy().
// FTCHAT_PINNED_D2H=0 keeps the direct copy (to compare); a failed pinned
// allocation falls back to it for good.

// pinnedD2HMax bounds the pinned staging buffer.
const pinnedD2HMax = 16 << 20

var pinnedD2HOff = os.Getenv("FTCHAT_PINNED_D2H") == "0"

type pinnedD2H struct {
	buf    HostBuffer
	failed bool // a HostAlloc failed: copy directly from then on
}

// d2hAsync queues a device-to-host copy on the work stream (timed when
// profiling).
func (c *Ctx) d2hAsync(dst unsafe.Pointer, src DevicePtr, n int64) error {
	if c.prof != nil {
		return c.prof.copyToHost(c, dst, src, n)
	}
	return c.drv.check("cuMemcpyDtoHAsync_v2", ccall(c.drv.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), c.stream.h))
}

// copyToHostPinned copies n bytes from src to dst through the pinned
// buffer, waiting for each piece. ok is false when there is no pinned
// buffer (turned off, or its allocation failed): nothing was copied.
func (c *Ctx) copyToHostPinned(dst unsafe.Pointer, src DevicePtr, n int64) (ok bool, err error) {
	st := &c.d2h
	if pinnedD2HOff || st.failed {
		return false, nil
	}
	if want := min(n, pinnedD2HMax); st.buf.n < want {
		const mib = 1 << 20
		size := min(pinnedD2HMax, (want+mib-1)/mib*mib)
		if st.buf.p != nil {
			c.FreeHost(st.buf)
			st.buf = HostBuffer{}
		}
		b, err := c.HostAlloc(size)
		if err != nil {
			st.failed = true
			return false, nil
		}
		st.buf = b
	}
	out := unsafe.Slice((*byte)(dst), n)
	stage := st.buf.Bytes()
	for off := int64(0); off < n; off += st.buf.n {
		k := min(st.buf.n, n-off)
		if err := c.d2hAsync(st.buf.p, src.Add(off), k); err != nil {
			return true, err
		}
		if err := c.Sync(); err != nil {
			return true, err
		}
		copy(out[off:off+k], stage[:k])
	}
	return true, nil
}

// freePinnedD2H frees the staging buffer (context teardown).
func (c *Ctx) freePinnedD2H() {
	if c.d2h.buf.p != nil {
		ccall(c.drv.cuMemFreeHost, uintptr(c.d2h.buf.p))
		c.d2h.buf = HostBuffer{}
	}
}
