//go:build linux

package mmapfile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReleaseDropsWholePages maps a file, reads it all, releases unaligned
// ranges and checks through /proc/self/pagemap that exactly the whole pages
// inside each range left the process, that the neighbours' pages stayed,
// and that the bytes read back unchanged afterwards (from the file).
func TestReleaseDropsWholePages(t *testing.T) {
	pg := os.Getpagesize()
	want := make([]byte, 40*pg)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := Open(path, "test file", func(int64) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	for _, tc := range []struct {
		name       string
		lo, hi     int // released range
		gone       []int
		releasedPg int
	}{
		{"inside one page", 5*pg + 1, 6*pg - 1, nil, 0},
		{"aligned", 8 * pg, 10 * pg, []int{8, 9}, 2},
		{"unaligned ends", 12*pg + 100, 17*pg + 5, []int{13, 14, 15, 16}, 4},
		{"to the end", 30*pg + 1, 40 * pg, []int{31, 32, 33, 34, 35, 36, 37, 38, 39}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(data, want) { // touches every page
				t.Fatal("mapping differs from the file")
			}
			n, err := Release(data[tc.lo:tc.hi])
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.releasedPg*pg {
				t.Errorf("released %d bytes, want %d", n, tc.releasedPg*pg)
			}
			res, err := Resident(data)
			if err != nil {
				t.Fatal(err)
			}
			gone := map[int]bool{}
			for _, p := range tc.gone {
				gone[p] = true
			}
			for p, in := range res {
				if in == gone[p] {
					t.Errorf("page %d resident %v, want %v", p, in, !gone[p])
				}
			}
			if !bytes.Equal(data, want) {
				t.Fatal("released pages read back different bytes")
			}
			if res, _ := Resident(data[tc.lo:tc.hi]); len(tc.gone) > 0 && !res[1] {
				t.Error("a released page read again is not resident")
			}
		})
	}
}

// TestGuardFaults: under Guard a read of a released page kills the process
// (run in a child: the test binary re-executed), while a read of the page
// beside it, which the release did not cover, succeeds.
func TestGuardFaults(t *testing.T) {
	pg := os.Getpagesize()
	if path := os.Getenv("MMAPFILE_GUARD_CHILD"); path != "" {
		data, _, err := Open(path, "test file", func(int64) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		Guard(true)
		if _, err := Release(data[pg+1 : 3*pg]); err != nil {
			t.Fatal(err)
		}
		println("read beside:", data[pg])
		println("read released:", data[2*pg])
		return
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, bytes.Repeat([]byte{7}, 4*pg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGuardFaults$")
	cmd.Env = append(os.Environ(), "MMAPFILE_GUARD_CHILD="+path)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("reading a guarded released page did not fault:\n%s", out)
	}
	if !bytes.Contains(out, []byte("read beside: 7")) || bytes.Contains(out, []byte("read released:")) || !bytes.Contains(out, []byte("fault")) {
		t.Fatalf("want the page beside read and a fault at the released one; got:\n%s", out)
	}
}
