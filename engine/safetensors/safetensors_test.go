package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// build returns a safetensors file of the given header JSON and data.
func build(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

// encode writes a valid file of F32 tensors in order.
func encode(t testing.TB, tensors map[string][]float32, order []string) []byte {
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, n := range order {
		v := tensors[n]
		start := len(data)
		for _, x := range v {
			data = binary.LittleEndian.AppendUint32(data, uint32(int32(x)))
		}
		hdr[n] = map[string]any{"dtype": "F32", "shape": []int{len(v)}, "data_offsets": []int{start, len(data)}}
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	return build(string(js), data)
}

func TestParseValid(t *testing.T) {
	b := encode(t, map[string][]float32{"a": {1, 2, 3}, "b": {4}}, []string{"a", "b"})
	f, err := Parse("x.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 2 || f.Metadata["format"] != "pt" {
		t.Fatalf("tensors %+v metadata %v", f.Tensors, f.Metadata)
	}
	a, ok := f.Tensor("a")
	if !ok || a.Elements() != 3 || a.DType != F32 {
		t.Fatalf("a = %+v", a)
	}
	d, err := f.Data(a)
	if err != nil || len(d) != 12 {
		t.Fatalf("data %d bytes, %v", len(d), err)
	}
	// a scalar and an empty tensor are valid
	if _, err := Parse("s", build(`{"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"e":{"dtype":"F16","shape":[0,4],"data_offsets":[2,2]}}`, make([]byte, 2))); err != nil {
		t.Fatal(err)
	}
}

func TestParseRejects(t *testing.T) {
	long := make([]byte, 16)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "too short"},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), "over the"},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 100), "truncated"},
		{"not json", build(`{"a":`, nil), "not a JSON object"},
		{"array", build(`[1]`, nil), "not a JSON object"},
		{"unknown dtype", build(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`, long), `unknown dtype "Q4"`},
		{"missing fields", build(`{"a":{"dtype":"F32"}}`, long), "needs dtype, shape and data_offsets"},
		{"size mismatch", build(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}}`, long), "dtype/shape mismatch"},
		{"past end", build(`{"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}`, long), "truncated"},
		{"reversed", build(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}`, long), "end before they begin"},
		{"negative dim", build(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, long), "non-negative integer"},
		{"float dim", build(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, long), "non-negative integer"},
		{"overflow", build(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, long), "overflows"},
		{"huge number", build(`{"a":{"dtype":"U8","shape":[99999999999999999999999],"data_offsets":[0,1]}}`, long), "too large"},
		{"overlap", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, long), "overlap"},
		{"too many dims", build(`{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}`, long), "dimensions"},
		{"bad metadata", build(`{"__metadata__":{"a":1}}`, nil), "__metadata__"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.safetensors", c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.safetensors") {
				t.Fatalf("err = %v, want one naming the file and %q", err, c.want)
			}
		})
	}
}

func TestOpenTruncatedShard(t *testing.T) {
	b := encode(t, map[string][]float32{"w": make([]float32, 64)}, []string{"w"})
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, b[:len(b)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(p)
	if err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("err = %v", err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := f.Tensor("w")
	if d, err := f.Data(w); err != nil || len(d) != 256 {
		t.Fatalf("%d %v", len(d), err)
	}
	f.Close()
	if _, err := f.Data(w); err == nil {
		t.Fatal("data after Close")
	}
}

func TestParseIndex(t *testing.T) {
	ix, err := ParseIndex("i.json", []byte(`{"metadata":{"total_size":8},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors","c":"m-1.safetensors"}}`))
	if err != nil || len(ix.Shards) != 2 || ix.WeightMap["b"] != "m-2.safetensors" {
		t.Fatalf("%+v %v", ix, err)
	}
	for _, c := range []struct{ js, want string }{
		{`{`, "not valid JSON"},
		{`{"weight_map":{}}`, "missing or empty"},
		{`{"weight_map":{"a":"../x.safetensors"}}`, "plain file name"},
		{`{"weight_map":{"a":"/etc/passwd"}}`, "plain file name"},
		{`{"weight_map":{"a":"sub/x"}}`, "plain file name"},
		{`{"weight_map":{"a":".."}}`, "plain file name"},
		{`{"weight_map":{"a":3}}`, "not valid JSON"},
	} {
		if _, err := ParseIndex("i.json", []byte(c.js)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.js, err, c.want)
		}
	}
}

// FuzzParse feeds arbitrary bytes to the header parser: it must never
// panic, and every tensor it accepts must lie inside the data.
func FuzzParse(f *testing.F) {
	f.Add(encode(f, map[string][]float32{"a": {1, 2}, "b": {3}}, []string{"a", "b"}))
	f.Add(build(`{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`, make([]byte, 12)))
	f.Add(build(`{"a":{"dtype":"F8_E4M3","shape":[],"data_offsets":[0,1]},"__metadata__":{}}`, make([]byte, 1)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Parse("fuzz", b)
		if err != nil {
			return
		}
		for _, tn := range st.Tensors {
			d, err := st.Data(tn)
			if err != nil {
				t.Fatalf("accepted tensor %q has no data: %v", tn.Name, err)
			}
			if uint64(len(d)) != tn.Elements()*uint64(tn.DType.Size()) {
				t.Fatalf("tensor %q: %d bytes for %v %s", tn.Name, len(d), tn.Shape, tn.DType)
			}
		}
	})
}

// FuzzParseIndex: no panic; every accepted shard is a plain file name.
func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../../x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := ParseIndex("fuzz", b)
		if err != nil {
			return
		}
		for _, s := range ix.Shards {
			if filepath.Base(s) != s || s == ".." || strings.ContainsAny(s, `/\`) {
				t.Fatalf("accepted shard %q", s)
			}
		}
	})
}

// TestReleaseRange: a parsed (heap) file gives nothing back and keeps its
// bytes; an opened one gives back the whole pages of a tensor on Linux, and
// the tensor reads back the same; a range past the data is refused.
func TestReleaseRange(t *testing.T) {
	big := make([]float32, 5*os.Getpagesize()/4)
	for i := range big {
		big[i] = float32(i % 1000)
	}
	b := encode(t, map[string][]float32{"a": {1, 2, 3}, "big": big}, []string{"a", "big"})
	pf, err := Parse("x.safetensors", b)
	if err != nil {
		t.Fatal(err)
	}
	bt, _ := pf.Tensor("big")
	want, _ := pf.Data(bt)
	want = append([]byte(nil), want...)
	if n, err := pf.ReleaseRange(bt.Begin, bt.End); n != 0 || err != nil {
		t.Fatalf("parsed file: ReleaseRange = %d, %v; want 0, nil", n, err)
	}
	if got, _ := pf.Data(bt); string(got) != string(want) {
		t.Fatal("parsed file: tensor changed by ReleaseRange")
	}

	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReleaseRange(0, bt.End+1); err == nil {
		t.Error("a range past the data: no error")
	}
	n, err := f.ReleaseRange(bt.Begin, bt.End)
	if err != nil {
		t.Fatal(err)
	}
	if wantN := 4 * os.Getpagesize(); runtime.GOOS == "linux" && n < wantN {
		t.Errorf("opened file: released %d bytes, want at least %d (the whole pages of %d)", n, wantN, len(want))
	}
	if got, _ := f.Data(bt); string(got) != string(want) {
		t.Fatal("opened file: tensor reads back different bytes after ReleaseRange")
	}
	f.Close()
	if _, err := f.ReleaseRange(bt.Begin, bt.End); err != nil {
		t.Errorf("closed file: ReleaseRange: %v", err)
	}
}
