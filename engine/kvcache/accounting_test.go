package kvcache

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Hand-computed from DESIGN §4: bytes per token, K and V, all attention layers.
var shapeTable = []struct {
	name                     string
	layers, kvHeads, headDim int
	bf16, fp8, fp8Static     int
}{
	// 2*30*3*128 = 23040; 2*30*3*(64+4) = 12240; 2*30*3*64 = 11520
	{"SmolLM2-135M", 30, 3, 64, 23040, 12240, 11520},
	// 2*16*8*128 = 32768; 2*16*8*68 = 17408
	{"Llama-3.2-1B", 16, 8, 64, 32768, 17408, 16384},
	// 2*32*8*256 = 131072; 2*32*8*132 = 67584
	{"Llama-3.1-8B", 32, 8, 128, 131072, 67584, 65536},
	// 2*48*4*256 = 98304; 2*48*4*132 = 50688
	{"Qwen3-30B-A3B", 48, 4, 128, 98304, 50688, 49152},
	// attention in 10 of 40 layers: 2*10*2*512 = 20480; 2*10*2*260 = 10400
	{"Qwen3.6-35B-A3B", 10, 2, 256, 20480, 10400, 10240},
}

func TestBytesPerToken(t *testing.T) {
	for _, s := range shapeTable {
		for _, c := range []struct {
			d    DType
			m    ScaleMode
			want int
		}{
			{BF16, DynamicScales, s.bf16}, {F16, DynamicScales, s.bf16}, {BF16, StaticScales, s.bf16},
			{FP8E4M3, DynamicScales, s.fp8}, {FP8E5M2, DynamicScales, s.fp8},
			{FP8E4M3, StaticScales, s.fp8Static}, {FP8E5M2, StaticScales, s.fp8Static},
		} {
			if got := BytesPerToken(s.layers, s.kvHeads, s.headDim, c.d, c.m); got != c.want {
				t.Errorf("%s %v/%v: %d bytes per token, want %d", s.name, c.d, c.m, got, c.want)
			}
		}
	}
}

func TestDesignRatios(t *testing.T) {
	want := map[string]float64{"SmolLM2-135M": 1.882, "Llama-3.2-1B": 1.882, "Llama-3.1-8B": 1.939, "Qwen3-30B-A3B": 1.939, "Qwen3.6-35B-A3B": 1.969}
	for _, s := range shapeTable {
		l := Layout{Layers: s.layers, KVHeads: s.kvHeads, HeadDim: s.headDim, PageSize: 64, Pages: 1}
		r := float64(s.bf16) / float64(s.fp8)
		if math.Abs(r-want[s.name]) > 0.0005 {
			t.Errorf("%s ratio %.4f, DESIGN says %.3f", s.name, r, want[s.name])
		}
		// At a fixed budget (8 GiB, 1 GiB of weights), tokens fp8 / tokens bf16.
		const budget, weights = 8 << 30, 1 << 30
		l.DType = BF16
		pb, err := PlanPool(budget, weights, 0, l)
		if err != nil {
			t.Fatal(err)
		}
		l.DType = FP8E4M3
		p8, err := PlanPool(budget, weights, 0, l)
		if err != nil {
			t.Fatal(err)
		}
		ratio := float64(p8) / float64(pb)
		floor := map[int]float64{64: 1.88, 128: 1.93, 256: 1.96}[s.headDim]
		if ratio < floor {
			t.Errorf("%s: %d fp8 pages / %d bf16 pages = %.4f < %.2f", s.name, p8, pb, ratio, floor)
		}
		// Pool sizes are whole pages that fit.
		if int64(p8)*l.BytesPerPage() > budget-weights || int64(p8+1)*l.BytesPerPage() <= budget-weights {
			t.Errorf("%s: %d fp8 pages is not the largest count that fits", s.name, p8)
		}
	}
}

func TestQwen36At131K(t *testing.T) {
	// 131,072 tokens: 2.50 GiB bf16, 1.27 GiB fp8 (DESIGN §4).
	l := Layout{Layers: 10, KVHeads: 2, HeadDim: 256, PageSize: 64, Pages: 131072 / 64, DType: BF16}
	if got := FormatBytes(PoolBytes(l)); got != "2.50 GiB" {
		t.Errorf("bf16 pool %s", got)
	}
	l.DType = FP8E4M3
	if PoolBytes(l) != 131072*10400 {
		t.Errorf("fp8 pool %d bytes", PoolBytes(l))
	}
	if got := FormatBytes(PoolBytes(l)); got != "1.27 GiB" {
		t.Errorf("fp8 pool %s", got)
	}
	// Static scales add their table: 2 * 10 * 2 float32.
	l.Scales = StaticScales
	if PoolBytes(l) != 131072*10240+160 {
		t.Errorf("static fp8 pool %d bytes", PoolBytes(l))
	}
}

