package synth

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// wantHybridTensors is the tensor list of a qwen35/qwen35moe model written
// out from the background doc's table (§2.2) and llama.cpp's
// load_arch_tensors, independently of hybridPlan: name -> ggml dims.
func wantHybridTensors(s Spec) map[string][]uint64 {
	u := func(v ...int) []uint64 {
		out := make([]uint64, len(v))
		for i, x := range v {
			out[i] = uint64(x)
		}
		return out
	}
	m := s.SSM
	hk, hv, d := m.KeyHeads, m.ValueHeads, m.HeadDim
	want := map[string][]uint64{
		"token_embd.weight":  u(s.Dim, s.Vocab),
		"output_norm.weight": u(s.Dim),
	}
	if !s.Tied {
		want["output.weight"] = u(s.Dim, s.Vocab)
	}
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		want[b+"attn_norm.weight"] = u(s.Dim)
		want[b+"post_attention_norm.weight"] = u(s.Dim)
		if (l+1)%m.FullAttnEvery != 0 {
			want[b+"attn_qkv.weight"] = u(s.Dim, 2*hk*d+hv*d)
			want[b+"attn_gate.weight"] = u(s.Dim, hv*d)
			want[b+"ssm_beta.weight"] = u(s.Dim, hv)
			want[b+"ssm_alpha.weight"] = u(s.Dim, hv)
			want[b+"ssm_conv1d.weight"] = u(m.ConvKernel, 2*hk*d+hv*d)
			want[b+"ssm_dt.bias"] = u(hv)
			want[b+"ssm_a"] = u(hv)
			want[b+"ssm_norm.weight"] = u(d)
			want[b+"ssm_out.weight"] = u(hv*d, s.Dim)
		} else {
			want[b+"attn_q.weight"] = u(s.Dim, 2*s.Heads*s.HeadDim)
			want[b+"attn_k.weight"] = u(s.Dim, s.KVHeads*s.HeadDim)
			want[b+"attn_v.weight"] = u(s.Dim, s.KVHeads*s.HeadDim)
			want[b+"attn_q_norm.weight"] = u(s.HeadDim)
			want[b+"attn_k_norm.weight"] = u(s.HeadDim)
			want[b+"attn_output.weight"] = u(s.Heads*s.HeadDim, s.Dim)
		}
		if s.Arch == "qwen35moe" {
			want[b+"ffn_gate_inp.weight"] = u(s.Dim, s.Experts)
			want[b+"ffn_gate_exps.weight"] = u(s.Dim, s.ExpertFF, s.Experts)
			want[b+"ffn_up_exps.weight"] = u(s.Dim, s.ExpertFF, s.Experts)
			want[b+"ffn_down_exps.weight"] = u(s.ExpertFF, s.Dim, s.Experts)
			want[b+"ffn_gate_inp_shexp.weight"] = u(s.Dim, 1)
			want[b+"ffn_gate_shexp.weight"] = u(s.Dim, s.SharedFF)
			want[b+"ffn_up_shexp.weight"] = u(s.Dim, s.SharedFF)
			want[b+"ffn_down_shexp.weight"] = u(s.SharedFF, s.Dim)
		} else {
			want[b+"ffn_gate.weight"] = u(s.Dim, s.FF)
			want[b+"ffn_up.weight"] = u(s.Dim, s.FF)
			want[b+"ffn_down.weight"] = u(s.FF, s.Dim)
		}
	}
	return want
}

// f32Tensor reports whether llama.cpp's converter stores the tensor as F32
// whatever --outtype says: 1-D tensors, norms, conv, router, shexp gate.
func f32Tensor(name string, dims []uint64) bool {
	return len(dims) == 1 || strings.HasSuffix(name, "norm.weight") || strings.Contains(name, "ssm_conv1d") ||
		strings.HasSuffix(name, "ffn_gate_inp.weight") || strings.HasSuffix(name, "ffn_gate_inp_shexp.weight")
}

func checkHybridTensors(t *testing.T, spec Spec, got []gguf.TensorInfo) {
	t.Helper()
	want := wantHybridTensors(spec)
	seen := map[string]bool{}
	for _, ti := range got {
		w, ok := want[ti.Name]
		if !ok {
			t.Errorf("unexpected tensor %s", ti.Name)
			continue
		}
		seen[ti.Name] = true
		if !slices.Equal(ti.Dims, w) {
			t.Errorf("%s: dims %v, want %v", ti.Name, ti.Dims, w)
		}
		if f32Tensor(ti.Name, ti.Dims) != (ti.Type == gguf.F32) && spec.WeightType != gguf.F32 {
			t.Errorf("%s is %s", ti.Name, ti.Type)
		}
		if ti.Type != gguf.F32 && ti.Type != matrixType(spec.WeightType, int(ti.Dims[0])) {
			t.Errorf("%s is %s, want %s", ti.Name, ti.Type, matrixType(spec.WeightType, int(ti.Dims[0])))
		}
	}
	for n := range want {
		if !seen[n] {
			t.Errorf("missing tensor %s", n)
		}
	}
}

