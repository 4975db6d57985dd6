//go:build linux

package mmapfile

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// release drops b's whole pages with madvise(MADV_DONTNEED): for a shared
// file mapping the kernel unmaps them from the process, and the next access
// reads the file's page again.
func release(b []byte, page int) (int, error) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + uintptr(page) - 1) &^ uintptr(page-1)
	hi := (p + uintptr(len(b))) &^ uintptr(page-1)
	if hi <= lo {
		return 0, nil
	}
	whole := b[lo-p : hi-p]
	if err := unix.Madvise(whole, unix.MADV_DONTNEED); err != nil {
		return 0, err
	}
	if guard.Load() {
		if err := unix.Mprotect(whole, unix.PROT_NONE); err != nil {
			return 0, err
		}
	}
	return len(whole), nil
}

// resident reads the present bit (63) of each page's /proc/self/pagemap
// entry, 8 bytes per virtual page.
func resident(b []byte, page int) ([]bool, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first, last := p/uintptr(page), (p+uintptr(len(b))-1)/uintptr(page)
	buf := make([]byte, 8*(last-first+1))
	if _, err := f.ReadAt(buf, int64(first)*8); err != nil {
		return nil, fmt.Errorf("reading /proc/self/pagemap: %w", err)
	}
	out := make([]bool, last-first+1)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])>>63 == 1
	}
	return out, nil
}
