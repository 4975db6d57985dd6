package kvcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/ftchat/ftchat/internal/safefile"
)

// ScalesFormat identifies a static-scales file (docs/kv-cache.md).
const ScalesFormat = "ftchat-kv-scales/1"

// ScalesFile holds static FP8 scales for one model: --kv-scales FILE,
// written by `ftchat calibrate`. Scales are amax/FP8_MAX of DType, per
// attention layer and KV head (a per-layer file has one value per layer).
type ScalesFile struct {
	Model   string // informative: the model the scales were measured on
	DType   DType  // FP8 format whose FP8_MAX the scales are relative to
	Layers  int    // attention layers
	KVHeads int
	K, V    [][]float32 // [layer][kv_head], or [layer][1] when per layer
	Calib   *CalibInfo  // how the scales were made; nil for checkpoint scales
}

// CalibInfo records how a calibration was run.
type CalibInfo struct {
	Tokens     int     `json:"tokens"`
	Percentile float64 `json:"percentile"`
	Margin     float64 `json:"margin"`
	Source     string  `json:"source,omitempty"`
}

type scalesJSON struct {
	Format      string          `json:"format"`
	Model       string          `json:"model"`
	DType       string          `json:"dtype"`
	Layers      int             `json:"layers"`
	KVHeads     int             `json:"kv_heads"`
	KScale      json.RawMessage `json:"k_scale"`
	VScale      json.RawMessage `json:"v_scale"`
	Calibration *CalibInfo      `json:"calibration,omitempty"`
}

// maxScalesFile bounds a scales file: static scales are per layer and KV
// head (a few thousand numbers), so real files are kilobytes.
const maxScalesFile = 64 << 20

// LoadScales reads and checks a scales file; errors name the file and the problem.
func LoadScales(path string) (*ScalesFile, error) {
	b, err := safefile.ReadFile(path, maxScalesFile, "--kv-scales")
	if err != nil {
		return nil, err
	}
	f, err := ParseScales(b)
	if err != nil {
		return nil, fmt.Errorf("--kv-scales %s: %w", path, err)
	}
	return f, nil
}

// ParseScales decodes the JSON of a scales file.
func ParseScales(b []byte) (*ScalesFile, error) {
	var j scalesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("not a kv scales file: %w", err)
	}
	if j.Format != ScalesFormat {
		return nil, fmt.Errorf("format %q, want %q (write one with `ftchat calibrate`)", j.Format, ScalesFormat)
	}
	d, err := ParseDType(j.DType)
	if err != nil || !d.IsFP8() {
		return nil, fmt.Errorf("dtype %q: scales are for fp8_e4m3 or fp8_e5m2", j.DType)
	}
	f := &ScalesFile{Model: j.Model, DType: d, Layers: j.Layers, KVHeads: j.KVHeads, Calib: j.Calibration}
	if f.K, err = parseScaleTable(j.KScale, "k_scale"); err != nil {
		return nil, err
	}
	if f.V, err = parseScaleTable(j.VScale, "v_scale"); err != nil {
		return nil, err
	}
	return f, f.check()
}

// parseScaleTable accepts [layer] or [layer][kv_head].
func parseScaleTable(raw json.RawMessage, name string) ([][]float32, error) {
	var perHead [][]float32
	if err := json.Unmarshal(raw, &perHead); err == nil {
		return perHead, nil
	}
	var perLayer []float32
	if err := json.Unmarshal(raw, &perLayer); err != nil {
		return nil, fmt.Errorf("%s must be an array of numbers per layer or of arrays per [layer][kv_head]", name)
	}
	t := make([][]float32, len(perLayer))
	for i, s := range perLayer {
		t[i] = []float32{s}
	}
	return t, nil
}