func TestPlanPool(t *testing.T) {
	// SmolLM2 bf16, pages of 16 tokens = 368,640 bytes.
	l := Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 16, DType: BF16}
	for _, c := range []struct {
		budget, weights, work int64
		want                  int
	}{
		{100 << 20, 90 << 20, 1 << 20, 25}, // 9 MiB / 368640 = 25.6
		{368640 + 7, 0, 7, 1},              // exactly one page
		{1 << 30, 0, 0, 2912},              // 1073741824 / 368640 = 2912.7
	} {
		got, err := PlanPool(c.budget, c.weights, c.work, l)
		if err != nil || got != c.want {
			t.Errorf("PlanPool(%d, %d, %d) = %d, %v; want %d", c.budget, c.weights, c.work, got, err, c.want)
		}
	}
	_, err := PlanPool(1<<30, 1<<30, 1, l)
	if err == nil || !strings.Contains(err.Error(), "less than one KV page") || !strings.Contains(err.Error(), "--gpu-memory") {
		t.Errorf("over budget: %v", err)
	}
	// Static fp8 scales: the table (2*30*3*4 = 720 bytes) comes off the top.
	l.DType, l.Scales = FP8E4M3, StaticScales
	l.KScale, l.VScale = make([]float32, 90), make([]float32, 90)
	for i := range l.KScale {
		l.KScale[i], l.VScale[i] = 1, 1
	}
	page := int64(16 * 11520)
	if got, err := PlanPool(3*page+720, 0, 0, l); err != nil || got != 3 {
		t.Errorf("static: %d %v, want 3", got, err)
	}
	if got, _ := PlanPool(3*page+719, 0, 0, l); got != 2 {
		t.Errorf("static: %d, want 2", got)
	}
}

