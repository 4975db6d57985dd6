package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"

	"github.com/ftchat/ftchat/internal/mmapfile"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment used when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the largest number of dimensions a tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// maxAlignment bounds general.alignment so that a corrupt value cannot push
// the data section absurdly far.
const maxAlignment = 1 << 24

// maxArrayDepth bounds nesting of array-of-array values.
const maxArrayDepth = 8

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, as numbered by the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (v ValueType) String() string {
	if int(v) < len(valueTypeNames) {
		return valueTypeNames[v]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(v))
}

// fixedSize is the encoded size of a scalar of type v, 0 for strings and
// arrays, -1 for unknown types.
func (v ValueType) fixedSize() int {
	switch v {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	case TypeString, TypeArray:
		return 0
	}
	return -1
}

// FormatError reports a malformed or unsupported GGUF file.
type FormatError struct {
	Path   string // file name as given to Open/OpenBytes
	Offset int64  // byte offset where the problem was found, -1 if not applicable
	Msg    string
}

func (e *FormatError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("gguf: %s: %s (at byte offset %d)", e.Path, e.Msg, e.Offset)
	}
	return fmt.Sprintf("gguf: %s: %s", e.Path, e.Msg)
}

// File is an open GGUF file. Metadata is decoded at Open; tensor data is
// served from the mapped file and stays valid until Close. A File is safe
// for concurrent reads; Close must not race with them.
type File struct {
	Path      string
	Version   uint32
	Alignment uint64
	Tensors   []TensorInfo

	data      []byte // whole file (mmap'd or read)
	dataStart uint64 // absolute offset of the tensor data section
	unmap     func() error
	keys      []string
	kv        map[string]any
	tensorIdx map[string]int
	source    func(TensorInfo) ([]byte, error) // NewVirtual files: the tensor bytes
}