func (f *ScalesFile) check() error {
	if f.Layers <= 0 || f.KVHeads <= 0 {
		return fmt.Errorf("layers %d, kv_heads %d: both must be positive", f.Layers, f.KVHeads)
	}
	for _, t := range []struct {
		name string
		tab  [][]float32
	}{{"k_scale", f.K}, {"v_scale", f.V}} {
		if len(t.tab) != f.Layers {
			return fmt.Errorf("%s has %d layers, the file says %d", t.name, len(t.tab), f.Layers)
		}
		for l, row := range t.tab {
			if len(row) != 1 && len(row) != f.KVHeads {
				return fmt.Errorf("%s[%d] has %d values; want 1 (per layer) or kv_heads = %d", t.name, l, len(row), f.KVHeads)
			}
			for h, s := range row {
				if !(s > 0) || math.IsInf(float64(s), 0) {
					return fmt.Errorf("%s[%d][%d] = %v; scales must be positive and finite", t.name, l, h, s)
				}
			}
		}
	}
	return nil
}

// Save writes the file as indented JSON (per-layer tables as flat arrays).
func (f *ScalesFile) Save(path string) error {
	if err := f.check(); err != nil {
		return fmt.Errorf("kv scales for %s: %w", f.Model, err)
	}
	enc := func(t [][]float32) json.RawMessage {
		var v any = t
		if f.perLayer() {
			flat := make([]float32, len(t))
			for i, r := range t {
				flat[i] = r[0]
			}
			v = flat
		}
		b, _ := json.Marshal(v)
		return b
	}
	b, err := json.MarshalIndent(scalesJSON{
		Format: ScalesFormat, Model: f.Model, DType: f.DType.String(), Layers: f.Layers, KVHeads: f.KVHeads,
		KScale: enc(f.K), VScale: enc(f.V), Calibration: f.Calib,
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func (f *ScalesFile) perLayer() bool {
	for l := range f.K {
		if len(f.K[l]) != 1 || len(f.V[l]) != 1 {
			return false
		}
	}
	return true
}

// Match checks the file against the model's attention shape; the message
// names the option, what the file has and what the model needs.
func (f *ScalesFile) Match(layers, kvHeads int) error {
	if f.Layers != layers || f.KVHeads != kvHeads {
		return fmt.Errorf("--kv-scales: the file was made for %q with %d attention layers x %d kv heads; this model has %d x %d (run `ftchat calibrate` for this model, or drop --kv-scales for dynamic scales)",
			f.Model, f.Layers, f.KVHeads, layers, kvHeads)
	}
	return nil
}

// Expand returns the scales as Layout.KScale/VScale ([layer*kvHeads+head])
// for dtype d. Scales made for the other FP8 format are rescaled by the
// ratio of the formats' maxima, so the same amax maps to d's FP8_MAX.
func (f *ScalesFile) Expand(d DType) (k, v []float32, err error) {
	if !d.IsFP8() {
		return nil, nil, fmt.Errorf("--kv-scales needs an fp8 --kv-cache-dtype (fp8_e4m3 or fp8_e5m2), not %s", d)
	}
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	ratio := f.DType.FP8Max() / d.FP8Max()
	exp := func(t [][]float32) []float32 {
		out := make([]float32, 0, f.Layers*f.KVHeads)
		for _, row := range t {
			for h := range f.KVHeads {
				out = append(out, row[min(h, len(row)-1)]*ratio)
			}
		}
		return out
	}
	return exp(f.K), exp(f.V), nil
}

// Calibration histograms: |x| in log2 bins, histPerOctave bins per
// power of two over [2^histMinExp, 2^histMaxExp).
const (
	histPerOctave = 32
	histMinExp    = -64
	histMaxExp    = 64
	histBins      = (histMaxExp - histMinExp) * histPerOctave
)

// CalibOptions tune how observed magnitudes become scales.
type CalibOptions struct {
	// Percentile of |x| per (layer, head) taken as the clipping value, in
	// (0, 100]; 0 or 100 means the exact maximum. Below 100 the value is
	// the upper edge of its histogram bin (at most 2.2% above the exact
	// percentile), never above the maximum.
	Percentile float64
	// Margin multiplies the clipping value (headroom for inputs larger than
	// any in the sample); 0 means 1.
	Margin float64
	// PerLayer takes the largest value over a layer's heads (one scale per layer).
	PerLayer bool
}

// Calibrator accumulates |K| (after RoPE) and |V| per attention layer and
// KV head from sample text, for static FP8 scales. Safe for concurrent use.
type Calibrator struct {
	mu              sync.Mutex
	layers, kvHeads int
	headDim         int
	rows            []int        // rows observed per layer
	kmax, vmax      [][]float32  // [layer][head]
	khist, vhist    [][][]uint64 // [layer][head][bin], allocated lazily
	kzero, vzero    [][]uint64   // exact zeros (and values below the histogram)
}

// NewCalibrator prepares a calibrator for a model's attention shape.
func NewCalibrator(layers, kvHeads, headDim int) (*Calibrator, error) {
	if layers <= 0 || kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("calibrate: layers %d, kv heads %d, head_dim %d must all be positive", layers, kvHeads, headDim)
	}
	c := &Calibrator{layers: layers, kvHeads: kvHeads, headDim: headDim, rows: make([]int, layers)}
	mk := func() [][]float32 {
		t := make([][]float32, layers)
		for i := range t {
			t[i] = make([]float32, kvHeads)
		}
		return t
	}
	mz := func() [][]uint64 {
		t := make([][]uint64, layers)
		for i := range t {
			t[i] = make([]uint64, kvHeads)
		}
		return t
	}
	c.kmax, c.vmax, c.kzero, c.vzero = mk(), mk(), mz(), mz()
	c.khist, c.vhist = make([][][]uint64, layers), make([][][]uint64, layers)
	return c, nil
}

func histBin(a float32) int {
	fr, e := math.Frexp(float64(a)) // a = fr * 2^e, fr in [0.5, 1)
	b := (e-1-histMinExp)*histPerOctave + int((fr*2-1)*histPerOctave)
	return min(max(b, 0), histBins-1)
}

// histUpper is the upper edge of bin b.
func histUpper(b int) float64 {
	oct, sub := b/histPerOctave, b%histPerOctave
	return math.Ldexp(1+float64(sub+1)/histPerOctave, oct+histMinExp)
}

// Observe records one token's K (post-RoPE) and V rows of layer, each
// [kvHeads*headDim]. NaN and Inf values are ignored.
func (c *Calibrator) Observe(layer int, k, v []float32) {
	w := c.kvHeads * c.headDim
	if layer < 0 || layer >= c.layers || len(k) != w || len(v) != w {
		panic(fmt.Sprintf("kvcache: Calibrator.Observe(layer %d, k %d, v %d): want layer < %d and rows of %d", layer, len(k), len(v), c.layers, w))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.khist[layer] == nil {
		c.khist[layer], c.vhist[layer] = make([][]uint64, c.kvHeads), make([][]uint64, c.kvHeads)
		for h := range c.kvHeads {
			c.khist[layer][h], c.vhist[layer][h] = make([]uint64, histBins), make([]uint64, histBins)
		}
	}
	c.rows[layer]++
	for h := range c.kvHeads {
		observeRow(k[h*c.headDim:(h+1)*c.headDim], &c.kmax[layer][h], c.khist[layer][h], &c.kzero[layer][h])
		observeRow(v[h*c.headDim:(h+1)*c.headDim], &c.vmax[layer][h], c.vhist[layer][h], &c.vzero[layer][h])
	}
}

func observeRow(row []float32, amax *float32, hist []uint64, zeros *uint64) {
	for _, x := range row {
		a := float32(math.Abs(float64(x)))
		if a != a || math.IsInf(float64(a), 0) {
			continue
		}
		if a < 0x1p-64 {
			*zeros++
			continue
		}
		*amax = max(*amax, a)
		hist[histBin(a)]++
	}
}

// Tokens is the number of rows observed in layer 0.
func (c *Calibrator) Tokens() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rows[0]
}

func clipValue(amax float32, hist []uint64, zeros uint64, pct float64) float64 {
	if pct <= 0 || pct >= 100 || hist == nil {
		return float64(amax)
	}
	var total uint64 = zeros
	for _, n := range hist {
		total += n
	}
	target := uint64(math.Ceil(pct / 100 * float64(total)))
	cum := zeros
	if cum >= target {
		return 0
	}
	for b, n := range hist {
		cum += n
		if cum >= target {
			return math.Min(histUpper(b), float64(amax))
		}
	}
	return float64(amax)
}

// ErrNoSamples is returned by Scales when nothing was observed for a layer.
var ErrNoSamples = errors.New("calibrate: no K/V rows observed")

// Scales turns the observations into a scales file for dtype d:
// scale = clip * margin / FP8_MAX(d). A head whose sample was all zeros
// gets scale 1/FP8_MAX(d) (any positive value represents zeros exactly).
func (c *Calibrator) Scales(model string, d DType, o CalibOptions) (*ScalesFile, error) {
	if !d.IsFP8() {
		return nil, fmt.Errorf("calibrate: dtype %s; scales are for fp8_e4m3 or fp8_e5m2", d)
	}
	if o.Percentile < 0 || o.Percentile > 100 {
		return nil, fmt.Errorf("calibrate: percentile %v must be in (0, 100]", o.Percentile)
	}
	margin := o.Margin
	if margin == 0 {
		margin = 1
	}
	if !(margin > 0) || math.IsInf(margin, 0) {
		return nil, fmt.Errorf("calibrate: margin %v must be positive", o.Margin)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for l, n := range c.rows {
		if n == 0 {
			return nil, fmt.Errorf("%w for attention layer %d", ErrNoSamples, l)
		}
	}
	fmax := float64(d.FP8Max())
	f := &ScalesFile{Model: model, DType: d, Layers: c.layers, KVHeads: c.kvHeads,
		Calib: &CalibInfo{Tokens: c.rows[0], Percentile: o.Percentile, Margin: margin}}
	if f.Calib.Percentile == 0 {
		f.Calib.Percentile = 100
	}
	table := func(amax [][]float32, hist [][][]uint64, zeros [][]uint64) [][]float32 {
		t := make([][]float32, c.layers)
		for l := range t {
			vals := make([]float64, c.kvHeads)
			for h := range vals {
				vals[h] = clipValue(amax[l][h], hist[l][h], zeros[l][h], o.Percentile)
			}
			if o.PerLayer {
				m := 0.0
				for _, v := range vals {
					m = math.Max(m, v)
				}
				vals = []float64{m}
			}
			t[l] = make([]float32, len(vals))
			for h, v := range vals {
				s := float32(v * margin / fmax)
				if !(s > 0) {
					s = float32(1 / fmax)
				}
				t[l][h] = s
			}
		}
		return t
	}
	f.K = table(c.kmax, c.khist, c.kzero)
	f.V = table(c.vmax, c.vhist, c.vzero)
	return f, f.check()
}

// ObserveStore feeds the calibrator every row of the first n tokens of a
// sequence (page table pages) in every layer of s, as stored (post-RoPE K).
// `ftchat calibrate` prefills sample text into a 16-bit pool and calls it
// per window; bf16 storage moves an amax by at most 2^-8 relative.
func (c *Calibrator) ObserveStore(s *HostStore, pages []int32, n int) error {
	l := s.Layout()
	if l.Layers != c.layers || l.KVHeads != c.kvHeads || l.HeadDim != c.headDim {
		return fmt.Errorf("calibrate: pool of %d layers x %d kv heads x %d dims, calibrator for %d x %d x %d",
			l.Layers, l.KVHeads, l.HeadDim, c.layers, c.kvHeads, c.headDim)
	}
	if n < 0 || n > len(pages)*l.PageSize {
		return fmt.Errorf("calibrate: %d tokens with a page table of %d pages of %d", n, len(pages), l.PageSize)
	}
	k, v := make([]float32, l.KVHeads*l.HeadDim), make([]float32, l.KVHeads*l.HeadDim)
	for layer := range l.Layers {
		for t := range n {
			s.ReadRow(layer, int(pages[t/l.PageSize]), t%l.PageSize, k, v)
			c.Observe(layer, k, v)
		}
	}
	return nil
}
