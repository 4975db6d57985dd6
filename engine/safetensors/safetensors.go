// Package safetensors reads Hugging Face safetensors files (mmap) and the
// model.safetensors.index.json of a sharded checkpoint. Both are untrusted
// input: the header size is bounded, every dtype, shape and offset is checked
// against the file before anything is allocated, and each refusal names the
// file and the tensor.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]},
// "__metadata__": {...}}, then the data; offsets are relative to the byte
// after the header.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/ftchat/ftchat/internal/mmapfile"
)

// MaxHeader bounds the JSON header. Real headers are a few MB at most (a
// 100k-tensor shard has a ~10 MB header); the bound keeps a corrupt length
// from being allocated.
const MaxHeader = 100 << 20

// MaxDims bounds a tensor's rank.
const MaxDims = 8

// DType is a safetensors element type.
type DType string

// The dtypes the reader knows (the file format's own names).
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U8     DType = "U8"
	BOOL   DType = "BOOL"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
)

var dtypeSize = map[DType]uint64{F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1,
	BOOL: 1, F8E4M3: 1, F8E5M2: 1, "F8_E8M0": 1, "U16": 2, "U32": 4, "U64": 8, "C64": 8}

// Size is the bytes of one element, 0 for an unknown dtype.
func (d DType) Size() int { return int(dtypeSize[d]) }

// Tensor is one tensor's entry in a header. Shape is row-major (the last
// dimension varies fastest), as in PyTorch.
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64
	Begin uint64 // data offsets relative to the data section
	End   uint64
}

// Elements is the product of the shape (1 for a scalar).
func (t Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d // Parse checked the product does not overflow
	}
	return n
}

// Error reports a malformed safetensors file or index.
type Error struct {
	Path string
	Msg  string
}

func (e *Error) Error() string { return "safetensors: " + e.Path + ": " + e.Msg }

// File is an open safetensors file. Tensor data aliases the mapping and
// stays valid until Close.
type File struct {
	Path     string
	Tensors  []Tensor // in offset order
	Metadata map[string]string

	data   []byte // the data section
	idx    map[string]int
	unmap  func() error
	mapped bool // data is a mapping made by Open, whose pages Release may give back
}

// Open maps the file at path and parses its header.
func Open(path string) (*File, error) {
	b, unmap, err := mmapfile.Open(path, "safetensors file", func(size int64) error {
		if size < 8 {
			return &Error{path, fmt.Sprintf("file is %d bytes, too short for a header (truncated download?)", size)}
		}
		if uint64(size) > uint64(math.MaxInt) {
			return &Error{path, "file too large to map on this platform"}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f, err := Parse(path, b)
	if err != nil {
		unmap()
		return nil, err
	}
	f.unmap, f.mapped = unmap, true
	return f, nil
}

// Parse reads a safetensors file held in memory (b is aliased, not
// copied); path names it in errors.
func Parse(path string, b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, &Error{path, fmt.Sprintf("file is %d bytes, too short for a header (truncated download?)", len(b))}
	}
	n := binary.LittleEndian.Uint64(b)
	if n > MaxHeader {
		return nil, &Error{path, fmt.Sprintf("header length %d is over the %d-byte limit; not a safetensors file, or corrupt", n, MaxHeader)}
	}
	if n > uint64(len(b)-8) {
		return nil, &Error{path, fmt.Sprintf("header length %d but the file has only %d bytes after it; the file is truncated (re-download it)", n, len(b)-8)}
	}
	hdr := b[8 : 8+n]
	data := b[8+n:]
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, &Error{path, "header is not a JSON object: " + err.Error()}
	}
	f := &File{Path: path, data: data, idx: map[string]int{}}
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &f.Metadata); err != nil {
				return nil, &Error{path, "__metadata__ is not an object of strings"}
			}
			continue
		}
		t, err := parseEntry(name, v, uint64(len(data)))
		if err != nil {
			return nil, &Error{path, err.Error()}
		}
		f.Tensors = append(f.Tensors, t)
	}
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := f.Tensors[i], f.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.Name < b.Name
	})
	for i, t := range f.Tensors {
		if i > 0 {
			if p := f.Tensors[i-1]; t.Begin < p.End {
				return nil, &Error{path, fmt.Sprintf("tensors %q and %q overlap", p.Name, t.Name)}
			}
		}
		f.idx[t.Name] = i
	}
	return f, nil
}

type entry struct {
	DType   *string       `json:"dtype"`
	Shape   []json.Number `json:"shape"`
	Offsets []json.Number `json:"data_offsets"`
}

