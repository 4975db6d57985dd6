package testmodel

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"math"
	"os"
	"testing"
)

// Gunzip returns the decompressed contents of the gzip file at path,
// failing tb on any error.
func Gunzip(tb testing.TB, path string) []byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Float32s decodes b as little-endian float32s (a trailing partial value
// is dropped), the layout the fixture scripts write logits in.
func Float32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// LogSoftmaxAt is log p(next) of one logit row, in float64.
func LogSoftmaxAt(row []float32, next int32) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return float64(row[next]) - mx - math.Log(s)
}
