package gguf

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// sampleKV has one entry of every value type, scalar and array.
func sampleKV() []KV {
	return []KV{
		{"general.architecture", "llama"},
		{"general.alignment", uint32(64)},
		{"t.u8", uint8(250)}, {"t.i8", int8(-5)}, {"t.u16", uint16(65000)}, {"t.i16", int16(-300)},
		{"t.u32", uint32(4e9)}, {"t.i32", int32(-2e9)}, {"t.u64", uint64(1) << 63}, {"t.i64", int64(-1) << 62},
		{"t.f32", float32(0.1)}, {"t.f64", 0.1}, {"t.bool", true}, {"t.str", "héllo\x00world"},
		{"t.empty", ""},
		{"t.a.u8", []uint8{1, 2, 3}}, {"t.a.i8", []int8{-1, 2}}, {"t.a.u16", []uint16{9}}, {"t.a.i16", []int16{-9, 9}},
		{"t.a.u32", []uint32{1, 2}}, {"t.a.i32", []int32{-1, -2}}, {"t.a.u64", []uint64{math.MaxUint64}},
		{"t.a.i64", []int64{math.MinInt64}}, {"t.a.f32", []float32{0.5, -2}}, {"t.a.f64", []float64{1e300}},
		{"t.a.bool", []bool{true, false}}, {"t.a.str", []string{"a", "", "ĠtheĊ"}},
		{"t.a.empty", []int32{}},
		{"t.a.nested", []any{[]int32{1, 2}, []string{"x"}, []any{[]bool{true}}}},
	}
}

func sampleTensors(t *testing.T) []WriteTensor {
	src := make([]float32, 512)
	for i := range src {
		src[i] = float32(math.Sin(float64(i))) * 0.1
	}
	var out []WriteTensor
	for _, typ := range []Type{F32, F16, Q8_0, Q4_K} {
		raw, err := Quantize(typ, src)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, WriteTensor{Name: "w." + typ.String(), Dims: []uint64{256, 2}, Type: typ, Data: raw})
	}
	out = append(out, WriteTensor{Name: "norm", Dims: []uint64{3}, Type: F32, Data: make([]byte, 12)})
	return out
}

