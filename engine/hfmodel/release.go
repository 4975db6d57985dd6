package hfmodel

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/safetensors"
)

// A tensor that is built at load (repacked NVFP4, stacked experts, permuted
// rows, anything converted) exists twice once built: in the buffer the
// backend keeps or uploads, and in the shard pages the build read, which
// count in the process's resident memory until unmapped. So each shard
// tensor counts the builds that still have to read it; when the last one
// has, and no served tensor aliases it, its pages are given back
// (safetensors.ReleaseRange: MADV_DONTNEED on the read-only shared mapping;
// a later read pages them in again from the file, so this saves memory and
// never changes a byte). Freed tensors next to each other are given back as
// one run, so the pages they share go too; a page shared with a tensor still
// to be read, or aliased, stays.

// releaseSources is false only in tests that compare with a load keeping
// every page.
var releaseSources = true

// releasedBytes counts the shard bytes given back (tests and measurements).
var releasedBytes atomic.Int64

// shardUse is the per-tensor state of one shard, indexed like f.Tensors.
type shardUse struct {
	f    *safetensors.File
	need []int  // builds that have still to read the tensor
	kept []bool // a served tensor aliases it
}

func (s *shardUse) free(i int) bool { return s.need[i] <= 0 && !s.kept[i] }

// tensorRef is one shard tensor.
type tensorRef struct {
	sh *shardUse
	i  int
}

// releaser gives back the pages of shard tensors as the builds that read
// them finish.
type releaser struct {
	mu    sync.Mutex
	m     *mapper
	reads map[string][]tensorRef // GGUF name -> the shard tensors its bytes come from
	page  uint64
}

// releasing returns m.data for gguf.NewVirtual, wrapped to give back the
// pages of the shard tensors each call was the last to read.
func (m *mapper) releasing() func(gguf.TensorInfo) ([]byte, error) {
	r := &releaser{m: m, reads: map[string][]tensorRef{}, page: uint64(os.Getpagesize())}
	shards := map[*safetensors.File]*shardUse{}
	index := map[*safetensors.File]map[string]int{}
	for _, f := range m.ck.shards {
		shards[f] = &shardUse{f: f, need: make([]int, len(f.Tensors)), kept: make([]bool, len(f.Tensors))}
		ix := make(map[string]int, len(f.Tensors))
		for i, t := range f.Tensors {
			ix[t.Name] = i
		}
		index[f] = ix
	}
	for name, s := range m.specs {
		for _, n := range s.from {
			for _, c := range companions(n) {
				t, ok := m.ck.tensors[c]
				if !ok {
					continue
				}
				sh := shards[t.f]
				i := index[t.f][t.t.Name]
				sh.need[i]++
				r.reads[name] = append(r.reads[name], tensorRef{sh, i})
			}
		}
	}
	return func(ti gguf.TensorInfo) ([]byte, error) {
		b, err := m.data(ti)
		if err == nil && releaseSources {
			r.consumed(ti.Name, b)
		}
		return b, err
	}
}

// companions lists the checkpoint names a build of the weight n may read:
// n and, for a …weight, the codes and scales quantized formats store beside
// it (those absent from the checkpoint are skipped by the caller).
func companions(n string) []string {
	base, ok := strings.CutSuffix(n, ".weight")
	if !ok {
		return []string{n}
	}
	return []string{n, base + ".weight_packed", base + ".weight_scale", base + ".weight_scale_inv", base + ".weight_scale_2", base + ".weight_global_scale"}
}

// consumed records that the GGUF tensor name was served as b, and gives
// back the tensors no build has left to read.
func (r *releaser) consumed(name string, b []byte) {
	refs := r.reads[name]
	if len(refs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		if overlaps(b, ref) {
			ref.sh.kept[ref.i] = true // served as it is: the backend may keep these bytes
		}
	}
	for _, ref := range refs {
		ref.sh.need[ref.i]--
		if ref.sh.free(ref.i) {
			r.release(ref.sh, ref.i)
		}
	}
}

// overlaps reports whether b lies in the mapped bytes of ref.
func overlaps(b []byte, ref tensorRef) bool {
	t := ref.sh.f.Tensors[ref.i]
	d, err := ref.sh.f.Data(t)
	if err != nil || len(b) == 0 || len(d) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	return p < lo+uintptr(len(d)) && lo < p+uintptr(len(b))
}

// release gives back tensor i of sh with the free tensors (and gaps) within
// a page of either end, so the pages i shares with them go as well.
func (r *releaser) release(sh *shardUse, i int) {
	ts := sh.f.Tensors
	// lo and hi stop at the first tensor that is not free, or at the end
	// of the first one more than a page away: the bytes up to it are free
	// tensors and gaps.
	var lo uint64
	j := i - 1
	for j >= 0 && ts[j].End+r.page > ts[i].Begin && sh.free(j) {
		j--
	}
	if j >= 0 {
		lo = ts[j].End
	}
	hi := ts[len(ts)-1].End
	k := i + 1
	for k < len(ts) && ts[k].Begin < ts[i].End+r.page && sh.free(k) {
		k++
	}
	if k < len(ts) {
		hi = ts[k].Begin
	}
	// A failure only costs the memory it would have saved (the bytes are
	// unchanged either way), so it does not fail the load.
	n, _ := sh.f.ReleaseRange(lo, hi)
	releasedBytes.Add(int64(n))
}
