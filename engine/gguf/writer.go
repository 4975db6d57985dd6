package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
)

// KV is one metadata entry to write. Value must be one of uint8, int8,
// uint16, int16, uint32, int32, float32, bool, string, uint64, int64,
// float64, a slice of one of those, or []any whose elements are such slices
// (an array of arrays). Plain int is rejected: GGUF needs an explicit width.
type KV struct {
	Key   string
	Value any
}

// WriteTensor is a tensor for Write: its info and its complete stored bytes.
type WriteTensor struct {
	Name string
	Dims []uint64 // Dims[0] is the row length, as in TensorInfo
	Type Type
	Data []byte
}

// Write writes a complete GGUF v3 file holding kv and tensors.
func Write(w io.Writer, kv []KV, tensors []WriteTensor) error {
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type}
	}
	gw, err := NewWriter(w, kv, infos)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err := gw.WriteTensor(t.Data); err != nil {
			return err
		}
	}
	return gw.Close()
}

// Writer streams a GGUF v3 file: NewWriter writes the header, metadata and
// tensor infos; the tensor bytes then follow in order through Write or
// WriteTensor, so a large model never has to be held in memory.
type Writer struct {
	bw        *bufio.Writer
	align     uint64
	infos     []TensorInfo
	cur       int    // index of the tensor being written
	curDone   uint64 // bytes of it written so far
	pos       uint64 // bytes written to the data section
	err       error
	finalized bool
}

// NewWriter validates kv and tensor infos, assigns aligned data offsets
// (TensorInfo.Offset is ignored) and writes everything before the data.
// The alignment is general.alignment when present in kv, else 32.
func NewWriter(w io.Writer, kv []KV, tensors []TensorInfo) (*Writer, error) {
	gw := &Writer{bw: bufio.NewWriterSize(w, 1<<20), align: DefaultAlignment}
	seen := map[string]bool{}
	for _, e := range kv {
		if seen[e.Key] {
			return nil, fmt.Errorf("gguf: write: duplicate metadata key %q", e.Key)
		}
		seen[e.Key] = true
		if e.Key == "general.alignment" {
			a, ok := toInt(e.Value)
			if _, isBool := e.Value.(bool); isBool || !ok || a <= 0 || a&(a-1) != 0 || a > maxAlignment {
				return nil, fmt.Errorf("gguf: write: general.alignment %v must be a power of two integer <= %d", e.Value, maxAlignment)
			}
			gw.align = uint64(a)
		}
	}
	names := map[string]bool{}
	gw.infos = make([]TensorInfo, len(tensors))
	var off uint64
	for i, t := range tensors {
		if names[t.Name] {
			return nil, fmt.Errorf("gguf: write: duplicate tensor name %q", t.Name)
		}
		names[t.Name] = true
		if !t.Type.Known() {
			return nil, fmt.Errorf("gguf: write: tensor %q has unknown type %s", t.Name, t.Type)
		}
		if t.Type.Internal() {
			return nil, fmt.Errorf("gguf: write: tensor %q has ftchat's in-memory type %s, which GGUF files cannot hold", t.Name, t.Type)
		}
		if len(t.Dims) > MaxDims {
			return nil, fmt.Errorf("gguf: write: tensor %q has %d dims, at most %d", t.Name, len(t.Dims), MaxDims)
		}
		if len(t.Dims) > 0 && t.Dims[0]%uint64(t.Type.BlockElems()) != 0 {
			return nil, fmt.Errorf("gguf: write: tensor %q row length %d is not a multiple of the %s block size %d",
				t.Name, t.Dims[0], t.Type, t.Type.BlockElems())
		}
		ti := TensorInfo{Name: t.Name, Dims: append([]uint64(nil), t.Dims...), Type: t.Type, Offset: off}
		gw.infos[i] = ti
		off = alignUp(off+ti.Bytes(), gw.align)
	}

	var hdr encoder
	hdr.raw([]byte(Magic))
	hdr.u32(3)
	hdr.u64(uint64(len(tensors)))
	hdr.u64(uint64(len(kv)))
	for _, e := range kv {
		hdr.str(e.Key)
		if err := hdr.value(e.Value, true); err != nil {
			return nil, fmt.Errorf("gguf: write: metadata %q: %w", e.Key, err)
		}
	}
	for _, ti := range gw.infos {
		hdr.str(ti.Name)
		hdr.u32(uint32(len(ti.Dims)))
		for _, d := range ti.Dims {
			hdr.u64(d)
		}
		hdr.u32(uint32(ti.Type))
		hdr.u64(ti.Offset)
	}
	hdr.raw(make([]byte, alignUp(uint64(len(hdr.b)), gw.align)-uint64(len(hdr.b))))
	if _, err := gw.bw.Write(hdr.b); err != nil {
		return nil, fmt.Errorf("gguf: write: %w", err)
	}
	gw.skipEmpty()
	return gw, nil
}

// Tensors returns the tensor infos with their assigned data offsets.
func (w *Writer) Tensors() []TensorInfo { return append([]TensorInfo(nil), w.infos...) }

// Write appends tensor bytes in file order; chunks may split or span
// tensors. Padding between tensors is inserted automatically.
func (w *Writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		if w.cur >= len(w.infos) {
			w.err = fmt.Errorf("gguf: write: %d bytes of tensor data beyond the last tensor", len(p))
			return n, w.err
		}
		ti := w.infos[w.cur]
		k := min(uint64(len(p)), ti.Bytes()-w.curDone)
		if _, err := w.bw.Write(p[:k]); err != nil {
			w.err = fmt.Errorf("gguf: write: %w", err)
			return n, w.err
		}
		n += int(k)
		p = p[k:]
		w.curDone += k
		w.pos += k
		if w.curDone == ti.Bytes() {
			w.finishTensor()
		}
	}
	return n, w.err
}