func checkHybridKeys(t *testing.T, f *gguf.File, spec Spec) {
	t.Helper()
	a := spec.Arch + "."
	m := spec.SSM
	for key, want := range map[string]uint64{
		"block_count": uint64(spec.Layers), "embedding_length": uint64(spec.Dim),
		"attention.head_count": uint64(spec.Heads), "attention.head_count_kv": uint64(spec.KVHeads),
		"attention.key_length": uint64(spec.HeadDim), "attention.value_length": uint64(spec.HeadDim),
		"rope.dimension_count": uint64(spec.RopeDims), "context_length": uint64(spec.Context),
		"ssm.conv_kernel": uint64(m.ConvKernel), "ssm.state_size": uint64(m.HeadDim),
		"ssm.group_count": uint64(m.KeyHeads), "ssm.time_step_rank": uint64(m.ValueHeads),
		"ssm.inner_size": uint64(m.ValueHeads * m.HeadDim), "full_attention_interval": uint64(m.FullAttnEvery),
	} {
		v, ok := f.Value(a + key)
		if _, isU32 := v.(uint32); !ok || !isU32 {
			t.Errorf("%s%s = %v (%T), want uint32 %d", a, key, v, v, want)
		} else if got, _ := f.Uint(a + key); got != want {
			t.Errorf("%s%s = %d, want %d", a, key, got, want)
		}
	}
	if v, _ := f.Value(a + "rope.dimension_sections"); !reflect.DeepEqual(v, spec.RopeSections[:]) {
		t.Errorf("rope.dimension_sections = %#v", v)
	}
	rec, _ := f.Value(a + "attention.recurrent_layers")
	flags, ok := rec.([]bool)
	if !ok || len(flags) != spec.Layers {
		t.Fatalf("attention.recurrent_layers = %#v", rec)
	}
	for l, r := range flags {
		if r != ((l+1)%m.FullAttnEvery != 0) {
			t.Errorf("recurrent_layers[%d] = %v", l, r)
		}
	}
	_, hasFF := f.Value(a + "feed_forward_length")
	if hasFF != (spec.Arch == "qwen35") {
		t.Errorf("feed_forward_length present = %v for %s", hasFF, spec.Arch)
	}
	if spec.Arch == "qwen35moe" {
		for key, want := range map[string]uint64{"expert_count": uint64(spec.Experts), "expert_used_count": uint64(spec.ExpertsUsed),
			"expert_feed_forward_length": uint64(spec.ExpertFF), "expert_shared_feed_forward_length": uint64(spec.SharedFF)} {
			if got, _ := f.Uint(a + key); got != want {
				t.Errorf("%s = %d, want %d", key, got, want)
			}
		}
	}
	if pre, _ := f.String("tokenizer.ggml.pre"); pre != "qwen35" {
		t.Errorf("tokenizer.ggml.pre %q", pre)
	}
}

// checkHybridWeights dequantizes every tensor: all finite, ssm_a negative
// (-exp(A_log) in [-16, -1]), dt bias and conv in their init ranges.
func checkHybridWeights(t *testing.T, f *gguf.File) {
	t.Helper()
	lo, hi := 1e-3+math.Log(-math.Expm1(-1e-3)), 0.1+math.Log(-math.Expm1(-0.1))
	for _, ti := range f.Tensors {
		x := dequantTensor(t, f, ti)
		for _, v := range x {
			fv := float64(v)
			bad := math.IsNaN(fv) || math.IsInf(fv, 0)
			switch {
			case strings.HasSuffix(ti.Name, "ssm_a"):
				bad = bad || fv < -16.0001 || fv > -0.9999
			case strings.HasSuffix(ti.Name, "ssm_dt.bias"):
				bad = bad || fv < lo-1e-4 || fv > hi+1e-4
			case strings.Contains(ti.Name, "ssm_conv1d"):
				bad = bad || math.Abs(fv) > 0.5
			case strings.HasSuffix(ti.Name, "norm.weight"):
				bad = bad || math.Abs(fv-1) > 0.2
			default:
				bad = bad || math.Abs(fv) > 0.2
			}
			if bad {
				t.Fatalf("%s: value %v out of range", ti.Name, v)
			}
		}
	}
}

