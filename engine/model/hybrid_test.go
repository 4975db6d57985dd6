package model_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// hybridSession is one sequence of a hybrid model: pages and a state slot.
type hybridSession struct {
	m      *model.Model
	pages  []int32
	slot   int
	cached int
}

// newHybridPool allocates a KV pool of pages pages and slots state slots.
func newHybridPool(t testing.TB, m *model.Model, pages, slots int, dt kvcache.DType) {
	t.Helper()
	if err := m.Backend().AllocKV(m.Config.KVLayout(testPage, pages, dt)); err != nil {
		t.Fatal(err)
	}
	if err := m.Backend().(model.StateBackend).AllocState(m.Config.StateLayout(slots)); err != nil {
		t.Fatal(err)
	}
}

func (s *hybridSession) span(off, n int) model.SeqSpan {
	return model.SeqSpan{Offset: off, Cached: s.cached, NewTokens: n, Pages: s.pages, State: s.slot}
}

// run feeds one batch of several sessions' tokens and returns, for each
// session, the logits of all its new rows.
func runHybrid(t testing.TB, m *model.Model, ss []*hybridSession, toks [][]int32) [][]float32 {
	t.Helper()
	b := &model.Batch{}
	var rows []int
	for i, s := range ss {
		if s.cached == 0 {
			m.Backend().(model.StateBackend).ClearState(s.slot)
		}
		b.Seqs = append(b.Seqs, s.span(len(b.Tokens), len(toks[i])))
		for j, tok := range toks[i] {
			rows = append(rows, len(b.Tokens))
			b.Tokens = append(b.Tokens, tok)
			b.Pos = append(b.Pos, int32(s.cached+j))
		}
	}
	lg, err := m.Forward(b, rows)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.Vocab
	out := make([][]float32, len(ss))
	off := 0
	for i, s := range ss {
		out[i] = lg[off*V : (off+len(toks[i]))*V]
		off += len(toks[i])
		s.cached += len(toks[i])
	}
	return out
}

func loadBytes(t testing.TB, name string, b []byte, threads int, f32kv bool) (*model.Model, *cpu.Backend) {
	t.Helper()
	f, err := gguf.OpenBytes(name, b)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: threads, F32KV: f32kv})
	t.Cleanup(be.Close)
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	return m, be
}

// maxRel is max|got-want| over the row / max|want|.
func maxRel(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		num = math.Max(num, math.Abs(float64(got[i])-w))
		den = math.Max(den, math.Abs(w))
	}
	if math.IsNaN(num) {
		return math.Inf(1)
	}
	return num / den
}

