package synth

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/ftchat/ftchat/engine/gguf"
)

// WeightStd is the standard deviation of the random matrices and biases
// (a typical transformer init); norm weights are 1 + the same noise.
const WeightStd = 0.02

// chunkElems is the target work unit: about a million elements, rounded to
// whole rows, so that generation parallelises inside large tensors while
// the output stays independent of the number of workers.
const chunkElems = 1 << 20

// Write creates path (via a temporary file, renamed on success) holding the
// model described by spec with weights drawn deterministically from seed.
// Tensors are generated and quantized in parallel on all cores and streamed
// to disk in order, so memory use stays at a few chunks per core whatever
// the model size. progress, if not nil, is called with the tensor bytes
// written so far and the total.
func Write(path string, spec Spec, seed uint64, progress func(done, total int)) (err error) {
	if err := spec.Validate(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 4<<20)
	if err := WriteTo(bw, spec, seed, progress); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("synth: write %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; a model file is ordinary data.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("synth: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("synth: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// job is one chunk of rows of one tensor.
type job struct {
	plan     *tensorPlan
	tensor   int // index in the plan, for seeding
	row0     int // first row of the chunk
	rows     int
	rowElems int
	out      []byte
	done     chan struct{}
}

// WriteTo streams the model to w; see Write.
func WriteTo(w io.Writer, spec Spec, seed uint64, progress func(done, total int)) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	kv, err := spec.Metadata()
	if err != nil {
		return err
	}
	plan := spec.plan()
	infos := make([]gguf.TensorInfo, len(plan))
	total := 0
	for i, p := range plan {
		infos[i] = p.info
		total += int(p.info.Bytes())
	}
	gw, err := gguf.NewWriter(w, kv, infos)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}

	workers := runtime.GOMAXPROCS(0)
	work := make(chan *job)
	ordered := make(chan *job, 2*workers) // bounds the chunks in flight
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var scratch []float32
			for j := range work {
				scratch = j.generate(spec, seed, scratch)
				close(j.done)
			}
		}()
	}
	go func() { // producer: chunks in file order
		defer close(work)
		defer close(ordered)
		for i := range plan {
			p := &plan[i]
			rowElems := int(p.info.Dims[0])
			rows := int(p.info.Elements()) / rowElems
			per := max(1, chunkElems/rowElems)
			for r := 0; r < rows; r += per {
				j := &job{plan: p, tensor: i, row0: r, rows: min(per, rows-r), rowElems: rowElems, done: make(chan struct{})}
				select {
				case ordered <- j:
				case <-stop:
					return
				}
				work <- j
			}
		}
	}()

	done := 0
	var werr error
	for j := range ordered {
		<-j.done
		if werr == nil {
			if _, err := gw.Write(j.out); err != nil {
				werr = err
				close(stop)
			}
			done += len(j.out)
			if progress != nil && werr == nil {
				progress(done, total)
			}
		}
		j.out = nil
	}
	wg.Wait()
	if werr != nil {
		return fmt.Errorf("synth: %w", werr)
	}
	if err := gw.Close(); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// generate fills the chunk's rows and encodes them; scratch is reused.
func (j *job) generate(spec Spec, seed uint64, scratch []float32) []float32 {
	n := j.rows * j.rowElems
	if cap(scratch) < n {
		scratch = make([]float32, n)
	}
	x := scratch[:n]
	p := j.plan
	switch p.fill {
	case fillRopeFreqs:
		copy(x, RopeFreqFactors(spec.HeadDim, spec.RopeBase, *spec.Llama3))
	case fillValues:
		copy(x, p.scale)
	case fillSSMA, fillDtBias, fillConv:
		rng := rand.New(rand.NewPCG(seed, chunkSeed(p.info.Name, j.row0)))
		for i := range x {
			u := rng.Float64()
			switch p.fill {
			case fillSSMA: // -exp(A_log) with A = exp(U(0, ln 16))
				x[i] = float32(-math.Exp(u * math.Log(16)))
			case fillDtBias: // the inverse softplus of dt = exp(U(ln 1e-3, ln 0.1))
				dt := math.Exp(math.Log(1e-3) + u*(math.Log(0.1)-math.Log(1e-3)))
				x[i] = float32(dt + math.Log(-math.Expm1(-dt)))
			default:
				x[i] = float32(u - 0.5)
			}
		}
	default:
		rng := rand.New(rand.NewPCG(seed, chunkSeed(p.info.Name, j.row0)))
		for i := range x {
			x[i] = float32(rng.NormFloat64() * WeightStd)
		}
		if p.fill == fillNorm {
			for i := range x {
				x[i]++
			}
		}
	}
	if p.fill == fillWeight && p.scale != nil {
		// NVFP4: quantize w / scale; the file's <name>.scale restores w.
		groupRows := int(p.info.Elements()) / j.rowElems / len(p.scale)
		for r := 0; r < j.rows; r++ {
			inv := 1 / p.scale[(j.row0+r)/groupRows]
			row := x[r*j.rowElems : (r+1)*j.rowElems]
			for i := range row {
				row[i] *= inv
			}
		}
	}
	t := p.info.Type
	j.out = make([]byte, n/t.BlockElems()*t.BlockBytes())
	gguf.QuantizeInto(t, x, j.out, nil)
	return scratch
}

// chunkSeed derives the stream of a chunk from the tensor name and first
// row, so that values do not depend on scheduling or on other tensors.
func chunkSeed(name string, row int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() ^ uint64(row)*0x9e3779b97f4a7c15
}

// WritePreset is Write for a named preset and a weight type name such as
// "Q4_K" or "f16": the one call behind `ftchat dev gen-model`.
func WritePreset(path, preset, weightType string, seed uint64, progress func(done, total int)) error {
	t, err := gguf.ParseType(weightType)
	if err != nil {
		return err
	}
	spec, err := Preset(preset, t)
	if err != nil {
		return err
	}
	return Write(path, spec, seed, progress)
}