func TestHybridTinyPresets(t *testing.T) {
	for _, c := range []struct {
		preset string
		typ    gguf.Type
	}{{"qwen35moe-tiny", gguf.Q8_0}, {"qwen35moe-tiny", gguf.Q4_K}, {"qwen35-tiny", gguf.F16}} {
		t.Run(c.preset+"/"+c.typ.String(), func(t *testing.T) {
			spec, err := Preset(c.preset, c.typ)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := generate(t, c.preset, c.typ, 3)
			if arch, _ := f.String("general.architecture"); arch != spec.Arch {
				t.Fatalf("architecture %q", arch)
			}
			checkHybridTensors(t, spec, f.Tensors)
			checkHybridKeys(t, f, spec)
			checkHybridWeights(t, f)
			checkTokenizer(t, f, spec.Vocab)
		})
	}
}

// TestHybridPresetPlans checks the full-size plans against the numbers of
// the real models (background doc §1.2, §1.8; Qwen3-30B-A3B's 30.5B) without
// writing them.
func TestHybridPresetPlans(t *testing.T) {
	s, err := Preset("qwen3.6-35b-a3b", gguf.Q4_K)
	if err != nil {
		t.Fatal(err)
	}
	checkHybridTensors(t, s, s.Tensors())
	params := map[string]uint64{}
	var total, size uint64
	attn := 0
	for _, ti := range s.Tensors() {
		total += ti.Elements()
		size += ti.Bytes()
		var l int
		if _, err := fmt.Sscanf(ti.Name, "blk.%d.", &l); err == nil {
			kind := "gdn"
			if !s.Recurrent(l) {
				kind = "attn"
			}
			switch {
			case strings.Contains(ti.Name, "_exps"):
				kind = "experts"
			case strings.Contains(ti.Name, "ffn_") || strings.Contains(ti.Name, "_norm.weight") && !strings.Contains(ti.Name, "attn_q_norm") && !strings.Contains(ti.Name, "attn_k_norm") && !strings.Contains(ti.Name, "ssm_norm"):
				kind = "other"
			}
			params[kind] += ti.Elements()
			if ti.Name == fmt.Sprintf("blk.%d.attn_q.weight", l) {
				attn++
			}
		}
	}
	if attn != 10 {
		t.Errorf("%d attention blocks, want 10", attn)
	}
	if want := uint64(256 * 3 * 2048 * 512 * 40); params["experts"] != want {
		t.Errorf("expert params %d, want %d", params["experts"], want)
	}
	// GDN per block: qkv 2048x8192, gate 2048x4096, beta+alpha 2x2048x32,
	// conv 4x8192, dt+a 2x32, norm 128, out 4096x2048 (§1.8: 33.7M).
	if want := uint64(30 * (2048*8192 + 2048*4096 + 2*2048*32 + 4*8192 + 2*32 + 128 + 4096*2048)); params["gdn"] != want {
		t.Errorf("GDN params %d, want %d", params["gdn"], want)
	}
	// attention per block: q(+gate) 2048x8192, k,v 2048x512, norms 2x256, o 4096x2048 (§1.8: 27.3M).
	if want := uint64(10 * (2048*8192 + 2*2048*512 + 2*256 + 4096*2048)); params["attn"] != want {
		t.Errorf("attention params %d, want %d", params["attn"], want)
	}
	t.Logf("qwen3.6-35b-a3b: %.3fB params, %.2f GiB at Q4_K", float64(total)/1e9, float64(size)/(1<<30))
	if total < 34.5e9 || total > 35.5e9 {
		t.Errorf("qwen3.6-35b-a3b has %d params", total)
	}

	s9, err := Preset("qwen3.5-9b", gguf.Q4_K)
	if err != nil {
		t.Fatal(err)
	}
	checkHybridTensors(t, s9, s9.Tensors())
	total = 0
	for _, ti := range s9.Tensors() {
		total += ti.Elements()
	}
	t.Logf("qwen3.5-9b: %.3fB params", float64(total)/1e9)
	if total < 8.5e9 || total > 9.5e9 { // the text model of Qwen3.5-9B: 8.95B in its GGUFs
		t.Errorf("qwen3.5-9b has %d params", total)
	}

	q3, err := Preset("qwen3-30b-a3b", gguf.Q4_K)
	if err != nil {
		t.Fatal(err)
	}
	total, size = 0, 0
	for _, ti := range q3.Tensors() {
		total += ti.Elements()
		size += ti.Bytes()
	}
	t.Logf("qwen3-30b-a3b: %.3fB params, %.2f GiB at Q4_K", float64(total)/1e9, float64(size)/(1<<30))
	if total < 30.4e9 || total > 30.6e9 { // published: 30.5B
		t.Errorf("qwen3-30b-a3b has %d params", total)
	}
	if n := len(q3.Tensors()); n != 48*12+3 { // 12 per block: norms, q/k/v/o, q/k norms, router, 3 expert stacks
		t.Errorf("qwen3-30b-a3b: %d tensors", n)
	}
}