// TestSyntheticHybridMatchesReference runs each hybrid arch on the float32
// KV store against the float64 reference: prefill in one batch, prefill
// split in chunks then decode token by token, and two sequences sharing
// batches in different slots. Tolerance 1e-4 of the largest logit of the
// row (float32 matmuls and recurrence over 4 blocks).
func TestSyntheticHybridMatchesReference(t *testing.T) {
	for _, c := range []struct {
		arch         string
		recurrentKey bool
		nextn        int
		big          bool // the real model's head dims: attention 256 (rope 64), GDN 128
		q8           bool // Q8_0 matrices (qwen3next: ssm_ba split by whole blocks)
	}{
		{"qwen35moe", false, 0, false, false},
		{"qwen35moe", true, 1, false, false}, // new converters: recurrent_layers and an MTP block
		{"qwen35moe", true, 0, true, false},
		{"qwen35", true, 0, false, false},
		{"qwen3next", false, 0, false, false},
		{"qwen3next", false, 0, false, true},
	} {
		name := c.arch
		if c.nextn > 0 {
			name += "_mtp"
		}
		if c.big {
			name += "_headdims"
		}
		if c.q8 {
			name += "_q8_0"
		}
		t.Run(name, func(t *testing.T) {
			s := newSynthHybrid(c.arch)
			s.recurrentKey, s.nextn, s.q8 = c.recurrentKey, c.nextn, c.q8
			if c.big {
				s.heads, s.kvHeads, s.hd, s.ropeDim = 2, 1, 256, 64
				s.hk, s.hv, s.dk, s.dv = 1, 2, 128, 128
			}
			m, _ := loadBytes(t, name+".gguf", s.gguf(t, 1), 3, true)
			if got := m.Config; got.Layers != 4 || got.AttnLayers != 1 || got.RecurrentLayers() != 3 || got.NextN != c.nextn || !m.NeedsState() {
				t.Fatalf("config: %d layers, %d attention, %d recurrent, nextn %d", got.Layers, got.AttnLayers, got.RecurrentLayers(), got.NextN)
			}
			wantSummary := "4 layers (3 Gated DeltaNet + 1 attention)"
			if c.nextn > 0 {
				wantSummary = "4 layers (3 Gated DeltaNet + 1 attention; 1 MTP layer not run)"
			}
			if got := m.Config.LayerSummary(); got != wantSummary {
				t.Errorf("LayerSummary %q, want %q", got, wantSummary)
			}
			if c.nextn > 0 {
				// WeightBytes counts what Load uses: all F32 tensors but the MTP block's.
				var want int64
				for name, v := range s.t {
					if !strings.HasPrefix(name, "blk.4.") {
						want += 4 * int64(len(v))
					}
				}
				if m.Config.WeightBytes != want {
					t.Errorf("WeightBytes %d, want %d", m.Config.WeightBytes, want)
				}
			}
			r := rand.New(rand.NewPCG(5, 6))
			seq := func(n int) []int32 {
				p := make([]int32, n)
				for i := range p {
					p[i] = int32(r.IntN(s.vocab))
				}
				return p
			}
			a, bq := seq(40), seq(23)
			wa, wb := s.forward(a), s.forward(bq)
			const tol = 1e-4
			check := func(what string, got []float32, want [][]float64, from int) {
				t.Helper()
				V := s.vocab
				for i := 0; i < len(got)/V; i++ {
					if e := maxRel(got[i*V:(i+1)*V], want[from+i]); e > tol {
						t.Fatalf("%s: position %d: relative error %.3g > %g", what, from+i, e, tol)
					}
				}
			}
			newHybridPool(t, m, 16, 4, kvcache.F16)
			// One batch.
			sa := &hybridSession{m: m, pages: []int32{0, 1, 2}, slot: 3}
			check("prefill", runHybrid(t, m, []*hybridSession{sa}, [][]int32{a})[0], wa, 0)
			// Chunks and decode, two sequences in different slots and interleaved pages.
			sa = &hybridSession{m: m, pages: []int32{4, 6, 8}, slot: 1}
			sb := &hybridSession{m: m, pages: []int32{5, 7}, slot: 2}
			check("a chunk 1", runHybrid(t, m, []*hybridSession{sa}, [][]int32{a[:17]})[0], wa, 0)
			out := runHybrid(t, m, []*hybridSession{sa, sb}, [][]int32{a[17:30], bq[:20]})
			check("a chunk 2", out[0], wa, 17)
			check("b chunk 1", out[1], wb, 0)
			for i := 30; i < len(a); i++ {
				ss, toks := []*hybridSession{sa}, [][]int32{{a[i]}}
				if j := i - 30 + 20; j < len(bq) {
					ss, toks = append(ss, sb), append(toks, []int32{bq[j]})
				}
				out := runHybrid(t, m, ss, toks)
				check("a decode", out[0], wa, i)
				if len(out) > 1 {
					check("b decode", out[1], wb, i-30+20)
				}
			}
		})
	}
}

// TestHybridFP8KV: the fp8 and bf16 host pools run and stay near the
// reference (the argmax of most positions agrees), at the real model's
// attention head_dim 256 with rope on 64 dims.
func TestHybridFP8KV(t *testing.T) {
	s := newSynthHybrid("qwen35moe")
	s.heads, s.kvHeads, s.hd, s.ropeDim = 4, 2, 256, 64
	m, _ := loadBytes(t, "fp8.gguf", s.gguf(t, 2), 2, false)
	r := rand.New(rand.NewPCG(1, 1))
	p := make([]int32, 48)
	for i := range p {
		p[i] = int32(r.IntN(s.vocab))
	}
	want := s.forward(p)
	for _, dt := range []kvcache.DType{kvcache.FP8E4M3, kvcache.BF16} {
		newHybridPool(t, m, 4, 1, dt)
		sa := &hybridSession{m: m, pages: []int32{0, 1, 2}}
		got := runHybrid(t, m, []*hybridSession{sa}, [][]int32{p[:40]})[0]
		for _, tok := range p[40:] {
			got = append(got, runHybrid(t, m, []*hybridSession{sa}, [][]int32{{tok}})[0]...)
		}
		agree := 0
		var worst float64
		for i := range p {
			row := got[i*s.vocab : (i+1)*s.vocab]
			worst = math.Max(worst, maxRel(row, want[i]))
			best := 0
			for j, v := range want[i] {
				if v > want[i][best] {
					best = j
				}
			}
			if argmax(row) == int32(best) {
				agree++
			}
		}
		t.Logf("%s KV: argmax agrees at %d of %d positions, worst relative error %.3g", dt, agree, len(p), worst)
		if agree < len(p)*9/10 || worst > 0.05 {
			t.Errorf("%s KV: argmax agrees at %d of %d positions, worst relative error %.3g", dt, agree, len(p), worst)
		}
	}
}

