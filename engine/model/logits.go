package model

import (
	"fmt"

	"github.com/ftchat/ftchat/engine/sample"
)

// LogitsSampler is an optional Backend extension: argmax and top-k of one
// row of a logits tensor after the repetition penalty (sample.Logits'
// contract), computed where the tensor lives, so that a decode step
// moves a token id or k candidates to the host instead of the row.
type LogitsSampler interface {
	ArgmaxRow(logits Tensor, row int, penalty float32, ids []int32) (int32, error)
	TopKRow(logits Tensor, row, k int, penalty float32, ids []int32) ([]int32, []float32, error)
}

// RowsSampler is an optional LogitsSampler extension: the queries of many
// rows of a logits tensor answered in one call (a decode step's rows in
// one round trip to the device instead of one each). Row i of rows gets
// qs[i]; an answer with OK false is a query the backend declined (a top-k
// above its cap), which the caller serves row by row.
type RowsSampler interface {
	SampleRows(logits Tensor, rows []int, qs []sample.Query) ([]sample.Answer, error)
}

// MaxDeviceTopK is the largest top-k asked of a LogitsSampler; a larger
// one reads the whole row.
const MaxDeviceTopK = 256

// Logits are the logits rows of one ForwardLogits, left on the backend
// when it is a LogitsSampler (else copied to the host at once). They are
// valid until the next Forward, ForwardLogits or Free of the model.
type Logits struct {
	m     *Model
	t     Tensor    // device rows; nil when host holds them from the start
	host  []float32 // rows × vocab once read
	rows  int
	vocab int
	gen   uint64
	err   error
}

// Rows is how many logits rows there are (one per requested batch row).
func (l *Logits) Rows() int { return l.rows }

// Row returns row i as a sampling source.
func (l *Logits) Row(i int) sample.Logits {
	if l.t == nil {
		return sample.Slice(l.host[i*l.vocab : (i+1)*l.vocab])
	}
	return deviceRow{l, i}
}

// Host returns all rows on the host (nil after an error, see Err).
func (l *Logits) Host() []float32 {
	if l.host != nil || !l.valid("read") {
		return l.host
	}
	host := make([]float32, l.rows*l.vocab)
	be := l.m.be
	be.ToHost(l.t, host)
	if eb, ok := be.(interface{ Err() error }); ok {
		if err := eb.Err(); err != nil {
			l.fail(err)
			return nil
		}
	}
	l.host = host
	return host
}

// Err is the first error of the device sampling or of reading the rows.
func (l *Logits) Err() error { return l.err }

func (l *Logits) fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// valid reports whether the device rows are still those of this step.
func (l *Logits) valid(op string) bool {
	if l.err != nil {
		return false
	}
	if l.gen != l.m.gen {
		l.fail(fmt.Errorf("model: logits %s after a later forward step replaced them", op))
		return false
	}
	return true
}

// deviceRow is one row of device-held logits (sample.Logits).
type deviceRow struct {
	l   *Logits
	row int
}

func (d deviceRow) Len() int { return d.l.vocab }

// Err is the first error met by any row of the step (Logits.Err).
func (d deviceRow) Err() error { return d.l.err }

func (d deviceRow) Argmax(penalty float32, ids []int32) (int32, bool) {
	if d.l.host != nil {
		return sample.Slice(d.hostRow()).Argmax(penalty, ids)
	}
	if !d.l.valid("sampled") {
		return -1, false
	}
	id, err := d.l.m.be.(LogitsSampler).ArgmaxRow(d.l.t, d.row, penalty, ids)
	if err != nil {
		d.l.fail(err)
		return -1, false
	}
	return id, true
}

func (d deviceRow) TopK(k int, penalty float32, ids []int32) ([]int32, []float32, bool) {
	if d.l.host != nil {
		return sample.Slice(d.hostRow()).TopK(k, penalty, ids)
	}
	if k < 1 || k > MaxDeviceTopK || k > d.l.vocab || !d.l.valid("sampled") {
		return nil, nil, false
	}
	top, vals, err := d.l.m.be.(LogitsSampler).TopKRow(d.l.t, d.row, k, penalty, ids)
	if err != nil {
		d.l.fail(err)
		return nil, nil, false
	}
	return top, vals, true
}

func (d deviceRow) All() []float32 {
	if d.l.Host() == nil {
		return nil
	}
	return d.hostRow()
}

func (d deviceRow) hostRow() []float32 { return d.l.host[d.row*d.l.vocab : (d.row+1)*d.l.vocab] }

// AnswerRows answers the query of each listed row (sample.Query; row
// rows[i] gets qs[i]) in one call: host rows through sample.Ask, device
// rows through the backend's RowsSampler. False when it cannot batch them
// (a backend without RowsSampler, rows out of range, an error, which Err
// then reports): the caller samples each row on its own. A query the
// backend declines gets an answer with OK false.
func (l *Logits) AnswerRows(rows []int, qs []sample.Query) ([]sample.Answer, bool) {
	if len(rows) != len(qs) {
		return nil, false
	}
	for _, r := range rows {
		if r < 0 || r >= l.rows {
			return nil, false
		}
	}
	if l.host != nil {
		out := make([]sample.Answer, len(rows))
		for i, r := range rows {
			out[i] = sample.Ask(l.Row(r), qs[i])
		}
		return out, true
	}
	rs, ok := l.m.be.(RowsSampler)
	if !ok || !l.valid("sampled") {
		return nil, false
	}
	out, err := rs.SampleRows(l.t, rows, qs)
	if err != nil {
		l.fail(err)
		return nil, false
	}
	if len(out) != len(rows) {
		l.fail(fmt.Errorf("model: %d sampling answers for %d rows", len(out), len(rows)))
		return nil, false
	}
	return out, true
}

// ForwardLogits is Forward that leaves the logits where the backend
// computed them when it is a LogitsSampler: sampling a row through
// Logits.Row then moves only what the sampler needs. Other backends get
// the rows on the host, as Forward returns them.
func (m *Model) ForwardLogits(b *Batch, logitsRows []int) (*Logits, error) {
	if _, ok := m.be.(LogitsSampler); !ok {
		host, err := m.Forward(b, logitsRows)
		if err != nil {
			return nil, err
		}
		return &Logits{m: m, host: host, rows: len(logitsRows), vocab: m.Config.Vocab, gen: m.gen}, nil
	}
	t, _, err := m.forward(b, logitsRows, true)
	if err != nil {
		return nil, err
	}
	l := &Logits{m: m, t: t, rows: len(logitsRows), vocab: m.Config.Vocab, gen: m.gen}
	if t == nil {
		l.host = []float32{}
	}
	return l, nil
}

// dropDeviceLogits frees the previous step's device logits; Forward calls
// it first, so the next step's logits tensor reuses the same memory (a
// replayed decode graph sees the same address).
func (m *Model) dropDeviceLogits() {
	m.gen++
	if m.devLogits != nil {
		m.be.FreeTensor(m.devLogits)
		m.devLogits = nil
	}
}
