package model_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// A synthetic hybrid model written in the GGUF convention (norms with the
// +1 folded in except ssm_norm, ssm_a = -exp(A_log), value heads in the
// arch's order), and an independent float64 forward pass written from the
// formulas of docs/architecture.md and model/state.go, one whole sequence
// from position 0. The transformers fixtures check the conventions; this
// checks the Go forward pass and its batching against a second reading.

type synthHybrid struct {
	arch                       string
	layers                     int // trunk
	nextn                      int // MTP blocks appended (not run)
	recurrentKey               bool
	dim, heads, kvHeads, hd    int
	ropeDim                    int
	hk, hv, dk, dv, K          int
	experts, topK, eff, shared int // MoE (0 experts: dense ff)
	ff                         int
	vocab                      int
	eps                        float64
	theta                      float64
	q8                         bool // matrices (not conv, router, shexp gate) stored Q8_0

	t map[string][]float32 // tensor data (row-major, rows = outputs)
}

func (s *synthHybrid) recurrent(i int) bool { return (i+1)%4 != 0 }

func newSynthHybrid(arch string) *synthHybrid {
	s := &synthHybrid{arch: arch, layers: 4, dim: 64, heads: 4, kvHeads: 2, hd: 32, ropeDim: 8,
		hk: 2, hv: 4, dk: 16, dv: 16, K: 4, vocab: 96, eps: 1e-6, theta: 1e7, t: map[string][]float32{}}
	if arch == "qwen35" {
		s.ff = 64
	} else {
		s.experts, s.topK, s.eff, s.shared = 8, 2, 32, 32
	}
	return s
}