// WriteTensor writes the complete data of the next tensor.
func (w *Writer) WriteTensor(data []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.cur >= len(w.infos) {
		return fmt.Errorf("gguf: write: all %d tensors already written", len(w.infos))
	}
	ti := w.infos[w.cur]
	if w.curDone != 0 || uint64(len(data)) != ti.Bytes() {
		return fmt.Errorf("gguf: write: tensor %q needs %d bytes (%s %v), got %d",
			ti.Name, ti.Bytes(), ti.Type, ti.Dims, len(data))
	}
	_, err := w.Write(data)
	return err
}

func (w *Writer) finishTensor() {
	// Every tensor, the last included, is padded: ggml's reader sizes the
	// data section as the sum of padded tensor sizes.
	pad := alignUp(w.pos, w.align) - w.pos
	if _, err := w.bw.Write(make([]byte, pad)); err != nil {
		w.err = fmt.Errorf("gguf: write: %w", err)
	}
	w.pos += pad
	w.cur++
	w.curDone = 0
	w.skipEmpty()
}

// skipEmpty advances past zero-byte tensors, which need no data.
func (w *Writer) skipEmpty() {
	for w.cur < len(w.infos) && w.infos[w.cur].Bytes() == 0 {
		w.cur++
	}
}

// Close checks that every tensor was written in full and flushes. It does
// not close the underlying writer.
func (w *Writer) Close() error {
	if w.finalized {
		return w.err
	}
	w.finalized = true
	if w.err == nil && w.cur < len(w.infos) {
		ti := w.infos[w.cur]
		w.err = fmt.Errorf("gguf: write: closed after %d of %d bytes of tensor %q (%d tensors missing)",
			w.curDone, ti.Bytes(), ti.Name, len(w.infos)-w.cur)
	}
	if err := w.bw.Flush(); err != nil && w.err == nil {
		w.err = fmt.Errorf("gguf: write: %w", err)
	}
	return w.err
}

func alignUp(x, a uint64) uint64 { return (x + a - 1) / a * a }

type encoder struct{ b []byte }

func (e *encoder) raw(p []byte) { e.b = append(e.b, p...) }
func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }

var errValueType = errors.New("unsupported value type")

// valueTypeOf maps a Go scalar value or slice element type to its tag.
func valueTypeOf(t reflect.Type) (ValueType, bool) {
	switch t.Kind() {
	case reflect.Uint8:
		return TypeUint8, true
	case reflect.Int8:
		return TypeInt8, true
	case reflect.Uint16:
		return TypeUint16, true
	case reflect.Int16:
		return TypeInt16, true
	case reflect.Uint32:
		return TypeUint32, true
	case reflect.Int32:
		return TypeInt32, true
	case reflect.Float32:
		return TypeFloat32, true
	case reflect.Bool:
		return TypeBool, true
	case reflect.String:
		return TypeString, true
	case reflect.Uint64:
		return TypeUint64, true
	case reflect.Int64:
		return TypeInt64, true
	case reflect.Float64:
		return TypeFloat64, true
	case reflect.Slice:
		return TypeArray, true
	}
	return 0, false
}

// value encodes v, preceded by its type tag when tagged is set.
func (e *encoder) value(v any, tagged bool) error {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return fmt.Errorf("%w: nil", errValueType)
	}
	vt, ok := valueTypeOf(rv.Type())
	if !ok {
		return fmt.Errorf("%w: %T (use a sized integer or float type)", errValueType, v)
	}
	if tagged {
		e.u32(uint32(vt))
	}
	return e.rvalue(rv, vt)
}

func (e *encoder) rvalue(rv reflect.Value, vt ValueType) error {
	switch vt {
	case TypeUint8:
		e.u8(uint8(rv.Uint()))
	case TypeInt8:
		e.u8(uint8(rv.Int()))
	case TypeUint16:
		e.u16(uint16(rv.Uint()))
	case TypeInt16:
		e.u16(uint16(rv.Int()))
	case TypeUint32:
		e.u32(uint32(rv.Uint()))
	case TypeInt32:
		e.u32(uint32(rv.Int()))
	case TypeUint64:
		e.u64(rv.Uint())
	case TypeInt64:
		e.u64(uint64(rv.Int()))
	case TypeFloat32:
		e.u32(math.Float32bits(float32(rv.Float())))
	case TypeFloat64:
		e.u64(math.Float64bits(rv.Float()))
	case TypeBool:
		if rv.Bool() {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case TypeString:
		e.str(rv.String())
	case TypeArray:
		et := rv.Type().Elem()
		if et.Kind() == reflect.Interface { // []any: an array of arrays
			e.u32(uint32(TypeArray))
			e.u64(uint64(rv.Len()))
			for i := 0; i < rv.Len(); i++ {
				el := rv.Index(i).Elem()
				if !el.IsValid() || el.Kind() != reflect.Slice {
					return fmt.Errorf("%w: element %d of []any must be a slice", errValueType, i)
				}
				if err := e.value(el.Interface(), false); err != nil {
					return err
				}
			}
			return nil
		}
		evt, ok := valueTypeOf(et)
		if !ok {
			return fmt.Errorf("%w: array of %s", errValueType, et)
		}
		e.u32(uint32(evt))
		e.u64(uint64(rv.Len()))
		if evt == TypeUint8 {
			e.raw(rv.Bytes())
			return nil
		}
		for i := 0; i < rv.Len(); i++ {
			if err := e.rvalue(rv.Index(i), evt); err != nil {
				return err
			}
		}
	}
	return nil
}