func parseEntry(name string, v json.RawMessage, dataLen uint64) (Tensor, error) {
	var e entry
	if err := json.Unmarshal(v, &e); err != nil || e.DType == nil || e.Shape == nil || e.Offsets == nil {
		return Tensor{}, fmt.Errorf("tensor %q: entry needs dtype, shape and data_offsets", name)
	}
	t := Tensor{Name: name, DType: DType(*e.DType)}
	es, ok := dtypeSize[t.DType]
	if !ok {
		return Tensor{}, fmt.Errorf("tensor %q: unknown dtype %q", name, *e.DType)
	}
	if len(e.Shape) > MaxDims {
		return Tensor{}, fmt.Errorf("tensor %q: %d dimensions (at most %d)", name, len(e.Shape), MaxDims)
	}
	n := es
	for _, d := range e.Shape {
		x, err := uintOf(d)
		if err != nil {
			return Tensor{}, fmt.Errorf("tensor %q: shape %v: %v", name, e.Shape, err)
		}
		t.Shape = append(t.Shape, x)
		hi, lo := bits.Mul64(n, x)
		if hi != 0 {
			return Tensor{}, fmt.Errorf("tensor %q: shape %v overflows", name, e.Shape)
		}
		n = lo
	}
	if len(e.Offsets) != 2 {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets has %d entries, want 2", name, len(e.Offsets))
	}
	var err error
	if t.Begin, err = uintOf(e.Offsets[0]); err == nil {
		t.End, err = uintOf(e.Offsets[1])
	}
	if err != nil {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets: %v", name, err)
	}
	if t.End < t.Begin {
		return Tensor{}, fmt.Errorf("tensor %q: data_offsets [%d, %d) end before they begin", name, t.Begin, t.End)
	}
	if t.End-t.Begin != n {
		return Tensor{}, fmt.Errorf("tensor %q: %s %v needs %d bytes but data_offsets [%d, %d) hold %d (dtype/shape mismatch)",
			name, t.DType, t.Shape, n, t.Begin, t.End, t.End-t.Begin)
	}
	if t.End > dataLen {
		return Tensor{}, fmt.Errorf("tensor %q: data [%d, %d) lies past the end of the data (%d bytes): the file is truncated (re-download it)",
			name, t.Begin, t.End, dataLen)
	}
	return t, nil
}

func uintOf(n json.Number) (uint64, error) {
	s := n.String()
	if s == "" || strings.ContainsAny(s, ".eE-+") {
		return 0, fmt.Errorf("%q is not a non-negative integer", s)
	}
	var x uint64
	for _, c := range s {
		d := uint64(c - '0')
		hi, lo := bits.Mul64(x, 10)
		if hi != 0 || lo+d < lo {
			return 0, fmt.Errorf("%s is too large", s)
		}
		x = lo + d
	}
	return x, nil
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (Tensor, bool) {
	i, ok := f.idx[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensors[i], true
}

// Data returns t's bytes, aliasing the mapping.
func (f *File) Data(t Tensor) ([]byte, error) {
	if f.data == nil {
		return nil, &Error{f.Path, fmt.Sprintf("tensor %q requested after Close", t.Name)}
	}
	if t.End > uint64(len(f.data)) || t.Begin > t.End {
		return nil, &Error{f.Path, fmt.Sprintf("tensor %q data [%d, %d) lies outside the file", t.Name, t.Begin, t.End)}
	}
	return f.data[t.Begin:t.End:t.End], nil
}

// ReleaseRange gives back the memory of the whole pages inside the data
// section's bytes [begin, end) (internal/mmapfile.Release) once a loader
// has converted the tensors there into buffers of its own, and returns the
// bytes given back. The data stay valid: a later read pages them in again
// from the file. A File made by Parse, or closed, gives nothing back.
func (f *File) ReleaseRange(begin, end uint64) (int, error) {
	if !f.mapped || begin >= end {
		return 0, nil
	}
	if end > uint64(len(f.data)) {
		return 0, &Error{f.Path, fmt.Sprintf("release of data [%d, %d) past the end of the data (%d bytes)", begin, end, len(f.data))}
	}
	n, err := mmapfile.Release(f.data[begin:end])
	if err != nil {
		return 0, &Error{f.Path, fmt.Sprintf("giving back the pages of data [%d, %d): %v", begin, end, err)}
	}
	return n, nil
}

// Close releases the mapping; data slices become invalid.
func (f *File) Close() error {
	f.data, f.mapped = nil, false
	if f.unmap != nil {
		u := f.unmap
		f.unmap = nil
		return u()
	}
	return nil
}
