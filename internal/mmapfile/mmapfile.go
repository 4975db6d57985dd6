// Package mmapfile maps a whole model file read-only: through mmap where the
// platform has it, otherwise by reading it into memory. The file is opened
// with safefile, so a named pipe or a device is refused before it is mapped.
package mmapfile

import (
	"fmt"
	"math"

	"github.com/ftchat/ftchat/internal/safefile"
)

// Open opens path with safefile.Open (what names the kind of file in its
// refusals), hands the file's size to check, and maps the whole file if
// check returns nil. check's error is returned as it is, so a format keeps
// its own error type for a file too short (or too large) for it; a size
// over math.MaxInt is refused here too, for a check that does not. A
// mapping failure names what and path. The mapping outlives the descriptor,
// which is closed before Open returns; unmap releases it, after which data
// must not be used.
func Open(path, what string, check func(size int64) error) (data []byte, unmap func() error, err error) {
	fh, st, err := safefile.Open(path, what)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	size := st.Size()
	if err := check(size); err != nil {
		return nil, nil, err
	}
	if uint64(size) > uint64(math.MaxInt) {
		return nil, nil, fmt.Errorf("%s %s: file too large to map on this platform", what, path)
	}
	data, unmap, err = mapFile(fh, int(size))
	if err != nil {
		return nil, nil, fmt.Errorf("map %s %s: %w", what, path, err)
	}
	return data, unmap, nil
}
