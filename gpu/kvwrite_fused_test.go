package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
)

// TestKVWriteQKMatchesSeparateOps: the fused launch (KVCache.WriteQK: q/k
// head norms, RoPE on q, the KV write) gives bit for bit what the separate
// steps give: head_rmsnorm on q and k, then kv_write for the pages and the
// Go RoPE reference (ropeRef, which TestKVWriteMatchesHostStore ties to
// kv_write's rotation) for q. The pool is poisoned first, q's spare row
// (no sequence) must come back untouched, and the cases cover the dtypes,
// head dims up to 256, partial and NeoX rotations, GQA groups and both
// with and without norms.
func TestKVWriteQKMatchesSeparateOps(t *testing.T) {
	d := openTestDevice(t)
	type tc struct {
		dt    kvcache.DType
		sm    kvcache.ScaleMode
		hd    int
		kvh   int
		group int
		rope  model.Rope
		norm  bool
	}
	cases := []tc{
		{kvcache.BF16, 0, 128, 2, 4, model.Rope{Dim: 128, Base: 500000}, false},
		{kvcache.FP8E4M3, kvcache.DynamicScales, 128, 2, 4, model.Rope{Dim: 128, Base: 1e6, NeoX: true}, true},
		{kvcache.FP8E4M3, kvcache.DynamicScales, 64, 3, 1, model.Rope{Dim: 64, Base: 10000}, false},
		{kvcache.F16, 0, 256, 1, 3, model.Rope{Dim: 64, Base: 1e7, NeoX: true}, true},
		{kvcache.FP8E5M2, kvcache.StaticScales, 80, 2, 2, model.Rope{Dim: 40, Base: 10000, Scale: 0.25}, true},
		{kvcache.BF16, 0, 96, 1, 5, model.Rope{Dim: 96, Base: 10000, NeoX: true}, true},
	}
	seqs := []seqShape{{5, 7}, {0, 1}, {4000, 3}, {130000, 2}}
	const eps = 1e-6
	for ci, cs := range cases {
		name := fmt.Sprintf("%v-%v/d%d/kvh%d/g%d/rope%d-neox%v/norm%v", cs.dt, cs.sm, cs.hd, cs.kvh, cs.group, cs.rope.Dim, cs.rope.NeoX, cs.norm)
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			p := []int{1, 16, 64}[ci%3]
			pages := pagesFor(seqs, p, true) + 3
			l := testLayout(cs.dt, kvcache.Auto, cs.sm, 2, cs.kvh, cs.hd, p, pages, rng)
			b, rows := testBatch(rng, seqs, p, pages, 1, true)
			heads := cs.kvh * cs.group
			wq, wk := heads*cs.hd, cs.kvh*cs.hd
			q, k, v := make([]float32, rows*wq), make([]float32, rows*wk), make([]float32, rows*wk)
			for r := range rows {
				for h := range heads {
					randRow(rng, q[r*wq+h*cs.hd:r*wq+(h+1)*cs.hd])
				}
				for h := range cs.kvh {
					randRow(rng, k[r*wk+h*cs.hd:r*wk+(h+1)*cs.hd])
					randRow(rng, v[r*wk+h*cs.hd:r*wk+(h+1)*cs.hd])
				}
			}
			clear(q[wq : wq+cs.hd]) // a zero q head (norm of zeros)
			var gq, gk []float32
			if cs.norm {
				gq, gk = make([]float32, cs.hd), make([]float32, cs.hd)
				for i := range cs.hd {
					gq[i] = float32(0.5 + rng.Float64())
					gk[i] = float32(0.5 + rng.Float64())
				}
			}
			hs, err := kvcache.NewHostStore(l) // for the sizes of a layer's codes and scales
			if err != nil {
				t.Fatal(err)
			}
			hk, hv, hks, hvs := hs.Raw(1)
			type result struct {
				q          []float32
				kc, vc     []byte
				kscl, vscl []float32
			}
			// run writes the pool (poisoned first) and returns it and q:
			// fused through WriteQK, else the separate steps (q then gets
			// ropeRef on the host).
			run := func(fused bool) result {
				var res result
				err := d.Do(func(c *Ctx) error {
					kv, err := c.AllocKV(l)
					if err != nil {
						return err
					}
					defer kv.Free(c)
					ly := kv.layers[1]
					if err := c.Memset8(ly.buf.Ptr, 0xa5, ly.buf.Size); err != nil {
						return err
					}
					n := len(q) + len(k) + len(v) + len(gq) + len(gk)
					buf, err := c.Alloc(int64(4*n), "test q/k/v")
					if err != nil {
						return err
					}
					defer c.Free(buf)
					qp := buf.Ptr
					kp := qp.Add(int64(4 * len(q)))
					vp := kp.Add(int64(4 * len(k)))
					gqp := vp.Add(int64(4 * len(v)))
					gkp := gqp.Add(int64(4 * len(gq)))
					for _, u := range []struct {
						p DevicePtr
						x []float32
					}{{qp, q}, {kp, k}, {vp, v}, {gqp, gq}, {gkp, gk}} {
						if len(u.x) > 0 {
							if err := Upload(c, u.p, u.x); err != nil {
								return err
							}
						}
					}
					if fused {
						var qg, kg DevicePtr
						if cs.norm {
							qg, kg = gqp, gkp
						}
						if err := kv.WriteQK(c, 1, qp, kp, vp, rows, b, cs.rope, heads, qg, kg, eps); err != nil {
							return err
						}
					} else {
						if cs.norm {
							f, err := c.Function("ops", "head_rmsnorm")
							if err != nil {
								return err
							}
							for _, x := range []struct {
								p, g DevicePtr
								n    int
							}{{qp, gqp, rows * heads}, {kp, gkp, rows * cs.kvh}} {
								if err := c.Launch(f, Dim3{X: cdiv(x.n, 8)}, Dim3{X: 256}, 0, c.Stream(), x.p, x.g, x.n, cs.hd, float32(eps)); err != nil {
									return err
								}
							}
						}
						if err := kv.Write(c, 1, kp, vp, rows, b, cs.rope); err != nil {
							return err
						}
					}
					res.q = make([]float32, len(q))
					if err := Download(c, res.q, qp); err != nil {
						return err
					}
					pk, pv, pks, pvs := kv.LayerPtrs(1)
					res.kc, res.vc = make([]byte, len(hk)), make([]byte, len(hv))
					if err := Download(c, res.kc, pk); err != nil {
						return err
					}
					if err := Download(c, res.vc, pv); err != nil {
						return err
					}
					if l.HasTokenScales() {
						res.kscl, res.vscl = make([]float32, len(hks)), make([]float32, len(hvs))
						if err := Download(c, res.kscl, pks); err != nil {
							return err
						}
						if err := Download(c, res.vscl, pvs); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			want, got := run(false), run(true)
			// The separate steps' q: normed on the device, rotated here; the
			// spare row is the input (the fused launch leaves it alone).
			for _, s := range b.Seqs {
				for i := range s.NewTokens {
					r := s.Offset + i
					ropeRef(want.q[r*wq:(r+1)*wq], heads, cs.hd, s.Cached+i, cs.rope)
				}
			}
			copy(want.q[(rows-1)*wq:], q[(rows-1)*wq:])
			if bad := firstDiff(got.q, want.q); bad >= 0 {
				t.Errorf("q[%d] (row %d, head %d) = %g, separate ops give %g", bad, bad/wq, bad%wq/cs.hd, got.q[bad], want.q[bad])
			}
			cmpBytes(t, "K codes", got.kc, want.kc)
			cmpBytes(t, "V codes", got.vc, want.vc)
			if want.kscl != nil {
				cmpBytes(t, "K scales", float32Bytes(got.kscl), float32Bytes(want.kscl))
				cmpBytes(t, "V scales", float32Bytes(got.vscl), float32Bytes(want.vscl))
			}
			if slices.Equal(got.q, q) {
				t.Error("q came back unchanged")
			}
		})
	}
}

// firstDiff is the first index where a and b differ in bits (NaNs of the
// same bits agree), -1 if none.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