// TestHybridMatchesConverter compares the plan and keys of a spec shaped
// like engine/model/testdata/tiny_qwen35moe.gguf (written by llama.cpp's
// own convert_hf_to_gguf.py, scripts/qwen35_fixtures.py) with that file:
// same tensor names, dims and F32-ness, same arch keys and value types.
func TestHybridMatchesConverter(t *testing.T) {
	for _, name := range []string{"tiny_qwen35moe", "tiny_qwen35"} {
		t.Run(name, func(t *testing.T) {
			path := "../../model/testdata/" + name + ".gguf"
			if _, err := os.Stat(path); err != nil {
				t.Skip("fixture absent:", err)
			}
			real, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer real.Close()
			arch, _ := real.String("general.architecture")
			g := func(k string) int { v, _ := real.Uint(arch + "." + k); return int(v) }
			emb, _ := real.Tensor("token_embd.weight")
			secs, _ := real.Ints(arch + ".rope.dimension_sections")
			_, hasOut := real.Tensor("output.weight")
			spec := Spec{Name: "x", Arch: arch, Layers: g("block_count"), Dim: g("embedding_length"), FF: g("feed_forward_length"),
				Heads: g("attention.head_count"), KVHeads: g("attention.head_count_kv"), HeadDim: g("attention.key_length"),
				Vocab: int(emb.Dims[1]), Context: g("context_length"), Tied: !hasOut, RopeBase: 1e7, RMSEps: 1e-6, TokenizerPre: "qwen35",
				Experts: g("expert_count"), ExpertsUsed: g("expert_used_count"), ExpertFF: g("expert_feed_forward_length"),
				SharedFF: g("expert_shared_feed_forward_length"), RopeDims: g("rope.dimension_count"),
				SSM:        &SSM{ConvKernel: g("ssm.conv_kernel"), KeyHeads: g("ssm.group_count"), ValueHeads: g("ssm.time_step_rank"), HeadDim: g("ssm.state_size"), FullAttnEvery: g("full_attention_interval")},
				WeightType: gguf.F16,
			}
			for i := range min(4, len(secs)) {
				spec.RopeSections[i] = int32(secs[i])
			}
			if spec.SSM.ValueHeads*spec.SSM.HeadDim != g("ssm.inner_size") {
				t.Fatalf("fixture inner size %d", g("ssm.inner_size"))
			}
			plan := map[string]gguf.TensorInfo{}
			for _, ti := range spec.Tensors() {
				plan[ti.Name] = ti
			}
			if len(plan) != len(real.Tensors) {
				t.Errorf("%d planned tensors, converter wrote %d", len(plan), len(real.Tensors))
			}
			for _, rt := range real.Tensors {
				p, ok := plan[rt.Name]
				if !ok {
					t.Errorf("converter tensor %s not in the plan", rt.Name)
					continue
				}
				if !slices.Equal(p.Dims, rt.Dims) {
					t.Errorf("%s: plan dims %v, converter %v", rt.Name, p.Dims, rt.Dims)
				}
				if (p.Type == gguf.F32) != (rt.Type == gguf.F32) {
					t.Errorf("%s: plan %s, converter %s", rt.Name, p.Type, rt.Type)
				}
			}
			// Metadata needs the synth tokenizer's minimum vocabulary; only keys matter here.
			mspec := spec
			mspec.Vocab = max(spec.Vocab, baseVocabSize())
			kv, err := mspec.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			ours := map[string]any{}
			for _, e := range kv {
				if strings.HasPrefix(e.Key, arch+".") {
					ours[e.Key] = e.Value
				}
			}
			var missing []string
			for _, k := range real.Keys() {
				if !strings.HasPrefix(k, arch+".") {
					continue
				}
				v, ok := ours[k]
				if !ok {
					missing = append(missing, k)
					continue
				}
				rv, _ := real.Value(k)
				if reflect.TypeOf(rv) != reflect.TypeOf(v) {
					t.Errorf("%s: type %T, converter %T", k, v, rv)
				}
				delete(ours, k)
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("keys the converter writes and synth does not: %v", missing)
			}
			delete(ours, arch+".vocab_size") // synth's extra key, as for every arch
			if len(ours) > 0 {
				t.Errorf("keys synth writes and the converter does not: %v", ours)
			}
		})
	}
}
