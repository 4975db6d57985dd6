//go:build !linux

package mmapfile

import "errors"

// release gives nothing back: without Linux's MADV_DONTNEED semantics (a
// shared file page dropped now and read again on the next access) the
// mapping keeps its pages, and the non-mmap fallback holds a heap copy.
func release(b []byte, page int) (int, error) { return 0, nil }

func resident(b []byte, page int) ([]bool, error) {
	return nil, errors.New("mmapfile: page residency is read on Linux only")
}