// gguf builds the file.
func (s *synthHybrid) gguf(t testing.TB, seed uint64) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 99))
	type ten struct {
		name string
		dims []uint64
	}
	var ts []ten
	add := func(name string, std, mean float64, dims ...int) {
		n := 1
		d := make([]uint64, len(dims))
		for i, v := range dims {
			n *= v
			d[i] = uint64(v)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + std*r.NormFloat64())
		}
		s.t[name] = v
		ts = append(ts, ten{name, d})
	}
	blocks := s.layers + s.nextn
	add("token_embd.weight", 1, 0, s.dim, s.vocab)
	add("output_norm.weight", 0.1, 1, s.dim)
	add("output.weight", 0.1, 0, s.dim, s.vocab)
	key, value := s.hk*s.dk, s.hv*s.dv
	for i := range blocks {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", 0.1, 1, s.dim)
		add(p+"post_attention_norm.weight", 0.1, 1, s.dim)
		if i < s.layers && s.recurrent(i) {
			add(p+"attn_qkv.weight", 0.15, 0, s.dim, 2*key+value)
			add(p+"attn_gate.weight", 0.15, 0, s.dim, value)
			if s.arch == "qwen3next" {
				add(p+"ssm_ba.weight", 0.15, 0, s.dim, 2*s.hv)
			} else {
				add(p+"ssm_beta.weight", 0.15, 0, s.dim, s.hv)
				add(p+"ssm_alpha.weight", 0.15, 0, s.dim, s.hv)
			}
			add(p+"ssm_conv1d.weight", 0.4, 0, s.K, 2*key+value)
			add(p+"ssm_dt.bias", 0.5, 0, s.hv)
			add(p+"ssm_a", 0.5, 0, s.hv)
			for j, v := range s.t[p+"ssm_a"] {
				s.t[p+"ssm_a"][j] = -float32(math.Exp(float64(v)))
			}
			add(p+"ssm_norm.weight", 0.1, 1, s.dv)
			add(p+"ssm_out.weight", 0.1, 0, value, s.dim)
		} else {
			add(p+"attn_q.weight", 0.15, 0, s.dim, 2*s.heads*s.hd)
			add(p+"attn_k.weight", 0.15, 0, s.dim, s.kvHeads*s.hd)
			add(p+"attn_v.weight", 0.15, 0, s.dim, s.kvHeads*s.hd)
			add(p+"attn_output.weight", 0.1, 0, s.heads*s.hd, s.dim)
			add(p+"attn_q_norm.weight", 0.1, 1, s.hd)
			add(p+"attn_k_norm.weight", 0.1, 1, s.hd)
		}
		if s.experts > 0 {
			add(p+"ffn_gate_inp.weight", 0.3, 0, s.dim, s.experts)
			add(p+"ffn_gate_exps.weight", 0.15, 0, s.dim, s.eff, s.experts)
			add(p+"ffn_up_exps.weight", 0.15, 0, s.dim, s.eff, s.experts)
			add(p+"ffn_down_exps.weight", 0.15, 0, s.eff, s.dim, s.experts)
			add(p+"ffn_gate_inp_shexp.weight", 0.3, 0, s.dim)
			add(p+"ffn_gate_shexp.weight", 0.15, 0, s.dim, s.shared)
			add(p+"ffn_up_shexp.weight", 0.15, 0, s.dim, s.shared)
			add(p+"ffn_down_shexp.weight", 0.15, 0, s.shared, s.dim)
		} else {
			add(p+"ffn_gate.weight", 0.15, 0, s.dim, s.ff)
			add(p+"ffn_up.weight", 0.15, 0, s.dim, s.ff)
			add(p+"ffn_down.weight", 0.15, 0, s.ff, s.dim)
		}
		if i >= s.layers {
			add(p+"nextn.eh_proj.weight", 0.1, 0, 2*s.dim, s.dim)
			add(p+"nextn.enorm.weight", 0.1, 1, s.dim)
			add(p+"nextn.hnorm.weight", 0.1, 1, s.dim)
		}
	}
	a := s.arch
	kv := []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: a + ".block_count", Value: uint32(blocks)},
		{Key: a + ".context_length", Value: uint32(4096)},
		{Key: a + ".embedding_length", Value: uint32(s.dim)},
		{Key: a + ".attention.head_count", Value: uint32(s.heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(s.kvHeads)},
		{Key: a + ".attention.key_length", Value: uint32(s.hd)},
		{Key: a + ".attention.value_length", Value: uint32(s.hd)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: float32(s.eps)},
		{Key: a + ".rope.freq_base", Value: float32(s.theta)},
		{Key: a + ".rope.dimension_count", Value: uint32(s.ropeDim)},
		{Key: a + ".rope.dimension_sections", Value: []int32{2, 1, 1, 0}},
		{Key: a + ".ssm.conv_kernel", Value: uint32(s.K)},
		{Key: a + ".ssm.state_size", Value: uint32(s.dk)},
		{Key: a + ".ssm.group_count", Value: uint32(s.hk)},
		{Key: a + ".ssm.time_step_rank", Value: uint32(s.hv)},
		{Key: a + ".ssm.inner_size", Value: uint32(value)},
		{Key: a + ".full_attention_interval", Value: uint32(4)},
	}
	if s.recurrentKey {
		rl := make([]bool, blocks)
		for i := range s.layers {
			rl[i] = s.recurrent(i)
		}
		kv = append(kv, gguf.KV{Key: a + ".attention.recurrent_layers", Value: rl})
	}
	if s.nextn > 0 {
		kv = append(kv, gguf.KV{Key: a + ".nextn_predict_layers", Value: uint32(s.nextn)})
	}
	if s.experts > 0 {
		kv = append(kv, gguf.KV{Key: a + ".expert_count", Value: uint32(s.experts)},
			gguf.KV{Key: a + ".expert_used_count", Value: uint32(s.topK)},
			gguf.KV{Key: a + ".expert_feed_forward_length", Value: uint32(s.eff)},
			gguf.KV{Key: a + ".expert_shared_feed_forward_length", Value: uint32(s.shared)})
	} else {
		kv = append(kv, gguf.KV{Key: a + ".feed_forward_length", Value: uint32(s.ff)})
	}
	var wts []gguf.WriteTensor
	for _, x := range ts {
		typ := gguf.F32
		if s.q8 && len(x.dims) >= 2 && x.dims[0]%32 == 0 && !strings.Contains(x.name, "conv1d") && !strings.Contains(x.name, "gate_inp") {
			typ = gguf.Q8_0
		}
		raw, err := gguf.Quantize(typ, s.t[x.name])
		if err != nil {
			t.Fatal(err)
		}
		// The reference computes with what the file holds.
		if err := gguf.Dequantize(typ, raw, s.t[x.name]); err != nil {
			t.Fatal(err)
		}
		wts = append(wts, gguf.WriteTensor{Name: x.name, Dims: x.dims, Type: typ, Data: raw})
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kv, wts); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// matvec: W (rows out, cols in) times x.
func matvec(w []float32, x []float64, out int) []float64 {
	in := len(x)
	y := make([]float64, out)
	for o := range out {
		var a float64
		for i, v := range x {
			a += float64(w[o*in+i]) * v
		}
		y[o] = a
	}
	return y
}

func rmsnormRef(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * inv * float64(w[i])
	}
	return y
}

