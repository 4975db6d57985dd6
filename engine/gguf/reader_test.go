package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadPythonMetadata reads the metadata that gguf-py wrote into
// testdata/types.gguf, one key per value type.
func TestReadPythonMetadata(t *testing.T) {
	f := openFixture(t)
	if f.Version != 3 || f.Alignment != 64 || f.DataOffset()%64 != 0 {
		t.Errorf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset())
	}
	want := map[string]any{
		"general.architecture": "fixture", "general.alignment": uint32(64),
		"test.u8": uint8(200), "test.i8": int8(-100), "test.u16": uint16(60000), "test.i16": int16(-30000),
		"test.u32": uint32(4000000000), "test.i32": int32(-2000000000), "test.u64": uint64(18000000000000000000),
		"test.i64": int64(-9000000000000000000), "test.f32": float32(0.1), "test.f64": 0.1, "test.bool": true,
		"test.string": "héllo ☃", "test.arr.u8": []uint8{1, 2, 255}, "test.arr.i16": []int16{-1, 2, -32768},
		"test.arr.u32": []uint32{7, 8, 9}, "test.arr.i32": []int32{-7, 8, -9}, "test.arr.u64": []uint64{1, 1<<63 + 5},
		"test.arr.f32": []float32{0.5, -1.25, 3}, "test.arr.f64": []float64{0.1, 0.2},
		"test.arr.bool": []bool{true, false, true}, "test.arr.string": []string{"a", "", "ĠtheĊ"},
	}
	for k, w := range want {
		if got, ok := f.Value(k); !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %#v, want %#v", k, got, w)
		}
	}
	// typed getters and their conversions
	if v, ok := f.Uint("test.u8"); !ok || v != 200 {
		t.Errorf("Uint(u8) = %v %v", v, ok)
	}
	if _, ok := f.Uint("test.i8"); ok {
		t.Error("Uint accepted a negative value")
	}
	if v, ok := f.Uint("test.bool"); !ok || v != 1 {
		t.Errorf("Uint(bool) = %v %v", v, ok)
	}
	if v, ok := f.Int("test.i64"); !ok || v != -9000000000000000000 {
		t.Errorf("Int(i64) = %v %v", v, ok)
	}
	if _, ok := f.Int("test.u64"); ok {
		t.Error("Int accepted a uint64 above MaxInt64")
	}
	if v, ok := f.Float("test.u32"); !ok || v != 4e9 {
		t.Errorf("Float(u32) = %v %v", v, ok)
	}
	if v, ok := f.Float("test.f32"); !ok || float32(v) != 0.1 {
		t.Errorf("Float(f32) = %v %v", v, ok)
	}
	if _, ok := f.Float("test.string"); ok {
		t.Error("Float accepted a string")
	}
	if v, ok := f.Ints("test.arr.i16"); !ok || !reflect.DeepEqual(v, []int64{-1, 2, -32768}) {
		t.Errorf("Ints(i16) = %v %v", v, ok)
	}
	if _, ok := f.Ints("test.arr.u64"); ok {
		t.Error("Ints accepted a uint64 above MaxInt64")
	}
	if v, ok := f.Floats("test.arr.f64"); !ok || !reflect.DeepEqual(v, []float32{0.1, 0.2}) {
		t.Errorf("Floats(f64) = %v %v", v, ok)
	}
	if v, ok := f.Floats("test.arr.u32"); !ok || !reflect.DeepEqual(v, []float32{7, 8, 9}) {
		t.Errorf("Floats(u32) = %v %v", v, ok)
	}
	if _, ok := f.Strings("test.arr.i32"); ok {
		t.Error("Strings accepted an int array")
	}
	if _, ok := f.String("missing"); ok {
		t.Error("missing key found")
	}
	if b, ok := f.Bool("test.bool"); !ok || !b {
		t.Errorf("Bool = %v %v", b, ok)
	}
	s, _ := f.Strings("test.arr.string")
	s[0] = "mutated"
	if s2, _ := f.Strings("test.arr.string"); s2[0] != "a" {
		t.Error("Strings returned the internal slice")
	}
}

// rawTensor is a tensor info written verbatim, for crafting bad files.
type rawTensor struct {
	name   string
	dims   []uint64
	typ    uint32
	offset uint64
}

// craft builds a GGUF byte image with arbitrary (possibly invalid) fields.
func craft(version uint32, kv []KV, tensors []rawTensor, align uint64, dataLen int) []byte {
	var e encoder
	e.raw([]byte(Magic))
	e.u32(version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kv)))
	for _, x := range kv {
		e.str(x.Key)
		if err := e.value(x.Value, true); err != nil {
			panic(err)
		}
	}
	for _, ti := range tensors {
		e.str(ti.name)
		e.u32(uint32(len(ti.dims)))
		for _, d := range ti.dims {
			e.u64(d)
		}
		e.u32(ti.typ)
		e.u64(ti.offset)
	}
	e.raw(make([]byte, alignUp(uint64(len(e.b)), align)-uint64(len(e.b))))
	e.raw(make([]byte, dataLen))
	return e.b
}

