package model_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/ftchat/ftchat/engine/cpu"
	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/sample"
)

// rowSampler is the CPU backend with model.LogitsSampler done on the
// host, counting calls: it stands in for a device backend.
type rowSampler struct {
	*cpu.Backend
	calls int
}

func (r *rowSampler) row(t model.Tensor, row int) sample.Slice {
	all := make([]float32, t.Rows()*t.Cols())
	r.ToHost(t, all)
	return sample.Slice(all[row*t.Cols() : (row+1)*t.Cols()])
}

func (r *rowSampler) ArgmaxRow(t model.Tensor, row int, pen float32, ids []int32) (int32, error) {
	r.calls++
	id, _ := r.row(t, row).Argmax(pen, ids)
	return id, nil
}

func (r *rowSampler) TopKRow(t model.Tensor, row, k int, pen float32, ids []int32) ([]int32, []float32, error) {
	r.calls++
	top, vals, _ := r.row(t, row).TopK(k, pen, ids)
	return top, vals, nil
}

// TestForwardLogits checks that ForwardLogits on a LogitsSampler backend
// gives Forward's logits (bit for bit) through Host and the row sources,
// asks the backend for argmax and top-k, declines a top-k above
// MaxDeviceTopK, and refuses rows a later step replaced.
func TestForwardLogits(t *testing.T) {
	f, err := gguf.Open(filepath.Join("testdata", "tiny_qwen3.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	be := &rowSampler{Backend: cpu.New(cpu.Options{Threads: 2, F32KV: false})}
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.AllocKV(m.Config.KVLayout(4, 8, kvcache.F16)); err != nil {
		t.Fatal(err)
	}
	tokens := []int32{5, 17, 300, 42, 9}
	b := &model.Batch{Tokens: tokens, Pos: []int32{0, 1, 2, 3, 4}, Seqs: []model.SeqSpan{{NewTokens: 5, Pages: []int32{0, 1}}}}
	rows := []int{2, 4}
	want, err := m.Forward(b, rows)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.ForwardLogits(b, rows)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.Vocab
	for i := range rows {
		src := l.Row(i)
		if src.Len() != V {
			t.Fatalf("row %d: Len %d, want %d", i, src.Len(), V)
		}
		w := sample.Slice(want[i*V : (i+1)*V])
		ids := []int32{3, 17, 300}
		wantID, _ := w.Argmax(1.4, ids)
		if got, ok := src.Argmax(1.4, ids); !ok || got != wantID {
			t.Errorf("row %d: Argmax %d (ok %v), want %d", i, got, ok, wantID)
		}
		gotIDs, _, ok := src.TopK(7, 1.4, ids)
		wantIDs, _, _ := w.TopK(7, 1.4, ids)
		if !ok || len(gotIDs) != 7 || gotIDs[0] != wantIDs[0] || gotIDs[6] != wantIDs[6] {
			t.Errorf("row %d: TopK %v (ok %v), want %v", i, gotIDs, ok, wantIDs)
		}
		if _, _, ok := src.TopK(model.MaxDeviceTopK+1, 1, nil); ok {
			t.Errorf("row %d: TopK above MaxDeviceTopK was served on the device", i)
		}
	}
	if be.calls != 2*len(rows) {
		t.Errorf("the backend sampled %d times, want %d", be.calls, 2*len(rows))
	}
	host := l.Host()
	for i := range want {
		if math.Float32bits(host[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %v, Forward gave %v", i, host[i], want[i])
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}

	l2, err := m.ForwardLogits(b, rows[1:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(b, rows); err != nil {
		t.Fatal(err)
	}
	if _, ok := l2.Row(0).Argmax(1, nil); ok || l2.Err() == nil {
		t.Error("logits replaced by a later Forward were still sampled")
	}
}
