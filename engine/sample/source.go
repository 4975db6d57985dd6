package sample

// Logits is one row of logits (one value per vocabulary entry) held where
// it was computed, possibly on a device, so that sampling moves only what
// it needs to the host. Sampler.SampleFrom uses it; a method may decline
// (ok false), and the sampler then reads the whole row with All.
//
// penalty and ids are the repetition penalty and the distinct vocabulary
// ids it applies to (CTRL-style, as Sampler.Sample: a positive logit is
// divided by penalty, any other multiplied, each id once, in float32);
// ids is nil when no penalty applies. The source's own values never
// change: All always returns the logits as computed.
type Logits interface {
	Len() int
	// Argmax is the index of the largest penalised logit (the first on
	// ties; a NaN never wins unless it is at index 0, which Argmax never
	// leaves).
	Argmax(penalty float32, ids []int32) (id int32, ok bool)
	// TopK returns the k largest penalised logits (ties: lower id first)
	// and their ids, in any order.
	TopK(k int, penalty float32, ids []int32) (top []int32, vals []float32, ok bool)
	// All returns the unpenalised row; nil if it cannot be read.
	All() []float32
}

// Slice is a Logits source over a host row; it serves every request with
// Sampler.Sample's own code.
type Slice []float32

func (s Slice) Len() int { return len(s) }

func (s Slice) Argmax(penalty float32, ids []int32) (int32, bool) {
	return Argmax(s.penalised(penalty, ids)), true
}

func (s Slice) TopK(k int, penalty float32, ids []int32) ([]int32, []float32, bool) {
	if k <= 0 || k > len(s) {
		return nil, nil, false
	}
	c := topK(nil, s.penalised(penalty, ids), k)
	cids, vals := make([]int32, len(c)), make([]float32, len(c))
	for i, x := range c {
		cids[i], vals[i] = x.id, x.p
	}
	return cids, vals, true
}

func (s Slice) All() []float32 { return s }

// penalised is s, or a penalised copy of it when ids are given. Ids
// outside the row or repeated are skipped, so a caller's malformed window
// cannot panic or penalise twice.
func (s Slice) penalised(penalty float32, ids []int32) []float32 {
	if ids == nil {
		return s
	}
	lg := append([]float32(nil), s...)
	seen := make(map[int32]bool, len(ids))
	for _, t := range ids {
		if t < 0 || int(t) >= len(lg) || seen[t] {
			continue
		}
		seen[t] = true
		penalise(lg, penalty, []int32{t})
	}
	return lg
}

// Query is what Sampler.SampleFrom asks of one logits row: the argmax (K
// 0) or the K largest candidates (any order) of the row after the
// repetition penalty (Penalty over the distinct IDs, as Logits' methods;
// IDs nil: no penalty). Sampler.Query makes it and Sampler.Finish draws
// from its Answer, so a caller can gather the queries of many rows and
// have them answered in one call (a decode step's rows in one device
// round trip).
type Query struct {
	K       int
	Penalty float32
	IDs     []int32
}

// Answer is a Logits source's reply to a Query: ID for an argmax, Top
// and Vals for a top-k. OK false: the source declined (the caller reads
// the whole row instead).
type Answer struct {
	OK   bool
	ID   int32
	Top  []int32
	Vals []float32
}

// Ask answers q from src through its Argmax or TopK.
func Ask(src Logits, q Query) Answer {
	var a Answer
	if q.K == 0 {
		a.ID, a.OK = src.Argmax(q.Penalty, q.IDs)
	} else {
		a.Top, a.Vals, a.OK = src.TopK(q.K, q.Penalty, q.IDs)
	}
	return a
}
