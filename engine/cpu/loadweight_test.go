package cpu

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestLoadWeightRejectsWrappedSize guards LoadWeight against tensor infos
// whose byte size wraps around 2^64 to fit the data given (it used to build
// an unsafe.Slice of 2^62 floats over 64 bytes and panic).
func TestLoadWeightRejectsWrappedSize(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	raw := make([]byte, 64)
	cases := []gguf.TensorInfo{
		{Name: "w", Dims: []uint64{1<<62 + 16}, Type: gguf.F32},
		{Name: "w", Dims: []uint64{16, 1<<62 + 1}, Type: gguf.F32},
		{Name: "w", Dims: []uint64{32, 1<<59 + 1}, Type: gguf.Q8_0},
		{Name: "w", Dims: []uint64{1 << 40, 1 << 40}, Type: gguf.F16},
		{Name: "w", Dims: []uint64{17}, Type: gguf.F32}, // one element too many
	}
	for _, ti := range cases {
		if _, err := b.LoadWeight(ti, raw); err == nil || !strings.Contains(err.Error(), `"w"`) {
			t.Errorf("%s %v: error %v, want one naming the tensor", ti.Type, ti.Dims, err)
		}
	}
	if _, err := b.LoadWeight(gguf.TensorInfo{Name: "w", Dims: []uint64{4, 4}, Type: gguf.F32}, raw); err != nil {
		t.Errorf("valid 4x4 F32: %v", err)
	}
}
