package gguf

import (
	"strings"
	"testing"
)

func TestNewVirtual(t *testing.T) {
	ti := TensorInfo{Name: "w", Dims: []uint64{2, 3}, Type: F32}
	closed := false
	f, err := NewVirtual("dir", []KV{{Key: "general.architecture", Value: "llama"}, {Key: "n", Value: uint32(7)}}, []TensorInfo{ti},
		func(x TensorInfo) ([]byte, error) { return make([]byte, 24), nil }, func() error { closed = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := f.String("general.architecture"); a != "llama" {
		t.Fatalf("arch %q", a)
	}
	if n, _ := f.Uint("n"); n != 7 {
		t.Fatalf("n = %d", n)
	}
	got, ok := f.Tensor("w")
	if !ok {
		t.Fatal("no tensor")
	}
	if b, err := f.TensorData(got); err != nil || len(b) != 24 {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	f.Close()
	if !closed {
		t.Fatal("close not called")
	}
	if _, err := f.TensorData(got); err == nil {
		t.Fatal("data after Close")
	}

	short, _ := NewVirtual("dir", nil, []TensorInfo{ti}, func(TensorInfo) ([]byte, error) { return make([]byte, 8), nil }, nil)
	if _, err := short.TensorData(ti); err == nil || !strings.Contains(err.Error(), "gave 8 bytes, want 24") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewVirtual("dir", []KV{{Key: "a", Value: 1}, {Key: "a", Value: 2}}, nil, nil, nil); err == nil {
		t.Fatal("duplicate key accepted")
	}
	if _, err := NewVirtual("dir", nil, []TensorInfo{ti, ti}, nil, nil); err == nil {
		t.Fatal("duplicate tensor accepted")
	}
}