func TestCapacityTokensAndStats(t *testing.T) {
	l := Layout{Layers: 32, KVHeads: 8, HeadDim: 128, PageSize: 16, Pages: 100, DType: FP8E4M3}
	pool := int64(8 << 30)
	if got, want := CapacityTokens(pool, l, BF16, DynamicScales), int(pool/(131072*16))*16; got != want {
		t.Errorf("bf16 capacity %d want %d", got, want)
	}
	if got, want := CapacityTokens(pool, l, FP8E4M3, DynamicScales), int(pool/(67584*16))*16; got != want {
		t.Errorf("fp8 capacity %d want %d", got, want)
	}
	p, err := NewPool(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := p.NewSequence()
	if _, err := s.Append(make([]int32, 100)...); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	want := PoolStats{DType: FP8E4M3, VDType: FP8E4M3, PageSize: 16, PagesTotal: 100, PagesUsed: 7, PagesFree: 93, TokensCapacity: 1600,
		TokensUsed: 100, TokensFree: 93 * 16, SeqTokens: 100, Sequences: 1, BytesPerToken: 67584,
		PoolBytes: 1600 * 67584, BytesReserved: 7 * 16 * 67584, BytesUsed: 100 * 67584, BytesBF16: 100 * 131072,
		CapacityRatio: 131072.0 / 67584, ComputedTokens: 100}
	if st != want {
		t.Errorf("stats\n got %+v\nwant %+v", st, want)
	}
}

// Each half is counted in its own dtype: SmolLM2's shape (30 layers, 3 kv
// heads, head_dim 64) has a bf16 half of 11,520 B/token and an fp8 half
// (dynamic scales) of 30*3*(64+4) = 6,120.
func TestMixedAccounting(t *testing.T) {
	base := Layout{Layers: 30, KVHeads: 3, HeadDim: 64, PageSize: 64, Pages: 10}
	for _, c := range []struct {
		k, v   DType
		m      ScaleMode
		bpt    int
		static int64 // static scale table bytes
		name   string
	}{
		{BF16, BF16, DynamicScales, 23040, 0, "bf16"},
		{BF16, FP8E4M3, DynamicScales, 11520 + 6120, 0, "k=bf16 v=fp8_e4m3"},
		{FP8E4M3, BF16, DynamicScales, 6120 + 11520, 0, "k=fp8_e4m3 v=bf16"},
		{FP8E5M2, FP8E4M3, DynamicScales, 12240, 0, "k=fp8_e5m2 v=fp8_e4m3"},
		{F16, FP8E5M2, StaticScales, 11520 + 5760, 30 * 3 * 4, "k=fp16 v=fp8_e5m2"},
		{FP8E4M3, FP8E4M3, StaticScales, 11520, 2 * 30 * 3 * 4, "fp8_e4m3"},
	} {
		l := base.WithDTypes(c.k, c.v)
		l.Scales = c.m
		if c.m == StaticScales {
			for range 90 {
				l.KScale, l.VScale = append(l.KScale, 1), append(l.VScale, 1)
			}
		}
		if got := l.BytesPerToken(); got != c.bpt {
			t.Errorf("%s: %d bytes/token, want %d", c.name, got, c.bpt)
		}
		if got, want := PoolBytes(l), int64(10*64*c.bpt)+c.static; got != want {
			t.Errorf("%s: pool %d bytes, want %d", c.name, got, want)
		}
		if got := l.DTypeName(); got != c.name {
			t.Errorf("name %q, want %q", got, c.name)
		}
		if l.Mixed() != (c.k != c.v) || l.KType() != c.k || l.VType() != c.v {
			t.Errorf("%s: Mixed %v, K %v, V %v", c.name, l.Mixed(), l.KType(), l.VType())
		}
		if c.m == DynamicScales {
			budget := int64(7 << 30)
			if got, want := CapacityTokensKV(budget, l, DynamicScales), int(budget/int64(64*c.bpt))*64; got != want {
				t.Errorf("%s: capacity %d tokens, want %d", c.name, got, want)
			}
		}
		p, err := NewPool(l, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := p.Stats()
		if st.DType != c.k || st.VDType != c.v || st.BytesPerToken != c.bpt || st.CapacityRatio != 23040/float64(c.bpt) {
			t.Errorf("%s: stats %v/%v %d B/token ratio %v", c.name, st.DType, st.VDType, st.BytesPerToken, st.CapacityRatio)
		}
	}
	// A bf16 half means fp8 would hold more: the pool-full message says so.
	l := base.WithDTypes(FP8E4M3, BF16)
	p, _ := NewPool(l, nil)
	s := p.NewSequence()
	_, err := s.Append(make([]int32, 10*64+1)...)
	var full *PoolFullError
	if !errors.As(err, &full) || full.E4M3Capacity != int(PoolBytes(l)/(12240*64))*64 ||
		!strings.Contains(err.Error(), "the k=fp8_e4m3 v=bf16 pool holds 640 tokens") {
		t.Errorf("pool full: %v (fp8 capacity %d)", err, full.E4M3Capacity)
	}
}

func TestParseDTypePair(t *testing.T) {
	for _, c := range []struct {
		in   string
		k, v DType
		err  string
	}{
		{"fp8", FP8E4M3, FP8E4M3, ""},
		{"k=bf16 v=fp8_e4m3", BF16, FP8E4M3, ""},
		{"V=e5m2,K=fp16", F16, FP8E5M2, ""},
		{"k=fp8_e4m3/v=bf16", FP8E4M3, BF16, ""},
		{"value=fp8 key=bf16", BF16, FP8E4M3, ""},
		{"v=fp8", F16, FP8E4M3, ""}, // K keeps the current fp16
		{"k=auto", Auto, BF16, ""},
		{"k=int8", 0, 0, "k=int8 is not supported"},
		{"q=bf16", 0, 0, "name each half k=DTYPE"},
		{"k=bf16 k=fp8", 0, 0, "k= is given twice"},
		{"bf16 v=fp8", 0, 0, `"bf16": name each half`},
		{"fp4", 0, 0, "--kv-cache-dtype \"fp4\" is not supported"},
	} {
		k, v, err := ParseDTypePair(c.in, F16, BF16)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || k != c.k || v != c.v {
			t.Errorf("%q: %v %v %v, want %v %v", c.in, k, v, err, c.k, c.v)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.50 KiB", 5 << 20: "5.00 MiB", 3 << 30: "3.00 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q want %q", n, got, want)
		}
	}
}
