package ui

import (
	"strings"
	"testing"
)

// /kvdtype takes K and V apart ("k=bf16 v=fp8_e4m3"); a malformed pair is
// one error line and starts no switch, a valid one reaches the engine as
// typed.
func TestKVDTypePairs(t *testing.T) {
	for _, tc := range []struct {
		in, err string // err: substring of the error; "" = the switch starts
	}{
		{"/kvdtype k=bf16 v=fp8_e4m3", ""},
		{"/kvdtype v=fp8", ""},
		{"/kvdtype k=int8", "k=int8 is not supported"},
		{"/kvdtype k=bf16 k=fp16", "k= is given twice"},
		{"/kvdtype q=bf16", "name each half k=DTYPE"},
		{"/kvdtype fp4", "or k=<dtype> v=<dtype> to store K and V apart"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d := newDriver(t, nil)
			d.submit(tc.in)
			e := d.lastEntry()
			if tc.err != "" {
				if e.kind != entryError || !strings.Contains(e.text, tc.err) || strings.Contains(e.text, "\n") {
					t.Fatalf("entry kind=%d %q; want one error line containing %q", e.kind, e.text, tc.err)
				}
				if len(d.eng.reconfs) != 0 {
					t.Fatalf("a refused spec started a switch: %v", d.eng.reconfs)
				}
				return
			}
			if e.kind == entryError {
				t.Fatalf("refused: %q", e.text)
			}
			d.settle()
			if want := strings.TrimPrefix(tc.in, "/kvdtype "); len(d.eng.reconfs) != 1 || d.eng.reconfs[0] != want {
				t.Fatalf("engine got %v, want [%s]", d.eng.reconfs, want)
			}
		})
	}
}
