package model_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/gguf/synth"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// nvfp4Tiny writes a tiny preset with NVFP4 matrices and their <name>.scale
// tensors (per tensor, per expert for the stacked experts).
func nvfp4Tiny(t *testing.T, preset string) []byte {
	t.Helper()
	spec, err := synth.Preset(preset, gguf.NVFP4)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := synth.WriteTo(&buf, spec, 7, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// dequantScaled turns every NVFP4 tensor into F32 with its second-level
// scale multiplied in, and drops the .scale tensors: the reference model.
func dequantScaled(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
	scales := map[string][]float32{}
	for _, x := range ts {
		if strings.HasSuffix(x.Name, ".scale") {
			v := make([]float32, len(x.Data)/4)
			for i := range v {
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
			}
			scales[x.Name] = v
		}
	}
	out := ts[:0:0]
	for _, x := range ts {
		if strings.HasSuffix(x.Name, ".scale") {
			continue
		}
		if x.Type == gguf.NVFP4 {
			n := 1
			for _, d := range x.Dims {
				n *= int(d)
			}
			v := make([]float32, n)
			if err := gguf.Dequantize(gguf.NVFP4, x.Data, v); err != nil {
				panic(err)
			}
			if s := scales[gguf.ScaleTensorName(x.Name)]; s != nil {
				group := n / len(s)
				for i := range v {
					v[i] *= s[i/group]
				}
			}
			x.Data, _ = gguf.Quantize(gguf.F32, v)
			x.Type = gguf.F32
		}
		out = append(out, x)
	}
	return kv, out
}

// TestNVFP4ModelMatchesDequantized runs the NVFP4 model (NVFP4 kernels,
// scales applied by the backend) against the same model with its weights
// dequantized and scaled into F32 by the test: the scales must be found,
// per tensor and per expert, and applied to the right rows.
func TestNVFP4ModelMatchesDequantized(t *testing.T) {
	for _, preset := range []string{"qwen35moe-tiny", "qwen35-tiny"} {
		t.Run(preset, func(t *testing.T) { nvfp4MatchesDequantized(t, preset) })
	}
}

func nvfp4MatchesDequantized(t *testing.T, preset string) {
	raw := nvfp4Tiny(t, preset)
	f, err := gguf.OpenBytes("nvfp4.gguf", raw)
	if err != nil {
		t.Fatal(err)
	}
	var nv, perExpert int
	for _, ti := range f.Tensors {
		if ti.Type != gguf.NVFP4 {
			continue
		}
		nv++
		st, ok := f.Tensor(gguf.ScaleTensorName(ti.Name))
		if !ok || st.Type != gguf.F32 {
			t.Fatalf("%s has no F32 scale tensor", ti.Name)
		}
		if len(ti.Dims) == 3 {
			perExpert++
			if st.Elements() != ti.Dims[2] {
				t.Errorf("%s: %d scales for %d experts", st.Name, st.Elements(), ti.Dims[2])
			}
		} else if st.Elements() != 1 {
			t.Errorf("%s: %d values, want 1", st.Name, st.Elements())
		}
	}
	if nv == 0 || (perExpert == 0) == (preset == "qwen35moe-tiny") {
		t.Fatalf("%d NVFP4 tensors, %d of them stacked experts", nv, perExpert)
	}
	m, _ := loadBytes(t, "nvfp4.gguf", raw, 2, true)
	ref, _ := loadBytes(t, "ref.gguf", editGGUF(t, raw, dequantScaled), 2, true)
	toks := [][]int32{{5, 77, 300, 2, 41, 41, 9, 150}}
	var out [2][]float32
	for i, mm := range []*model.Model{m, ref} {
		newHybridPool(t, mm, 4, 1, kvcache.BF16)
		out[i] = runHybrid(t, mm, []*hybridSession{{pages: []int32{0, 1, 2, 3}}}, toks)[0]
	}
	want := make([]float64, len(out[1]))
	for i, v := range out[1] {
		want[i] = float64(v)
	}
	V := m.Config.Vocab
	for r := 0; r < len(toks[0]); r++ {
		if e := maxRel(out[0][r*V:(r+1)*V], want[r*V:(r+1)*V]); e > 1e-4 {
			t.Errorf("row %d: NVFP4 vs dequantized logits differ by %.3g of the row max", r, e)
		}
	}
}

// scaleFree hides the CPU backend's LoadScaledWeight.
type scaleFree struct {
	model.Backend
	model.StateBackend
}

func TestNVFP4ScaleErrors(t *testing.T) {
	raw := nvfp4Tiny(t, "qwen35moe-tiny")
	const name = "blk.0.ffn_up_exps.scale"
	reshape := func(dims []uint64, typ gguf.Type) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == name {
					n := 1
					for _, d := range dims {
						n *= int(d)
					}
					ts[i].Dims, ts[i].Type, ts[i].Data = dims, typ, make([]byte, n*typ.BlockBytes())
				}
			}
			return kv, ts
		}
	}
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"3 scales for 8 experts", editGGUF(t, raw, reshape([]uint64{3}, gguf.F32)), "must be F32 of shape [1] or [8] (one per expert)"},
		{"2-D scale", editGGUF(t, raw, reshape([]uint64{4, 2}, gguf.F32)), "must be F32 of shape"},
		{"F16 scale", editGGUF(t, raw, reshape([]uint64{8}, gguf.F16)), "must be F32 of shape"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := gguf.OpenBytes("bad.gguf", c.file)
			if err != nil {
				t.Fatal(err)
			}
			be := cpu.New(cpu.Options{Threads: 1})
			defer be.Close()
			_, err = model.Load(f, be)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), name) {
				t.Fatalf("got %v, want an error naming %s with %q", err, name, c.want)
			}
		})
	}
	f, err := gguf.OpenBytes("nvfp4.gguf", raw)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	if _, err := model.Load(f, scaleFree{be, be}); err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Fatalf("a backend without ScaledLoader: got %v", err)
	}
}