// TestHybridErrors: a backend without StateBackend, a batch without
// state, bad slots.
func TestHybridErrors(t *testing.T) {
	s := newSynthHybrid("qwen35moe")
	raw := s.gguf(t, 3)
	f, err := gguf.OpenBytes("x.gguf", raw)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	if _, err := model.Load(f, denseOnly{be}); err == nil || !strings.Contains(err.Error(), "does not run qwen35moe yet") {
		t.Errorf("load on a backend without state ops: %v", err)
	}
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.AllocKV(m.Config.KVLayout(testPage, 2, kvcache.BF16)); err != nil {
		t.Fatal(err)
	}
	batch := func(slots ...int) *model.Batch {
		b := &model.Batch{}
		for i, sl := range slots {
			b.Seqs = append(b.Seqs, model.SeqSpan{Offset: i, NewTokens: 1, Pages: []int32{int32(i)}, State: sl})
			b.Tokens, b.Pos = append(b.Tokens, 1), append(b.Pos, 0)
		}
		return b
	}
	for _, c := range []struct {
		name  string
		b     *model.Batch
		alloc bool
		want  string
	}{
		{"no state", batch(0), false, "before AllocState"},
		{"slot outside", batch(5), true, "state slot 5 outside the 2 allocated"},
		{"negative slot", batch(-1), true, "state slot -1"},
		{"shared slot", batch(1, 1), true, "share state slot 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			be.FreeState()
			if c.alloc {
				if err := be.AllocState(m.Config.StateLayout(2)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := m.Forward(c.b, []int{0})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Forward: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// denseOnly hides the CPU backend's StateBackend methods.
type denseOnly struct{ model.Backend }

// editGGUF re-encodes raw after edit changes its metadata and tensors.
func editGGUF(t *testing.T, raw []byte, edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) []byte {
	t.Helper()
	f, err := gguf.OpenBytes("src.gguf", raw)
	if err != nil {
		t.Fatal(err)
	}
	var kv []gguf.KV
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		kv = append(kv, gguf.KV{Key: k, Value: v})
	}
	var ts []gguf.WriteTensor
	for _, ti := range f.Tensors {
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, gguf.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: data})
	}
	kv, ts = edit(kv, ts)
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kv, ts); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// setKey sets (or with nil removes) one metadata key.
func setKey(key string, v any) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
	return func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		out := kv[:0:0]
		for _, e := range kv {
			if e.Key != key {
				out = append(out, e)
			}
		}
		if v != nil {
			out = append(out, gguf.KV{Key: key, Value: v})
		}
		return out, ts
	}
}

// renameTensor renames (or with to == "" drops) a tensor; retype changes its type to F16.
func renameTensor(from, to string, retype bool) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
	return func(kv []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		out := ts[:0:0]
		for _, x := range ts {
			if x.Name == from {
				if to == "" {
					continue
				}
				x.Name = to
				if retype {
					vals := make([]float32, len(x.Data)/4)
					if err := gguf.Dequantize(gguf.F32, x.Data, vals); err != nil {
						panic(err)
					}
					x.Data, _ = gguf.Quantize(gguf.F16, vals)
					x.Type = gguf.F16
				}
			}
			out = append(out, x)
		}
		return kv, out
	}
}

