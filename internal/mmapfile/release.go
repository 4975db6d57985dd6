package mmapfile

import (
	"os"
	"sync/atomic"
)

// Release gives back the memory of the whole pages inside b, which must be
// a part of data returned by Open (never other memory: on Linux the pages
// of an anonymous buffer would read back as zeros). The mapping is
// read-only and shared, so the data stay valid: a later read faults the
// page back in from the file (or the page cache). Pages b shares with its
// neighbours at either end are kept. It returns the bytes given back; where
// the platform has no such call, or the file was read rather than mapped,
// it gives back nothing.
//
// Loaders call it on bytes they have converted into buffers of their own,
// so a file's pages and the converted copy are not both resident.
func Release(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return release(b, os.Getpagesize())
}

// Resident reports, for each page that b (a part of data returned by Open)
// touches, whether the page is mapped into the process now: the check that
// released pages stayed released. It is implemented on Linux only (through
// /proc/self/pagemap); elsewhere it returns an error.
func Resident(b []byte) ([]bool, error) {
	if len(b) == 0 {
		return nil, nil
	}
	return resident(b, os.Getpagesize())
}

// guard is Guard's setting.
var guard atomic.Bool

// Guard makes Release also revoke access to the pages it gives back
// (PROT_NONE, Linux only), so that a later read of a released range kills
// the process at the read instead of paging the range in again unseen. It
// is for tests that check a loader never reads what it released, and
// returns the previous setting.
func Guard(on bool) bool { return guard.Swap(on) }
