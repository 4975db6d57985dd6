package gpu

import (
	"fmt"
	"math"
	"os"
	"slices"
	"unsafe"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// PrefillKernel selects the attention kernel of prefill chunks (sequences
// with at least faMinTokens new tokens in the batch).
type PrefillKernel int

const (
	// PrefillDefault takes $FTCHAT_PREFILL_ATTN: "fa" for PrefillFA,
	// anything else (unset, "old") for PrefillBlocks.
	PrefillDefault PrefillKernel = iota
	// PrefillBlocks runs prefill through attn_<dtype>_d<dim>, the decode
	// kernel (a warp of up to 8 query rows per key split).
	PrefillBlocks
	// PrefillFA runs prefill through attn_fa_<dtype>_d<dim>: CTAs of 64
	// (or 128, KVCache.FAWarps) query rows sharing each key tile in shared
	// memory (FlashAttention-2 style). Head dims without an FA kernel, and
	// devices whose shared memory cannot hold its tiles, keep PrefillBlocks.
	PrefillFA
)

func (p PrefillKernel) String() string {
	switch p {
	case PrefillBlocks:
		return "old"
	case PrefillFA:
		return "fa"
	}
	return "default"
}

// prefillByEnv is PrefillDefault's meaning, read once.
var prefillByEnv = func() PrefillKernel {
	// attn_fa by default since the H200 run of 2026-12-02 (1.1-5.8x the
	// block kernel at 512 new tokens, docs/benchmarks.md); "old" keeps it.
	if os.Getenv("FTCHAT_PREFILL_ATTN") == "old" {
		return PrefillBlocks
	}
	return PrefillFA
}()

// faWarpsByEnv is the FA CTA size when KVCache.FAWarps is 0:
// $FTCHAT_FA_WARPS = 4 for 64 query rows per CTA, 8 for 128, else 0: 8
// where the device's shared memory holds its tiles, 4 where not. Eight
// warps since the H200 run of 2026-12-03 (docs/benchmarks.md): 1.03-1.7x
// four from 4K cached tokens on, on the Llama-3.1-8B and Qwen3.6 shapes,
// bf16 and fp8; at depth 0 four stay ahead on Qwen3.6's head_dim 256
// (17 µs a layer on a 512-token chunk: half the CTAs of 8 warps leave
// SMs idle when the keys are too few to split).
var faWarpsByEnv = func() int {
	switch os.Getenv("FTCHAT_FA_WARPS") {
	case "4":
		return 4
	case "8":
		return 8
	}
	return 0
}()

// faWaves sizes FA auto-splitting unless KVCache.Waves is set: long key
// ranges are split until this many waves of resident CTAs are filled
// ($FTCHAT_FA_WAVES = 2 restores the earlier choice). One since the H200
// run of 2026-12-04 (docs/benchmarks.md): with 8-warp CTAs a second wave
// of key splits costs more in the merge than it gains. FA bench, 512 new
// tokens after 4K cached: 132 -> 157 TFLOP/s (bf16) and 125 -> 142 (fp8)
// on the Llama-3.1-8B shape, 1-3% at 32K, alike on the 30B-A3B and Qwen3.6
// shapes; `bench speed` pp512 at 4K +4-5% (8B), +3.5-4% (30B-A3B).
var faWaves = func() int {
	if os.Getenv("FTCHAT_FA_WAVES") == "2" {
		return 2
	}
	return 1
}()

const (
	// faMinTokens is the smallest chunk of new tokens of one sequence the
	// FA kernel takes; decode rows and shorter chunks fill too little of
	// its 64-row tiles.
	faMinTokens = 64
	// faMinSplitTokens is the smallest key chunk FA auto-splitting makes.
	faMinSplitTokens = 1024
)

// faHeadDims are the head dimensions attn_fa is instantiated for.
var faHeadDims = []int{64, 128, 256}

// faKeyTile mirrors FaCfg<D>::BK in kernels/attention.cu.
func faKeyTile(d int) int {
	if d >= 256 {
		return 32
	}
	return 64
}

// faSmemFixed mirrors faSmemFixed<TK, TV, D>() in kernels/attention.cu
// for K (FP8 when kFP8) and V (vFP8): 16-bit tiles of padded rows (two
// stages of a 16-bit half, one widened tile of an FP8 half), the raw
// stages of the FP8 halves and the K/V scales of both stages.
func faSmemFixed(kFP8, vFP8 bool, d int) int {
	bk := faKeyTile(d)
	row16 := (d + 8) * 2
	nw := 0 // FP8 halves
	for _, f := range []bool{kFP8, vFP8} {
		if f {
			nw++
		}
	}
	return (2*(2-nw)+nw)*bk*row16 + nw*2*bk*d + 16*bk
}

// faSmemBytes is the dynamic shared memory of an FA CTA of warps warps
// over pool l: each warp's q fragments (hi and lo, 64*D bytes) and
// faSmemFixed.
func faSmemBytes(l kvcache.Layout, warps int) int {
	return warps*64*l.HeadDim + faSmemFixed(l.KType().IsFP8(), l.VType().IsFP8(), l.HeadDim)
}

// faWarps is the warps (16 query rows each) of an FA CTA: KVCache.FAWarps,
// else $FTCHAT_FA_WARPS, else 8 where c's device holds their shared
// memory, else 4.
func (kv *KVCache) faWarps(c *Ctx) int {
	if kv.FAWarps == 4 || kv.FAWarps == 8 {
		return kv.FAWarps
	}
	if faWarpsByEnv != 0 {
		return faWarpsByEnv
	}
	if faSmemBytes(kv.Layout, 8) <= c.d.info.SharedMemOptin {
		return 8
	}
	return 4
}

// attnShape returns the heads per warp of the block kernel and the tokens
// per FA tile (0: FA not used) for heads query heads on this pool.
func (kv *KVCache) attnShape(c *Ctx, heads int) (hpw, faTok int) {
	l := kv.Layout
	group := max(heads/l.KVHeads, 1)
	hpw = min(group, maxGroup)
	sel := kv.Prefill
	if sel == PrefillDefault {
		sel = prefillByEnv
	}
	warps := kv.faWarps(c)
	if sel != PrefillFA || group > 16*warps || !slices.Contains(faHeadDims, l.HeadDim) ||
		faSmemBytes(l, warps) > c.d.info.SharedMemOptin {
		return hpw, 0
	}
	return hpw, 16 * warps / group
}

// faOccupancy is the resident FA CTAs per SM of block threads with smem
// bytes of dynamic shared memory.
func faOccupancy(c *Ctx, f *Function, block, smem int) (int, error) {
	var n int32
	if err := c.drv.check("cuOccupancyMaxActiveBlocksPerMultiprocessor("+f.Name+")",
		ccall(c.drv.cuOccupancyMaxActiveBlocksPerMultiprocessor, uintptr(unsafe.Pointer(&n)), f.h, uintptr(block), uintptr(smem))); err != nil {
		return 0, err
	}
	return max(int(n), 1), nil
}

// attendFA runs attn_fa_<dtype>_d<dim> (attn_fa_<k>_<v>_d<dim> for a
// mixed pool) over m's FA tiles, split along the
// keys (attn_merge combines the splits) when the tiles alone do not fill
// faWaves waves of the device.
func (kv *KVCache) attendFA(c *Ctx, dst, q DevicePtr, rows, layer int, m batchMeta, heads int, scale float32) error {
	l := kv.Layout
	d := l.HeadDim
	name := fmt.Sprintf("attn_fa_%s_d%d", kernelDTypes(l), d)
	f, err := c.Function(attentionModule, name)
	if err != nil {
		return err
	}
	warps := kv.faWarps(c)
	smem := faSmemBytes(l, warps)
	if kv.faSmem[f] < smem {
		if err := c.SetMaxDynamicShared(f, smem); err != nil {
			return err
		}
		if kv.faSmem == nil {
			kv.faSmem = map[*Function]int{}
		}
		kv.faSmem[f] = smem
	}
	ctas := m.nfa * l.KVHeads
	splits := kv.Splits
	if splits <= 0 {
		occ, err := faOccupancy(c, f, 32*warps, smem)
		if err != nil {
			return err
		}
		waves := kv.Waves
		if waves <= 0 {
			waves = faWaves
		}
		splits = chooseSplits(occ*c.d.info.SMs*waves, ctas, m.maxKFA, faMinSplitTokens)
	}
	splits = capSplits(splits, rows, heads, d)
	kv.lastFAsp = splits
	part, partML, err := kv.splitWorkspace(c, splits, rows, heads)
	if err != nil {
		return err
	}
	seqs, pt, _, _ := kv.metaPtrs(m)
	tiles := kv.meta.Ptr.Add(int64(4 * m.faOff))
	ly := kv.layers[layer]
	scaleLog2 := scale * float32(math.Log2E)
	if err := c.Launch(f, Dim3{X: ctas * splits}, Dim3{X: 32 * warps}, smem, c.Stream(),
		q, dst, part, partML, ly.k, ly.v, ly.ks, ly.vs, l.HasTokenScales(),
		seqs, pt, tiles, m.nfa, l.KVHeads, heads/l.KVHeads, log2(l.PageSize), splits, rows, scaleLog2); err != nil {
		return err
	}
	if splits == 1 {
		return nil
	}
	return kv.merge(c, part, partML, dst, kv.meta.Ptr.Add(int64(4*m.faRowOff)), rows, heads, splits)
}