func TestWriterRoundTrip(t *testing.T) {
	kv, tensors := sampleKV(), sampleTensors(t)
	var buf bytes.Buffer
	if err := Write(&buf, kv, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := OpenBytes("roundtrip", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 64 || f.DataOffset()%64 != 0 || len(buf.Bytes())%64 != 0 {
		t.Errorf("version %d alignment %d data offset %d size %d", f.Version, f.Alignment, f.DataOffset(), buf.Len())
	}
	var keys []string
	for _, e := range kv {
		keys = append(keys, e.Key)
		got, ok := f.Value(e.Key)
		if !ok || !reflect.DeepEqual(got, e.Value) {
			t.Errorf("%s: got %#v, want %#v", e.Key, got, e.Value)
		}
	}
	if !reflect.DeepEqual(f.Keys(), keys) {
		t.Errorf("keys %v", f.Keys())
	}
	if len(f.Tensors) != len(tensors) {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	for i, wt := range tensors {
		ti := f.Tensors[i]
		if ti.Name != wt.Name || ti.Type != wt.Type || !reflect.DeepEqual(ti.Dims, wt.Dims) || ti.Offset%64 != 0 {
			t.Errorf("tensor %d: %+v", i, ti)
		}
		raw, err := f.TensorData(ti)
		if err != nil || !bytes.Equal(raw, wt.Data) {
			t.Errorf("tensor %s data differs (%v)", wt.Name, err)
		}
	}
}

// TestWriterStreaming writes tensor data in odd-sized chunks spanning tensors.
func TestWriterStreaming(t *testing.T) {
	tensors := sampleTensors(t)
	var all []byte
	infos := make([]TensorInfo, len(tensors))
	for i, wt := range tensors {
		infos[i] = TensorInfo{Name: wt.Name, Dims: wt.Dims, Type: wt.Type}
		all = append(all, wt.Data...)
	}
	var want bytes.Buffer
	if err := Write(&want, nil, tensors); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	w, err := NewWriter(&got, nil, infos)
	if err != nil {
		t.Fatal(err)
	}
	for len(all) > 0 {
		n := min(len(all), 77)
		if _, err := w.Write(all[:n]); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Error("chunked write differs from whole-tensor write")
	}
	if _, err := w.Write([]byte{1}); err == nil {
		t.Error("write beyond the last tensor accepted")
	}
}

func TestWriterErrors(t *testing.T) {
	ti := []TensorInfo{{Name: "a", Dims: []uint64{32}, Type: Q8_0}}
	cases := []struct {
		name    string
		kv      []KV
		tensors []TensorInfo
		want    string
	}{
		{"dup key", []KV{{"a", uint8(1)}, {"a", uint8(2)}}, nil, "duplicate metadata key"},
		{"plain int", []KV{{"a", 5}}, nil, "unsupported value type"},
		{"nil", []KV{{"a", nil}}, nil, "unsupported value type"},
		{"map", []KV{{"a", map[string]int{}}}, nil, "unsupported value type"},
		{"bad nested", []KV{{"a", []any{uint8(1)}}}, nil, "must be a slice"},
		{"alignment", []KV{{"general.alignment", uint32(48)}}, nil, "power of two"},
		{"dup tensor", nil, append(ti, ti...), "duplicate tensor"},
		{"unknown type", nil, []TensorInfo{{Name: "x", Dims: []uint64{32}, Type: 77}}, "unknown type"},
		{"row", nil, []TensorInfo{{Name: "x", Dims: []uint64{31}, Type: Q8_0}}, "block size"},
		{"dims", nil, []TensorInfo{{Name: "x", Dims: []uint64{1, 1, 1, 1, 1}, Type: F32}}, "dims"},
	}
	for _, c := range cases {
		_, err := NewWriter(&bytes.Buffer{}, c.kv, c.tensors)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	w, err := NewWriter(&bytes.Buffer{}, nil, ti)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor(make([]byte, 33)); err == nil {
		t.Error("wrong tensor size accepted")
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `tensor "a"`) {
		t.Errorf("Close with a missing tensor: %v", err)
	}
}

// TestWriterGolden pins the writer's bytes and checks them against what the
// gguf Python reader saw in the same file (testdata/written_check.json, made
// by scripts/gguf_fixtures.py).
func TestWriterGolden(t *testing.T) {
	kv := []KV{
		{"general.architecture", "llama"}, {"general.alignment", uint32(64)},
		{"t.u8", uint8(250)}, {"t.i8", int8(-5)}, {"t.u16", uint16(65000)}, {"t.i16", int16(-300)},
		{"t.u32", uint32(4e9)}, {"t.i32", int32(-2e9)}, {"t.u64", uint64(1) << 63}, {"t.i64", int64(-1) << 62},
		{"t.f32", float32(0.1)}, {"t.f64", 0.1}, {"t.bool", true}, {"t.str", "héllo"},
		{"t.a.i32", []int32{-1, 2}}, {"t.a.f32", []float32{0.5, -2}}, {"t.a.str", []string{"a", "ĠtheĊ"}},
		{"t.a.bool", []bool{true, false}}, {"t.a.u64", []uint64{math.MaxUint64}},
	}
	tensors := sampleTensors(t)
	var buf bytes.Buffer
	if err := Write(&buf, kv, tensors); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "written.gguf")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("writer output differs from testdata/written.gguf (run with -update, then scripts/gguf_fixtures.py)")
	}

	jb, err := os.ReadFile(filepath.Join("testdata", "written_check.json"))
	if err != nil {
		t.Fatal(err)
	}
	var check struct {
		Alignment int64
		KV        map[string]struct {
			Types []string
			Value json.RawMessage
		}
		Tensors []struct {
			Name   string
			Type   string
			Shape  []uint64
			Offset int64
			Values []float64
		}
	}
	if err := json.Unmarshal(jb, &check); err != nil {
		t.Fatal(err)
	}
	if check.Alignment != 64 {
		t.Errorf("python alignment %d", check.Alignment)
	}
	f, err := OpenBytes(golden, want)
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := map[string]string{"t.u8": "UINT8", "t.i8": "INT8", "t.u16": "UINT16", "t.i16": "INT16",
		"t.u32": "UINT32", "t.i32": "INT32", "t.u64": "UINT64", "t.i64": "INT64", "t.f32": "FLOAT32",
		"t.f64": "FLOAT64", "t.bool": "BOOL", "t.str": "STRING", "t.a.i32": "ARRAY INT32",
		"t.a.f32": "ARRAY FLOAT32", "t.a.str": "ARRAY STRING", "t.a.bool": "ARRAY BOOL", "t.a.u64": "ARRAY UINT64"}
	if len(check.KV) != len(kv) {
		t.Errorf("python saw %d keys, wrote %d", len(check.KV), len(kv))
	}
	for _, e := range kv {
		pk, ok := check.KV[e.Key]
		if !ok {
			t.Errorf("python did not see %s", e.Key)
			continue
		}
		if wt, ok := wantTypes[e.Key]; ok && strings.Join(pk.Types, " ") != wt {
			t.Errorf("%s: python types %v, want %s", e.Key, pk.Types, wt)
		}
		// Decode python's JSON value into the Go type we wrote and compare.
		pv := reflect.New(reflect.TypeOf(e.Value))
		if err := json.Unmarshal(pk.Value, pv.Interface()); err != nil {
			t.Errorf("%s: python value %s: %v", e.Key, pk.Value, err)
			continue
		}
		if !reflect.DeepEqual(pv.Elem().Interface(), e.Value) {
			t.Errorf("%s: python read %v, wrote %v", e.Key, pv.Elem().Interface(), e.Value)
		}
	}
	if len(check.Tensors) != len(tensors) {
		t.Fatalf("python saw %d tensors", len(check.Tensors))
	}
	for i, pt := range check.Tensors {
		ti := f.Tensors[i]
		if pt.Name != ti.Name || pt.Type != ti.Type.String() || uint64(pt.Offset) != f.DataOffset()+ti.Offset {
			t.Errorf("python tensor %+v vs %+v (data offset %d)", pt, ti, f.DataOffset())
		}
		raw, _ := f.TensorData(ti)
		vals := make([]float32, ti.Elements())
		if err := Dequantize(ti.Type, raw, vals); err != nil {
			t.Fatal(err)
		}
		for j, v := range pt.Values {
			if float32(v) != vals[j] {
				t.Errorf("%s[%d]: python %v, go %v", ti.Name, j, v, vals[j])
			}
		}
	}
}
