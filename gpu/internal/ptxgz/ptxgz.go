// Package ptxgz is the storage format of the committed PTX: one gzip member
// per module and flavour, written by ptxgen and read by gpu.KernelPTX.
// Encoding is deterministic (best compression, no name, zero mtime), so
// regenerating an unchanged source gives the same bytes.
package ptxgz

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
)

// Ext is the file suffix of a compressed module: <module>_<flavour>.ptx.gz.
const Ext = ".ptx.gz"

// MaxSize bounds a decompressed module; the largest (attention) is ~11 MB.
const MaxSize = 64 << 20

// Encode compresses ptx.
func Encode(ptx []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(ptx); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Decode decompresses gz and appends pad zero bytes (the NUL that
// cuModuleLoadData wants, without copying the PTX again). It refuses input
// that is not gzip, fails its checksum, or inflates beyond MaxSize.
func Decode(gz []byte, pad int) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("ptxgz: %w", err)
	}
	// The trailer's ISIZE is only a capacity hint, so the PTX is not copied
	// again; it is not trusted beyond MaxSize or what deflate can reach
	// (at most ~1032:1), and a lying one fails the reader's own check.
	hint := 0
	if len(gz) >= 4 {
		hint = int(min(binary.LittleEndian.Uint32(gz[len(gz)-4:]), MaxSize, uint32(min(len(gz), MaxSize))*1032))
	}
	buf := bytes.NewBuffer(make([]byte, 0, hint+pad+bytes.MinRead))
	n, err := buf.ReadFrom(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("ptxgz: %w", err)
	}
	if n > MaxSize {
		return nil, fmt.Errorf("ptxgz: module inflates beyond %d MiB", MaxSize>>20)
	}
	out := buf.Bytes()
	return append(out, make([]byte, pad)...), nil
}