func validFile(t testing.TB) []byte {
	var buf bytes.Buffer
	kv := []KV{{"general.architecture", "llama"}, {"tokenizer.ggml.tokens", []string{"a", "b", "c"}},
		{"x.scores", []float32{1, 2, 3}}, {"x.nested", []any{[]int32{1}}}}
	tensors := []WriteTensor{
		{Name: "a", Dims: []uint64{32, 2}, Type: Q8_0, Data: make([]byte, 68)},
		{Name: "b", Dims: []uint64{4}, Type: F32, Data: make([]byte, 16)},
		{Name: "c", Dims: []uint64{256}, Type: Q4_K, Data: make([]byte, 144)},
	}
	if err := Write(&buf, kv, tensors); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestOpenTruncated(t *testing.T) {
	b := validFile(t)
	f, err := OpenBytes("x", b)
	if err != nil {
		t.Fatal(err)
	}
	last := f.Tensors[len(f.Tensors)-1]
	dataEnd := int(f.DataOffset() + last.Offset + last.Bytes())
	for n := 0; n < len(b); n++ {
		_, err := OpenBytes("cut.gguf", b[:n])
		if n >= dataEnd { // only trailing padding is missing: still readable
			if err != nil {
				t.Errorf("cut at %d (after all data): %v", n, err)
			}
			continue
		}
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Path != "cut.gguf" || !strings.Contains(err.Error(), "cut.gguf") {
			t.Fatalf("cut at %d: error %v is not a FormatError naming the file", n, err)
		}
	}
	// through the file system too
	path := filepath.Join(t.TempDir(), "short.gguf")
	if err := os.WriteFile(path, b[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("Open(truncated) = %v", err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("Open(empty) = %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.gguf")); err == nil || !strings.Contains(err.Error(), "missing.gguf") {
		t.Errorf("Open(missing) = %v", err)
	}
}

func TestOpenBadInput(t *testing.T) {
	q8 := func(name string, off uint64) rawTensor { return rawTensor{name, []uint64{32}, uint32(Q8_0), off} }
	u64 := func(b []byte, at int, v uint64) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint64(c[at:], v)
		return c
	}
	good := craft(3, nil, []rawTensor{q8("a", 0)}, 32, 64)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"bad magic", append([]byte("GGML"), good[4:]...), "bad magic"},
		{"tiny", []byte("GG"), "bad magic"},
		{"version 1", craft(1, nil, nil, 32, 0), "version 1 is not supported"},
		{"version 4", craft(4, nil, nil, 32, 0), "unsupported GGUF version 4"},
		{"big endian", craft(3<<24, nil, nil, 32, 0), "big-endian"},
		{"huge tensor count", u64(good, 8, 1<<60), "tensor count"},
		{"huge kv count", u64(good, 16, math.MaxUint64), "key/value count"},
		{"huge key length", u64(craft(3, []KV{{"k", uint8(1)}}, nil, 32, 0), 24, 1<<62), "length"},
		{"huge array", u64(craft(3, []KV{{"k", []uint32{1}}}, nil, 32, 0), 24+8+1+4+4, 1<<61), "array length"},
		{"huge string array", u64(craft(3, []KV{{"k", []string{"a"}}}, nil, 32, 0), 24+8+1+4+4, 1<<40), "array length"},
		{"bad value type", patch32(craft(3, []KV{{"k", uint8(1)}}, nil, 32, 0), 24+8+1, 99), "unknown value type 99"},
		{"bad elem type", patch32(craft(3, []KV{{"k", []uint8{1}}}, nil, 32, 0), 24+8+1+4, 42), "unknown array element type"},
		{"bad bool", patchByte(craft(3, []KV{{"k", true}}, nil, 32, 0), 24+8+1+4, 7), "neither 0 nor 1"},
		{"deep nesting", craft(3, []KV{{"k", nest(10)}}, nil, 32, 0), "nested deeper"},
		{"duplicate key", craft(3, []KV{{"k", uint8(1)}, {"k", uint8(2)}}, nil, 32, 0), `duplicate metadata key "k"`},
		{"alignment zero", craft(3, []KV{{"general.alignment", uint32(0)}}, nil, 32, 0), "general.alignment"},
		{"alignment not pow2", craft(3, []KV{{"general.alignment", uint32(24)}}, nil, 32, 0), "power of two"},
		{"alignment string", craft(3, []KV{{"general.alignment", "32"}}, nil, 32, 0), "general.alignment"},
		{"alignment huge", craft(3, []KV{{"general.alignment", uint64(1) << 40}}, nil, 32, 0), "general.alignment"},
		{"too many dims", craft(3, nil, []rawTensor{{"t", []uint64{1, 1, 1, 1, 1}, 0, 0}}, 32, 4), "5 dimensions"},
		{"dims overflow", craft(3, nil, []rawTensor{{"t", []uint64{1 << 40, 1 << 40}, 0, 0}}, 32, 4), "overflow"},
		{"offset unaligned", craft(3, nil, []rawTensor{q8("t", 8)}, 32, 64), "not a multiple of the alignment"},
		{"row not block multiple", craft(3, nil, []rawTensor{{"t", []uint64{33}, uint32(Q8_0), 0}}, 32, 64), "block size"},
		{"data past end", craft(3, nil, []rawTensor{q8("t", 0)}, 32, 33), "extends past the end"},
		{"offset past end", craft(3, nil, []rawTensor{q8("t", 1<<62)}, 32, 64), "extends past the end"},
		{"offset overflow", craft(3, nil, []rawTensor{q8("t", math.MaxUint64-31)}, 32, 64), "extends past the end"},
		{"overlap", craft(3, nil, []rawTensor{q8("a", 0), q8("b", 32)}, 32, 128), "overlap"},
		{"duplicate tensor", craft(3, nil, []rawTensor{q8("a", 0), q8("a", 64)}, 32, 128), `duplicate tensor name "a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenBytes("bad.gguf", c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.gguf") {
				t.Errorf("error %v, want one naming bad.gguf and containing %q", err, c.want)
			}
		})
	}
	if _, err := OpenBytes("good", good); err != nil {
		t.Errorf("control file rejected: %v", err)
	}
	// version 2 is accepted, and alignment is honoured
	v2 := craft(2, []KV{{"general.alignment", uint32(128)}}, []rawTensor{q8("a", 0), q8("b", 128)}, 128, 256)
	f, err := OpenBytes("v2", v2)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || f.Alignment != 128 || f.DataOffset()%128 != 0 {
		t.Errorf("v2: version %d alignment %d data %d", f.Version, f.Alignment, f.DataOffset())
	}
}

func TestUnknownTensorType(t *testing.T) {
	b := craft(3, nil, []rawTensor{{"w", []uint64{32}, 23, 0}, {"n", []uint64{8}, uint32(F32), 0}}, 32, 64)
	f, err := OpenBytes("unk.gguf", b)
	if err != nil {
		t.Fatalf("Open rejected a file with an unknown tensor type: %v", err)
	}
	ti, _ := f.Tensor("w")
	if _, err := f.TensorData(ti); err == nil || !strings.Contains(err.Error(), `"w"`) || !strings.Contains(err.Error(), "type(23)") {
		t.Errorf("TensorData: %v", err)
	}
	if err := f.Validate(nil); err == nil || !strings.Contains(err.Error(), "w (type(23))") {
		t.Errorf("Validate: %v", err)
	}
	n, _ := f.Tensor("n")
	if _, err := f.TensorData(n); err != nil {
		t.Errorf("known tensor next to unknown one: %v", err)
	}
	f.Close()
	if _, err := f.TensorData(n); err == nil {
		t.Error("TensorData after Close succeeded")
	}
}

func patch32(b []byte, at int, v uint32) []byte {
	binary.LittleEndian.PutUint32(b[at:], v)
	return b
}

func patchByte(b []byte, at int, v byte) []byte {
	b[at] = v
	return b
}

func nest(depth int) any {
	var v any = []uint8{1}
	for i := 0; i < depth; i++ {
		v = []any{v}
	}
	return v
}

func FuzzOpen(f *testing.F) {
	for _, name := range []string{"types.gguf", "written.gguf"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add(validFile(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := OpenBytes("fuzz.gguf", b)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.gguf") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, k := range g.Keys() {
			g.String(k)
			g.Uint(k)
			g.Int(k)
			g.Float(k)
			g.Bool(k)
			g.Strings(k)
			g.Ints(k)
			g.Floats(k)
		}
		_ = g.Validate(nil)
		for _, ti := range g.Tensors {
			raw, err := g.TensorData(ti)
			if err != nil || ti.Elements() > 1<<16 || !DequantizeSupported(ti.Type) {
				continue
			}
			if err := Dequantize(ti.Type, raw, make([]float32, ti.Elements())); err != nil {
				t.Fatalf("dequantize %s: %v", ti.Name, err)
			}
		}
	})
}
