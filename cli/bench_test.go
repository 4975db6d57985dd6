package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/quality"
)

var updateBench = flag.Bool("update", false, "rewrite the golden files in testdata/bench")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "bench", name)
	if *updateBench {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cli -run %s -update)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestCapacityRowsHandComputed(t *testing.T) {
	const gib = int64(1) << 30
	cases := []struct {
		name                 string
		layers, heads, dim   int
		budget, weights, ws  int64
		pageSize             int
		bf16Tokens, e4Tokens int
		staticTokens         int
	}{
		// Qwen3.6-35B-A3B hybrid: 10 attention layers, 2 kv heads, head_dim 256.
		// bf16: 20,480 B/token -> 2.5 GiB / (16*20480) = 8192 pages = 131,072 tokens.
		// fp8:  10,400 B/token -> floor(2684354560 / 166400) = 16131 pages = 258,096 tokens.
		// static: 10,240 B/token and a 160-byte scale table -> floor((2684354560-160)/163840) = 16383 pages.
		{"qwen3.6", 10, 2, 256, 5 * gib / 2, 0, 0, 16, 131072, 258096, 262128},
		// SmolLM2-135M: 23,040 and 12,240 B/token; 1 GiB - 100 MiB weights - 28 MiB workspace
		// = 939524096 B: bf16 floor(939524096/368640) = 2548 pages; fp8 floor(939524096/195840) = 4797.
		// static: (939524096-720)/184320 = 5097 pages.
		{"smollm2", 30, 3, 64, gib, 100 << 20, 28 << 20, 16, 2548 * 16, 4797 * 16, 5097 * 16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := kvcache.Layout{Layers: c.layers, KVHeads: c.heads, HeadDim: c.dim, PageSize: c.pageSize}
			rows, err := capacityRows(l, c.budget, c.weights, c.ws, kvcache.RecurrentState{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]CapacityRow{}
			for _, r := range rows {
				got[r.DType+"/"+r.ScaleMode] = r
			}
			if r := got["bf16/none"]; r.Tokens != c.bf16Tokens || r.RatioVsBF16 != 1 {
				t.Errorf("bf16: %+v, want %d tokens", r, c.bf16Tokens)
			}
			if r := got["fp16/none"]; r.Tokens != c.bf16Tokens {
				t.Errorf("fp16: %+v, want %d tokens", r, c.bf16Tokens)
			}
			for _, k := range []string{"fp8_e4m3/dynamic", "fp8_e5m2/dynamic"} {
				r := got[k]
				if r.Tokens != c.e4Tokens || r.RatioVsBF16 != float64(c.e4Tokens)/float64(c.bf16Tokens) {
					t.Errorf("%s: %+v, want %d tokens", k, r, c.e4Tokens)
				}
				if r.BytesPerToken != 2*c.layers*c.heads*(c.dim+4) {
					t.Errorf("%s: %d bytes per token, want %d", k, r.BytesPerToken, 2*c.layers*c.heads*(c.dim+4))
				}
			}
			if r := got["fp8_e4m3/static"]; r.Tokens != c.staticTokens || r.BytesPerToken != 2*c.layers*c.heads*c.dim {
				t.Errorf("static: %+v, want %d tokens", r, c.staticTokens)
			}
		})
	}
	// A budget the weights already use up is an error, not zero pages.
	l := kvcache.Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 16}
	if _, err := capacityRows(l, 1<<20, 2<<20, 0, kvcache.RecurrentState{}); err == nil {
		t.Error("budget below the weights: no error")
	}
}

func TestParseShape(t *testing.T) {
	for _, c := range []struct {
		in      string
		l, h, d int
		bad     bool
	}{
		{"32,8,128", 32, 8, 128, false},
		{"10/40,2,256", 10, 2, 256, false},
		{" 30, 3 , 64", 30, 3, 64, false},
		{"32,8", 0, 0, 0, true},
		{"32,0,128", 0, 0, 0, true},
		{"a,8,128", 0, 0, 0, true},
	} {
		l, h, d, err := parseShape(c.in)
		if c.bad != (err != nil) || l != c.l || h != c.h || d != c.d {
			t.Errorf("parseShape(%q) = %d,%d,%d,%v", c.in, l, h, d, err)
		}
	}
}

func TestCapacityTableGolden(t *testing.T) {
	l := kvcache.Layout{Layers: 10, KVHeads: 2, HeadDim: 256, PageSize: 16}
	rows, err := capacityRows(l, 5<<29, 0, 0, kvcache.RecurrentState{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	rep := CapacityReport{Model: "Qwen3.6-35B-A3B", Layers: 10, KVHeads: 2, HeadDim: 256, PageSize: 16, KVMemory: 5 << 29, Rows: rows}
	if err := writeCapacityTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	golden(t, "capacity_qwen36.txt", b.Bytes())
}

func TestQualityAndNeedleTablesGolden(t *testing.T) {
	base := QualityReport{Model: "m", Text: "prose.txt", TextTokens: 20736, Reference: "bf16", Window: 512, Stride: 384, Device: "cpu (2 threads)"}
	a, b := base, base
	a.DType, a.ScaleMode = "fp8_e4m3", "dynamic"
	a.Result = quality.Result{Tokens: 20735, PPLRef: 7.5, PPL: 7.55, DeltaPPLPct: 0.6667, KLDMean: 0.0123, KLDMedian: 0.004, KLDP99: 0.15, KLDMax: 1.2, Top1Agreement: 0.93, Top1AccRef: 0.5, Top1Acc: 0.49}
	b.DType, b.ScaleMode = "fp8_e4m3", "static"
	b.Result = a.Result
	var buf bytes.Buffer
	if err := writeQualityTable(&buf, []QualityReport{a, b}); err != nil {
		t.Fatal(err)
	}
	specs := []engine.KVSpec{{DType: kvcache.BF16}, {DType: kvcache.FP8E4M3}}
	res := []engine.NeedleResult{
		{KV: "bf16", Length: 1024, PromptTokens: 1080, ActualDepth: 0.1, Found: true},
		{KV: "fp8_e4m3", Length: 1024, PromptTokens: 1080, ActualDepth: 0.1, Found: true},
		{KV: "bf16", Length: 1024, PromptTokens: 1080, ActualDepth: 0.5, Found: true},
		{KV: "fp8_e4m3", Length: 1024, PromptTokens: 1080, ActualDepth: 0.5, Found: false},
	}
	buf.WriteString("\n")
	if err := writeNeedleTable(&buf, res, specs); err != nil {
		t.Fatal(err)
	}
	golden(t, "tables.txt", buf.Bytes())
}

func TestKVSpecListErrors(t *testing.T) {
	// Parsing errors that need no model.
	for _, in := range []string{"fp8_e4m3:static", "fp8_e4m3:fast", " , "} {
		if _, err := kvSpecs(nil, in, ""); err == nil || !strings.Contains(err.Error(), "--kv-cache-dtype") {
			t.Errorf("kvSpecs(%q): %v; want an error naming --kv-cache-dtype", in, err)
		}
	}
}
