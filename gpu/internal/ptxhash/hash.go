// Package ptxhash computes the source hash recorded in generated PTX: the
// SHA-256 of a .cu file together with every file it includes with
// #include "..." (recursively), so editing a shared header makes every
// PTX built from it stale.
package ptxhash

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Prefix starts the header line that records the hash in a PTX file.
const Prefix = "// source-sha256: "

// Source hashes dir/name and its quoted includes (resolved in dir).
func Source(dir, name string) (string, error) {
	h := sha256.New()
	seen := map[string]bool{}
	var add func(n string) error
	add = func(n string) error {
		if seen[n] {
			return nil
		}
		seen[n] = true
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return fmt.Errorf("ptxhash: %w", err)
		}
		if len(seen) > 1 { // the top file alone hashes as its plain bytes
			fmt.Fprintf(h, "\x00%s\x00", n)
		}
		h.Write(b)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if inc, ok := strings.CutPrefix(line, "#include \""); ok {
				if i := strings.IndexByte(inc, '"'); i > 0 {
					if err := add(inc[:i]); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if err := add(name); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Recorded returns the hash recorded in the header of a generated PTX.
func Recorded(ptx []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(ptx))
	for i := 0; i < 5 && sc.Scan(); i++ {
		if v, ok := strings.CutPrefix(sc.Text(), Prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Targets lists the PTX flavours generated for a source: sm75 (the
// fp16-compute flavour, see ComputeFlags), sm80 and sm89 always, plus those it asks for with a line "// ptxgen-targets: sm90"
// (code that uses instructions newer PTX targets have, e.g. the FP8 cvt
// that PTX ISA 7.8 offers on sm_90 only).
func Targets(code []byte) []string {
	ts := []string{"sm75", "sm80", "sm89"}
	for _, line := range strings.Split(string(code), "\n") {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), "// ptxgen-targets:"); ok {
			ts = append(ts, strings.Fields(f)...)
		}
	}
	return ts
}

// ComputeFlags are the extra nvcc flags of a flavour: sm75 is built with
// FT_COMPUTE_F16, under which every tensor-core path takes fp16 operands
// (Turing has no bf16 MMA); newer GPUs load it for --compute-dtype fp16.
func ComputeFlags(target string) []string {
	if target == "sm75" {
		return []string{"-DFT_COMPUTE_F16=1"}
	}
	return nil
}