// TestBadHybridFilesNamedAtLoad: corrupt or unsupported hybrid metadata
// and tensor layouts are refused by ReadConfig or Load with one error that
// names the file and what is wrong; nothing panics or allocates what the
// bad value asks for.
func TestBadHybridFilesNamedAtLoad(t *testing.T) {
	type edit = func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
	cases := []struct {
		name, arch string
		edit       edit
		want       string
	}{
		{"conv kernel 0", "qwen35moe", setKey("qwen35moe.ssm.conv_kernel", uint32(0)), "ssm.conv_kernel"},
		{"conv kernel huge", "qwen35moe", setKey("qwen35moe.ssm.conv_kernel", uint64(1)<<40), "ssm.conv_kernel"},
		{"state size huge", "qwen35moe", setKey("qwen35moe.ssm.state_size", uint32(1<<20)), "ssm.state_size"},
		{"no state size", "qwen35moe", setKey("qwen35moe.ssm.state_size", nil), "ssm.state_size"},
		{"groups do not divide", "qwen35moe", setKey("qwen35moe.ssm.group_count", uint32(3)), "ssm.group_count"},
		{"value heads 0", "qwen35moe", setKey("qwen35moe.ssm.time_step_rank", uint32(0)), "ssm.time_step_rank"},
		{"inner not a multiple", "qwen35moe", setKey("qwen35moe.ssm.inner_size", uint32(63)), "ssm.inner_size"},
		{"value head dim huge", "qwen35moe", setKey("qwen35moe.ssm.inner_size", uint32(4*8192)), "value head dim"},
		{"recurrent_layers short", "qwen35moe", setKey("qwen35moe.attention.recurrent_layers", []bool{true}), "recurrent_layers"},
		{"recurrent_layers a string", "qwen35moe", setKey("qwen35moe.attention.recurrent_layers", "TTTF"), "recurrent_layers"},
		{"recurrent_layers all attention", "qwen35moe", setKey("qwen35moe.attention.recurrent_layers", []bool{false, false, false, false}), "needs some of each"},
		{"no layer kinds", "qwen35moe", setKey("qwen35moe.full_attention_interval", nil), "full_attention_interval"},
		{"interval 0", "qwen35moe", setKey("qwen35moe.full_attention_interval", uint32(0)), "full_attention_interval"},
		{"interval 1", "qwen35moe", setKey("qwen35moe.full_attention_interval", uint32(1)), "needs some of each"},
		{"nextn all blocks", "qwen35moe", setKey("qwen35moe.nextn_predict_layers", uint32(4)), "nextn_predict_layers"},
		{"nextn leaves no attention", "qwen35moe", setKey("qwen35moe.nextn_predict_layers", uint32(1)), "needs some of each"},
		{"shared ff huge", "qwen35moe", setKey("qwen35moe.expert_shared_feed_forward_length", uint64(1)<<40), "expert_shared_feed_forward_length"},
		{"shared ff wrong", "qwen35moe", setKey("qwen35moe.expert_shared_feed_forward_length", uint32(48)), "ffn_gate_shexp.weight has shape"},
		{"conv not f32", "qwen35moe", renameTensor("blk.1.ssm_conv1d.weight", "blk.1.ssm_conv1d.weight", true), "must be F32"},
		{"no ssm_a", "qwen35moe", renameTensor("blk.2.ssm_a", "", false), "blk.2.ssm_a is missing"},
		{"legacy ssm_in", "qwen3next", renameTensor("blk.0.attn_qkv.weight", "blk.0.ssm_in.weight", false), "ssm_in"},
		{"no ssm_ba", "qwen3next", renameTensor("blk.0.ssm_ba.weight", "", false), "ssm_ba.weight is missing"},
		{"fused gate_up", "qwen35moe", renameTensor("blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate_up_exps.weight", false), "ffn_gate_up_exps"},
		{"no post norm", "qwen35", renameTensor("blk.3.post_attention_norm.weight", "", false), "post_attention_norm.weight is missing"},
		{"dense without ff", "qwen35", setKey("qwen35.feed_forward_length", nil), "feed_forward_length"},
	}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	srcs := map[string][]byte{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Without recurrent_layers the interval decides the kinds.
			withKinds := !strings.Contains(c.want, "full_attention_interval") && !strings.HasPrefix(c.name, "interval")
			key := fmt.Sprint(c.arch, withKinds)
			src, ok := srcs[key]
			if !ok {
				s := newSynthHybrid(c.arch)
				s.recurrentKey = withKinds
				src = s.gguf(t, 4)
				srcs[key] = src
			}
			raw := editGGUF(t, src, c.edit)
			f, err := gguf.OpenBytes("bad.gguf", raw)
			if err != nil {
				t.Fatal(err)
			}
			_, err = model.Load(f, be)
			if err == nil || !strings.Contains(err.Error(), "bad.gguf") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, want an error naming bad.gguf and %q", err, c.want)
			}
		})
	}
}
