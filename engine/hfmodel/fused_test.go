package hfmodel_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/safetensors"
)

type stTensor struct {
	dtype safetensors.DType
	shape []uint64
	data  []byte
}

func writeSafetensors(t *testing.T, path string, ts map[string]stTensor) {
	t.Helper()
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	hdr := map[string]any{}
	var data []byte
	for _, n := range names {
		x := ts[n]
		hdr[n] = map[string]any{"dtype": x.dtype, "shape": x.shape, "data_offsets": []int{len(data), len(data) + len(x.data)}}
		data = append(data, x.data...)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	if err := os.WriteFile(path, append(append(out, js...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFusedExperts: experts stored fused (mlp.experts.gate_up_proj
// [E, 2ff, D], mlp.experts.down_proj [E, D, ff], as transformers 5 keeps
// them in memory and some exports save them) give the same GGUF tensors
// as experts stored one by one.
func TestFusedExperts(t *testing.T) {
	d := copyDir(t, "qwen35moe")
	p := filepath.Join(d, "model.safetensors")
	st, err := safetensors.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	ts := map[string]stTensor{}
	for _, x := range st.Tensors {
		b, _ := st.Data(x)
		ts[x.Name] = stTensor{x.DType, x.Shape, bytes.Clone(b)}
	}
	st.Close()
	const E, ff, D = 4, 8, 16
	for l := 0; l < 4; l++ {
		pre := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
		var gu, down []byte
		for e := 0; e < E; e++ {
			for _, w := range []string{"gate_proj", "up_proj"} {
				gu = append(gu, ts[fmt.Sprintf("%s%d.%s.weight", pre, e, w)].data...)
			}
			down = append(down, ts[fmt.Sprintf("%s%d.down_proj.weight", pre, e)].data...)
			for _, w := range []string{"gate_proj", "up_proj", "down_proj"} {
				delete(ts, fmt.Sprintf("%s%d.%s.weight", pre, e, w))
			}
		}
		ts[pre+"gate_up_proj"] = stTensor{safetensors.F32, []uint64{E, 2 * ff, D}, gu}
		ts[pre+"down_proj"] = stTensor{safetensors.F32, []uint64{E, D, ff}, down}
	}
	writeSafetensors(t, p, ts)
	f, err := hfmodel.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := hfmodel.Open(filepath.Join("testdata", "qwen35moe"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, ti := range g.Tensors {
		fi, ok := f.Tensor(ti.Name)
		if !ok || fmt.Sprint(fi.Dims) != fmt.Sprint(ti.Dims) || fi.Type != ti.Type {
			t.Fatalf("%s: fused %+v, per expert %+v", ti.Name, fi, ti)
		}
		a, err1 := f.TensorData(fi)
		b, err2 := g.TensorData(ti)
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs (%v, %v)", ti.Name, err1, err2)
		}
	}
}
