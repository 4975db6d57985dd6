package ptxgz

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

func TestEncodeDeterministicRoundTrip(t *testing.T) {
	ptx := []byte(strings.Repeat("// source-sha256: 00\n.version 7.8\n.target sm_80\n", 1000))
	a, err := Encode(ptx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(ptx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two encodings of the same PTX differ")
	}
	// RFC 1952 header: ID1 ID2 CM FLG MTIME[4]: no name, comment or mtime.
	if len(a) < 10 || a[3] != 0 || !bytes.Equal(a[4:8], []byte{0, 0, 0, 0}) {
		t.Errorf("header % x carries flags or an mtime", a[:min(len(a), 10)])
	}
	for _, pad := range []int{0, 1} {
		got, err := Decode(a, pad)
		if err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte{}, ptx...), make([]byte, pad)...)
		if !bytes.Equal(got, want) {
			t.Errorf("pad %d: round trip gave %d bytes, want %d", pad, len(got), len(want))
		}
	}
}

func TestDecodeRefusesBadInput(t *testing.T) {
	good, err := Encode([]byte(".version 7.8\n.target sm_80\n"))
	if err != nil {
		t.Fatal(err)
	}
	corrupt := func(i int, v byte) []byte {
		b := append([]byte{}, good...)
		b[(i+len(b))%len(b)] ^= v
		return b
	}
	var bomb bytes.Buffer // MaxSize+1 bytes of zeros, ~64 KiB compressed
	w := gzip.NewWriter(&bomb)
	zeros := make([]byte, 1<<20)
	for n := 0; n <= MaxSize; n += len(zeros) {
		w.Write(zeros[:min(len(zeros), MaxSize+1-n)])
	}
	w.Close()
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "EOF"},
		{"plain PTX", []byte(".version 7.8\n"), "invalid header"},
		{"truncated", good[:len(good)-6], "EOF"},
		{"bad CRC", corrupt(-8, 0xff), "checksum"},
		{"lying ISIZE", corrupt(-1, 0x7f), "checksum"},
		{"oversized", bomb.Bytes(), "beyond 64 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.in, 1)
			if err == nil || !strings.HasPrefix(err.Error(), "ptxgz: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode = %d bytes, %v; want an error about %q", len(got), err, tc.want)
			}
		})
	}
}