func siluRef(x float64) float64    { return x / (1 + math.Exp(-x)) }
func sigmoidRef(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// forward returns the logits of every position of tokens.
func (s *synthHybrid) forward(tokens []int32) [][]float64 {
	n := len(tokens)
	x := make([][]float64, n)
	for t, tok := range tokens {
		x[t] = make([]float64, s.dim)
		for i := range s.dim {
			x[t][i] = float64(s.t["token_embd.weight"][int(tok)*s.dim+i])
		}
	}
	key, value := s.hk*s.dk, s.hv*s.dv
	C := 2*key + value
	for li := range s.layers {
		p := fmt.Sprintf("blk.%d.", li)
		h := make([][]float64, n)
		for t := range n {
			h[t] = rmsnormRef(x[t], s.t[p+"attn_norm.weight"], s.eps)
		}
		out := make([][]float64, n)
		if s.recurrent(li) {
			qkv, z, beta, alpha := make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n)
			for t := range n {
				qkv[t] = matvec(s.t[p+"attn_qkv.weight"], h[t], C)
				z[t] = matvec(s.t[p+"attn_gate.weight"], h[t], value)
				if s.arch == "qwen3next" {
					ba := matvec(s.t[p+"ssm_ba.weight"], h[t], 2*s.hv)
					r := s.hv / s.hk
					beta[t], alpha[t] = make([]float64, s.hv), make([]float64, s.hv)
					for g := range s.hk {
						for i := range r {
							beta[t][g*r+i] = ba[g*2*r+i]
							alpha[t][g*r+i] = ba[g*2*r+r+i]
						}
					}
				} else {
					beta[t] = matvec(s.t[p+"ssm_beta.weight"], h[t], s.hv)
					alpha[t] = matvec(s.t[p+"ssm_alpha.weight"], h[t], s.hv)
				}
			}
			cw := s.t[p+"ssm_conv1d.weight"]
			conv := make([][]float64, n)
			for t := range n {
				conv[t] = make([]float64, C)
				for c := range C {
					var a float64
					for i := range s.K {
						if src := t - s.K + 1 + i; src >= 0 {
							a += float64(cw[c*s.K+i]) * qkv[src][c]
						}
					}
					conv[t][c] = siluRef(a)
				}
			}
			o := make([][]float64, n)
			for t := range n {
				o[t] = make([]float64, value)
			}
			A, dt := s.t[p+"ssm_a"], s.t[p+"ssm_dt.bias"]
			l2 := func(v []float64, sc float64) []float64 {
				var ss float64
				for _, e := range v {
					ss += e * e
				}
				y := make([]float64, len(v))
				for i, e := range v {
					y[i] = e / math.Sqrt(ss+1e-6) * sc
				}
				return y
			}
			for j := range s.hv {
				kh := j / (s.hv / s.hk)
				if s.arch != "qwen3next" {
					kh = j % s.hk
				}
				S := make([]float64, s.dk*s.dv)
				for t := range n {
					q := l2(conv[t][kh*s.dk:(kh+1)*s.dk], 1/math.Sqrt(float64(s.dk)))
					k := l2(conv[t][key+kh*s.dk:key+(kh+1)*s.dk], 1)
					v := conv[t][2*key+j*s.dv : 2*key+(j+1)*s.dv]
					g := float64(A[j]) * math.Log1p(math.Exp(alpha[t][j]+float64(dt[j])))
					b := sigmoidRef(beta[t][j])
					for i := range S {
						S[i] *= math.Exp(g)
					}
					for c := range s.dv {
						var kv float64
						for i := range s.dk {
							kv += S[i*s.dv+c] * k[i]
						}
						u := b * (v[c] - kv)
						for i := range s.dk {
							S[i*s.dv+c] += k[i] * u
						}
					}
					for c := range s.dv {
						var a float64
						for i := range s.dk {
							a += S[i*s.dv+c] * q[i]
						}
						o[t][j*s.dv+c] = a
					}
				}
			}
			for t := range n {
				y := make([]float64, value)
				for j := range s.hv {
					nrm := rmsnormRef(o[t][j*s.dv:(j+1)*s.dv], s.t[p+"ssm_norm.weight"], s.eps)
					for c := range s.dv {
						y[j*s.dv+c] = nrm[c] * siluRef(z[t][j*s.dv+c])
					}
				}
				out[t] = matvec(s.t[p+"ssm_out.weight"], y, s.dim)
			}
		} else {
			H, D, KV := s.heads, s.hd, s.kvHeads
			q, gate, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n)
			rope := func(x []float64, pos int) {
				half := s.ropeDim / 2
				for i := range half {
					f := float64(pos) / math.Pow(s.theta, float64(2*i)/float64(s.ropeDim))
					c, sn := math.Cos(f), math.Sin(f)
					a, b := x[i], x[i+half]
					x[i], x[i+half] = a*c-b*sn, a*sn+b*c
				}
			}
			for t := range n {
				qg := matvec(s.t[p+"attn_q.weight"], h[t], 2*H*D)
				kk := matvec(s.t[p+"attn_k.weight"], h[t], KV*D)
				v[t] = matvec(s.t[p+"attn_v.weight"], h[t], KV*D)
				q[t], gate[t], k[t] = make([]float64, H*D), make([]float64, H*D), make([]float64, KV*D)
				for hh := range H {
					qh := rmsnormRef(qg[hh*2*D:hh*2*D+D], s.t[p+"attn_q_norm.weight"], s.eps)
					rope(qh, t)
					copy(q[t][hh*D:], qh)
					copy(gate[t][hh*D:], qg[hh*2*D+D:hh*2*D+2*D])
				}
				for hh := range KV {
					kh := rmsnormRef(kk[hh*D:(hh+1)*D], s.t[p+"attn_k_norm.weight"], s.eps)
					rope(kh, t)
					copy(k[t][hh*D:], kh)
				}
			}
			for t := range n {
				att := make([]float64, H*D)
				for hh := range H {
					g := hh / (H / KV)
					sc := make([]float64, t+1)
					mx := math.Inf(-1)
					for u := 0; u <= t; u++ {
						var a float64
						for i := range D {
							a += q[t][hh*D+i] * k[u][g*D+i]
						}
						sc[u] = a / math.Sqrt(float64(D))
						mx = math.Max(mx, sc[u])
					}
					var sum float64
					for u := range sc {
						sc[u] = math.Exp(sc[u] - mx)
						sum += sc[u]
					}
					for u := range sc {
						for i := range D {
							att[hh*D+i] += sc[u] / sum * v[u][g*D+i]
						}
					}
				}
				for i := range att {
					att[i] *= sigmoidRef(gate[t][i])
				}
				out[t] = matvec(s.t[p+"attn_output.weight"], att, s.dim)
			}
		}
		for t := range n {
			for i := range s.dim {
				x[t][i] += out[t][i]
			}
			hn := rmsnormRef(x[t], s.t[p+"post_attention_norm.weight"], s.eps)
			f := make([]float64, s.dim)
			mlp := func(gate, up, down []float32, ff int, scale float64) {
				g, u := matvec(gate, hn, ff), matvec(up, hn, ff)
				for i := range g {
					g[i] = siluRef(g[i]) * u[i]
				}
				d := matvec(down, g, s.dim)
				for i := range f {
					f[i] += scale * d[i]
				}
			}
			if s.experts > 0 {
				lg := matvec(s.t[p+"ffn_gate_inp.weight"], hn, s.experts)
				mx := math.Inf(-1)
				for _, v := range lg {
					mx = math.Max(mx, v)
				}
				pr := make([]float64, s.experts)
				var sum float64
				for e, v := range lg {
					pr[e] = math.Exp(v - mx)
					sum += pr[e]
				}
				idx := make([]int, s.experts)
				for e := range idx {
					idx[e] = e
					pr[e] /= sum
				}
				sort.SliceStable(idx, func(a, b int) bool { return pr[idx[a]] > pr[idx[b]] })
				var tot float64
				for _, e := range idx[:s.topK] {
					tot += pr[e]
				}
				E := s.dim * s.eff
				for _, e := range idx[:s.topK] {
					mlp(s.t[p+"ffn_gate_exps.weight"][e*E:(e+1)*E], s.t[p+"ffn_up_exps.weight"][e*E:(e+1)*E],
						s.t[p+"ffn_down_exps.weight"][e*E:(e+1)*E], s.eff, pr[e]/tot)
				}
				sg := sigmoidRef(matvec(s.t[p+"ffn_gate_inp_shexp.weight"], hn, 1)[0])
				mlp(s.t[p+"ffn_gate_shexp.weight"], s.t[p+"ffn_up_shexp.weight"], s.t[p+"ffn_down_shexp.weight"], s.shared, sg)
			} else {
				mlp(s.t[p+"ffn_gate.weight"], s.t[p+"ffn_up.weight"], s.t[p+"ffn_down.weight"], s.ff, 1)
			}
			for i := range s.dim {
				x[t][i] += f[i]
			}
		}
	}
	logits := make([][]float64, n)
	for t := range n {
		logits[t] = matvec(s.t["output.weight"], rmsnormRef(x[t], s.t["output_norm.weight"], s.eps), s.vocab)
	}
	return logits
}
