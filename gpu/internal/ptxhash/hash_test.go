package ptxhash

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func TestSourceCoversIncludes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	plain := "#include <cstdint>\n__global__ void k() {}\n"
	write("plain.cu", plain)
	write("a.cu", "#define X 1\n#include \"b.cuh\"\n")
	write("b.cuh", "#pragma once\n#include \"c.cuh\"\n")
	write("c.cuh", "int c = 1;\n")

	got, err := Source(dir, "plain.cu")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(plain))
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("a file without quoted includes must hash to its plain SHA-256: %s, want %s", got, want)
	}
	h1, err := Source(dir, "a.cu")
	if err != nil {
		t.Fatal(err)
	}
	write("c.cuh", "int c = 2;\n") // a change two includes deep
	h2, err := Source(dir, "a.cu")
	if err != nil {
		t.Fatal(err)
	}
	if h1 == h2 {
		t.Error("editing an included header did not change the source hash")
	}
	write("b.cuh", "#include \"missing.cuh\"\n")
	if _, err := Source(dir, "a.cu"); err == nil {
		t.Error("a missing include must be an error")
	}
	ptx := []byte("// Code generated\n" + Prefix + h2 + "\n.version 7.8\n")
	if Recorded(ptx) != h2 {
		t.Errorf("Recorded = %q", Recorded(ptx))
	}
}