// Open maps the GGUF file at path and parses its header, metadata and tensor
// infos. Every length and offset is bounds-checked; a truncated or corrupt
// file yields a *FormatError naming the file and the problem.
func Open(path string) (*File, error) {
	// safefile (inside mmapfile) refuses a FIFO or device, which would block
	// or never end.
	data, unmap, err := mmapfile.Open(path, "GGUF file", func(size int64) error {
		if size < 24 {
			return &FormatError{Path: path, Offset: -1,
				Msg: fmt.Sprintf("file is %d bytes, too short for a GGUF header (truncated download?)", size)}
		}
		if uint64(size) > uint64(math.MaxInt) {
			return &FormatError{Path: path, Offset: -1, Msg: "file too large to map on this platform"}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f, err := parse(path, data)
	if err != nil {
		unmap()
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// OpenBytes parses a GGUF file held in memory; name is used in errors.
// The returned File refers to b, which must not be modified while in use.
func OpenBytes(name string, b []byte) (*File, error) {
	return parse(name, b)
}

// Close releases the mapping. Tensor data slices become invalid.
func (f *File) Close() error {
	f.data = nil
	if f.unmap != nil {
		u := f.unmap
		f.unmap = nil
		return u()
	}
	return nil
}

// Keys returns the metadata keys in file order.
func (f *File) Keys() []string { return slices.Clone(f.keys) }

// Value returns the decoded metadata value: one of uint8, int8, uint16,
// int16, uint32, int32, float32, bool, string, uint64, int64, float64, a
// slice of one of those, or []any for arrays of arrays.
func (f *File) Value(key string) (any, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.kv[key].(string)
	return s, ok
}

// Uint returns any integer or bool value as uint64; negative values fail.
func (f *File) Uint(key string) (uint64, bool) {
	switch v := f.kv[key].(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case uint64:
		return v, true
	}
	i, ok := toInt(f.kv[key])
	if !ok || i < 0 {
		return 0, false
	}
	return uint64(i), true
}

// Int returns any integer value as int64; uint64 values above MaxInt64 fail.
func (f *File) Int(key string) (int64, bool) {
	return toInt(f.kv[key])
}

// Float returns a float32, float64 or integer value as float64.
func (f *File) Float(key string) (float64, bool) {
	switch v := f.kv[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	case uint64:
		return float64(v), true
	}
	i, ok := toInt(f.kv[key])
	return float64(i), ok
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.kv[key].(bool)
	return b, ok
}

// Strings returns a string array value (a copy of the slice).
func (f *File) Strings(key string) ([]string, bool) {
	s, ok := f.kv[key].([]string)
	return slices.Clone(s), ok
}

// Ints returns any integer array as []int64.
func (f *File) Ints(key string) ([]int64, bool) {
	switch v := f.kv[key].(type) {
	case []uint8:
		return convInts(v), true
	case []int8:
		return convInts(v), true
	case []uint16:
		return convInts(v), true
	case []int16:
		return convInts(v), true
	case []uint32:
		return convInts(v), true
	case []int32:
		return convInts(v), true
	case []int64:
		return slices.Clone(v), true
	case []uint64:
		out := make([]int64, len(v))
		for i, x := range v {
			if x > math.MaxInt64 {
				return nil, false
			}
			out[i] = int64(x)
		}
		return out, true
	}
	return nil, false
}

// Floats returns a float32 or float64 array (or an integer array) as []float32.
func (f *File) Floats(key string) ([]float32, bool) {
	switch v := f.kv[key].(type) {
	case []float32:
		return slices.Clone(v), true
	case []float64:
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out, true
	}
	ints, ok := f.Ints(key)
	if !ok {
		return nil, false
	}
	out := make([]float32, len(ints))
	for i, x := range ints {
		out[i] = float32(x)
	}
	return out, true
}

// Tensor looks up a tensor info by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensorIdx[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// DataOffset is the absolute file offset of the tensor data section.
func (f *File) DataOffset() uint64 { return f.dataStart }

// TensorData returns the raw stored bytes of ti (aliasing the mapping; valid
// until Close). It fails for tensor types whose block layout is unknown.
func (f *File) TensorData(ti TensorInfo) ([]byte, error) {
	if f.data == nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q requested after Close", f.Path, ti.Name)
	}
	if !ti.Type.Known() {
		return nil, &FormatError{Path: f.Path, Offset: -1, Msg: fmt.Sprintf(
			"tensor %q has unsupported type %s; re-quantize the model to a supported type", ti.Name, ti.Type)}
	}
	if f.source != nil {
		return f.virtualData(ti)
	}
	n := ti.Bytes()
	start := f.dataStart + ti.Offset
	if ti.Offset > uint64(len(f.data)) || start > uint64(len(f.data)) || n > uint64(len(f.data))-start {
		return nil, &FormatError{Path: f.Path, Offset: -1, Msg: fmt.Sprintf(
			"tensor %q data [%d, +%d) lies outside the file", ti.Name, start, n)}
	}
	return f.data[start : start+n : start+n], nil
}

// Validate reports tensors whose type is not in supported (all known types
// when supported is nil), naming each offending tensor and its type.
func (f *File) Validate(supported []Type) error {
	var bad []string
	for _, ti := range f.Tensors {
		ok := ti.Type.Known()
		if ok && supported != nil {
			ok = slices.Contains(supported, ti.Type)
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%s (%s)", ti.Name, ti.Type))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	if len(bad) > 8 {
		more = fmt.Sprintf(" and %d more", len(bad)-8)
		bad = bad[:8]
	}
	return &FormatError{Path: f.Path, Offset: -1, Msg: fmt.Sprintf(
		"unsupported tensor types: %s%s; use a model quantized to a supported type", strings.Join(bad, ", "), more)}
}

func toInt(v any) (int64, bool) {
	switch v := v.(type) {
	case uint8:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case int16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case uint64:
		if v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func convInts[T uint8 | int8 | uint16 | int16 | uint32 | int32](v []T) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// maxElements bounds any tensor dimension of a file of size bytes: one
// element per bit is denser than every ggml type (the smallest are ~1.5 bits).
func maxElements(size int) uint64 { return 8 * uint64(size) }

// decoder walks the file bytes with bounds checks; the first error sticks.
type decoder struct {
	path string
	b    []byte
	off  int
	err  error
}

func (d *decoder) fail(off int, format string, args ...any) {
	if d.err == nil {
		d.err = &FormatError{Path: d.path, Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

// take returns the next n bytes or nil (setting the error) if truncated.
func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > d.remaining() {
		d.fail(d.off, "file truncated while reading %s (need %d bytes, %d left)", what, n, d.remaining())
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) u8(what string) uint8 {
	if p := d.take(1, what); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16(what string) uint16 {
	if p := d.take(2, what); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if p := d.take(4, what); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if p := d.take(8, what); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) str(what string) string {
	at := d.off
	n := d.u64(what + " length")
	if d.err != nil {
		return ""
	}
	if n > uint64(d.remaining()) {
		d.fail(at, "%s length %d exceeds the %d bytes left in the file", what, n, d.remaining())
		return ""
	}
	return string(d.take(int(n), what))
}

// count reads a uint64 element count and checks that count elements of at
// least minSize bytes each can fit in the rest of the file, so corrupt
// counts never cause huge allocations.
func (d *decoder) count(what string, minSize int) int {
	at := d.off
	n := d.u64(what)
	if d.err != nil {
		return 0
	}
	if minSize > 0 && n > uint64(d.remaining()/minSize) {
		d.fail(at, "%s %d is impossible: only %d bytes left in the file", what, n, d.remaining())
		return 0
	}
	return int(n)
}

func (d *decoder) scalar(t ValueType, what string) any {
	switch t {
	case TypeUint8:
		return d.u8(what)
	case TypeInt8:
		return int8(d.u8(what))
	case TypeUint16:
		return d.u16(what)
	case TypeInt16:
		return int16(d.u16(what))
	case TypeUint32:
		return d.u32(what)
	case TypeInt32:
		return int32(d.u32(what))
	case TypeFloat32:
		return math.Float32frombits(d.u32(what))
	case TypeUint64:
		return d.u64(what)
	case TypeInt64:
		return int64(d.u64(what))
	case TypeFloat64:
		return math.Float64frombits(d.u64(what))
	case TypeBool:
		at := d.off
		b := d.u8(what)
		if b > 1 {
			d.fail(at, "%s: bool value %d is neither 0 nor 1", what, b)
		}
		return b == 1
	case TypeString:
		return d.str(what)
	}
	d.fail(d.off, "%s: unknown value type %d", what, uint32(t))
	return nil
}

// decodeFixed decodes n fixed-size little-endian elements in one bounds check.
func decodeFixed[T any](d *decoder, n, size int, what string, conv func([]byte) T) []T {
	p := d.take(n*size, what)
	if p == nil {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = conv(p[i*size:])
	}
	return out
}

func (d *decoder) value(t ValueType, what string, depth int) any {
	if t != TypeArray {
		return d.scalar(t, what)
	}
	if depth >= maxArrayDepth {
		d.fail(d.off, "%s: arrays nested deeper than %d", what, maxArrayDepth)
		return nil
	}
	at := d.off
	et := ValueType(d.u32(what + " element type"))
	if d.err != nil {
		return nil
	}
	sz := et.fixedSize()
	if sz < 0 {
		d.fail(at, "%s: unknown array element type %d", what, uint32(et))
		return nil
	}
	minSize := sz
	switch et {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	n := d.count(what+" array length", minSize)
	if d.err != nil {
		return nil
	}
	switch et {
	case TypeUint8:
		return slices.Clone(d.take(n, what))
	case TypeInt8:
		return decodeFixed(d, n, 1, what, func(p []byte) int8 { return int8(p[0]) })
	case TypeUint16:
		return decodeFixed(d, n, 2, what, binary.LittleEndian.Uint16)
	case TypeInt16:
		return decodeFixed(d, n, 2, what, func(p []byte) int16 { return int16(binary.LittleEndian.Uint16(p)) })
	case TypeUint32:
		return decodeFixed(d, n, 4, what, binary.LittleEndian.Uint32)
	case TypeInt32:
		return decodeFixed(d, n, 4, what, func(p []byte) int32 { return int32(binary.LittleEndian.Uint32(p)) })
	case TypeFloat32:
		return decodeFixed(d, n, 4, what, func(p []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(p)) })
	case TypeUint64:
		return decodeFixed(d, n, 8, what, binary.LittleEndian.Uint64)
	case TypeInt64:
		return decodeFixed(d, n, 8, what, func(p []byte) int64 { return int64(binary.LittleEndian.Uint64(p)) })
	case TypeFloat64:
		return decodeFixed(d, n, 8, what, func(p []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(p)) })
	case TypeBool:
		at := d.off
		bs := decodeFixed(d, n, 1, what, func(p []byte) uint8 { return p[0] })
		out := make([]bool, len(bs))
		for i, b := range bs {
			if b > 1 {
				d.fail(at+i, "%s: bool value %d is neither 0 nor 1", what, b)
				return nil
			}
			out[i] = b == 1
		}
		if d.err != nil {
			return nil
		}
		return out
	case TypeString:
		out := make([]string, n)
		for i := range out {
			out[i] = d.str(what)
			if d.err != nil {
				return nil
			}
		}
		return out
	}
	out := make([]any, n)
	for i := range out {
		out[i] = d.value(TypeArray, what, depth+1)
		if d.err != nil {
			return nil
		}
	}
	return out
}

func parse(path string, b []byte) (*File, error) {
	d := &decoder{path: path, b: b}
	if len(b) < 4 || string(b[:4]) != Magic {
		n := min(len(b), 4)
		return nil, &FormatError{Path: path, Offset: 0, Msg: fmt.Sprintf(
			"bad magic %q, want %q: not a GGUF file", b[:n], Magic)}
	}
	d.off = 4
	f := &File{Path: path, data: b, kv: map[string]any{}, tensorIdx: map[string]int{}}
	f.Version = d.u32("version")
	if d.err != nil {
		return nil, d.err
	}
	switch f.Version {
	case 2, 3:
	case 1:
		return nil, &FormatError{Path: path, Offset: 4, Msg: "GGUF version 1 is not supported (it predates 64-bit counts); convert the model with a current llama.cpp"}
	default:
		if v := bits.ReverseBytes32(f.Version); v >= 1 && v <= 3 {
			return nil, &FormatError{Path: path, Offset: 4, Msg: "big-endian GGUF files are not supported; use the little-endian model file"}
		}
		return nil, &FormatError{Path: path, Offset: 4, Msg: fmt.Sprintf("unsupported GGUF version %d (supported: 2, 3)", f.Version)}
	}
	nTensors := d.count("tensor count", 24)
	nKV := d.count("metadata key/value count", 13)
	if d.err != nil {
		return nil, d.err
	}

	f.keys = make([]string, 0, nKV)
	for i := 0; i < nKV; i++ {
		at := d.off
		key := d.str(fmt.Sprintf("metadata key #%d", i))
		vt := ValueType(d.u32(fmt.Sprintf("type of metadata %q", key)))
		v := d.value(vt, fmt.Sprintf("metadata %q", key), 0)
		if d.err != nil {
			return nil, d.err
		}
		if _, dup := f.kv[key]; dup {
			return nil, &FormatError{Path: path, Offset: int64(at), Msg: fmt.Sprintf("duplicate metadata key %q", key)}
		}
		f.keys = append(f.keys, key)
		f.kv[key] = v
	}

	f.Alignment = DefaultAlignment
	if _, ok := f.kv["general.alignment"]; ok {
		a, ok := f.Uint("general.alignment")
		if !ok || a == 0 || a&(a-1) != 0 || a > maxAlignment {
			return nil, &FormatError{Path: path, Offset: -1, Msg: fmt.Sprintf(
				"general.alignment %v is invalid: must be a power of two between 1 and %d", f.kv["general.alignment"], maxAlignment)}
		}
		f.Alignment = a
	}

	f.Tensors = make([]TensorInfo, nTensors)
	for i := range f.Tensors {
		at := d.off
		name := d.str(fmt.Sprintf("tensor #%d name", i))
		nd := d.u32(fmt.Sprintf("tensor %q dimension count", name))
		if d.err != nil {
			return nil, d.err
		}
		if nd > MaxDims {
			return nil, &FormatError{Path: path, Offset: int64(at), Msg: fmt.Sprintf(
				"tensor %q has %d dimensions, at most %d allowed", name, nd, MaxDims)}
		}
		ti := TensorInfo{Name: name, Dims: make([]uint64, nd)}
		elems := uint64(1)
		for j := range ti.Dims {
			ti.Dims[j] = d.u64(fmt.Sprintf("tensor %q dims", name))
			hi, lo := bits.Mul64(elems, ti.Dims[j])
			if hi != 0 || lo > math.MaxInt64 {
				d.fail(at, "tensor %q dims %v overflow the element count; the file is corrupt", name, ti.Dims)
			}
			elems = lo
		}
		// Even when another dim is 0 (no data), each dim is used as a size
		// (e.g. the vocabulary): none can exceed one element per bit of the file.
		for j, n := range ti.Dims {
			if d.err == nil && n > maxElements(len(b)) {
				d.fail(at, "tensor %q dimension %d is %d, more elements than a %d-byte file can hold; the file is corrupt",
					name, j, n, len(b))
			}
		}
		ti.Type = Type(d.u32(fmt.Sprintf("tensor %q type", name)))
		ti.Offset = d.u64(fmt.Sprintf("tensor %q offset", name))
		if d.err != nil {
			return nil, d.err
		}
		if _, dup := f.tensorIdx[name]; dup {
			return nil, &FormatError{Path: path, Offset: int64(at), Msg: fmt.Sprintf("duplicate tensor name %q", name)}
		}
		if ti.Type.Internal() {
			return nil, &FormatError{Path: path, Offset: int64(at), Msg: fmt.Sprintf(
				"tensor %q claims type id %d (%s), which is ftchat's in-memory form of Hugging Face FP8 weights, not a GGUF type; the file is corrupt or was not written by a GGUF tool",
				name, uint32(ti.Type), ti.Type)}
		}
		if ti.Offset%f.Alignment != 0 {
			return nil, &FormatError{Path: path, Offset: int64(at), Msg: fmt.Sprintf(
				"tensor %q offset %d is not a multiple of the alignment %d", name, ti.Offset, f.Alignment)}
		}
		if ti.Type.Known() && (len(ti.Dims) == 0 && ti.Type.BlockElems() > 1 ||
			len(ti.Dims) > 0 && ti.Dims[0]%uint64(ti.Type.BlockElems()) != 0) {
			return nil, &FormatError{Path: path, Offset: int64(at), Msg: fmt.Sprintf(
				"tensor %q row length %v is not a multiple of the %s block size %d", name, ti.Dims, ti.Type, ti.Type.BlockElems())}
		}
		f.tensorIdx[name] = i
		f.Tensors[i] = ti
	}

	pad := (f.Alignment - uint64(d.off)%f.Alignment) % f.Alignment
	f.dataStart = uint64(d.off) + pad
	if err := f.checkTensorRanges(); err != nil {
		return nil, err
	}
	return f, nil
}

// checkTensorRanges verifies every tensor of known type lies inside the data
// section and that no two overlap.
func (f *File) checkTensorRanges() error {
	size := uint64(len(f.data))
	var dataLen uint64
	if f.dataStart < size {
		dataLen = size - f.dataStart
	}
	type span struct {
		start, end uint64
		name       string
	}
	spans := make([]span, 0, len(f.Tensors))
	for _, ti := range f.Tensors {
		if !ti.Type.Known() {
			continue // reported by Validate / TensorData
		}
		n, ok := ti.byteSize()
		if !ok {
			return &FormatError{Path: f.Path, Offset: -1, Msg: fmt.Sprintf(
				"tensor %q (%s, dims %v) would need more than 2^64 bytes; the file is corrupt", ti.Name, ti.Type, ti.Dims)}
		}
		if ti.Offset > dataLen || n > dataLen-ti.Offset {
			return &FormatError{Path: f.Path, Offset: -1, Msg: fmt.Sprintf(
				"tensor %q (%s, %d bytes at data offset %d) extends past the end of the file (data section is %d bytes); the file is truncated or corrupt",
				ti.Name, ti.Type, n, ti.Offset, dataLen)}
		}
		if n > 0 {
			spans = append(spans, span{ti.Offset, ti.Offset + n, ti.Name})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return &FormatError{Path: f.Path, Offset: -1, Msg: fmt.Sprintf(
				"tensors %q and %q overlap in the data section", spans[i-1].name, spans[i].name)}
		}
	}
	return nil
}
