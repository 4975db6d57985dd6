package engine

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/model"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// Hybrid models (qwen35, qwen35moe, qwen3next) keep K/V only for their
// attention layers, in the paged pool; their Gated DeltaNet layers keep a
// fixed-size recurrent state per sequence instead (float32 conv and
// delta-rule state, model.StateLayout), in slots of storage the backend
// allocates once (model.StateBackend.AllocState).
//
// A sequence owns one live slot: the state after the tokens it has
// computed (seqState.pos of them). Unlike K/V, that state cannot be cut
// back to a prefix, so the engine also copies it into snapshot slots at
// turn boundaries (the end of the last message of a prompt, the end of an
// answer). A new prompt that extends what the live slot consumed prefills
// only its new tokens; one that diverges earlier resumes from the deepest
// snapshot at or before the common prefix (K/V cut back to it), else from
// token 0.
//
// Slots are a cache: when every slot is taken, a new snapshot takes the
// place of another sequence's oldest one, and a sequence that needs a
// live slot takes the least recently used sequence's (which then starts
// over from token 0 on its next turn: its K/V is dropped as well, see
// seqState.evicted). All of it runs with Engine.mu held.

// DefaultStateSlots is the slot count of a hybrid model when
// Options.StateSlots is 0: one live sequence and three snapshots, what a
// single chat or agent session uses.
const DefaultStateSlots = 4

// MaxStateSlots bounds Options.StateSlots.
const MaxStateSlots = 1024

// maxSnapshots bounds the snapshots one sequence keeps; the shallowest one
// gives way to a new one.
const maxSnapshots = 3

type slotRole uint8

const (
	slotFree slotRole = iota
	slotLive
	slotSnap
)

// statePool hands out the recurrent-state slots of a hybrid model.
type statePool struct {
	l     model.StateLayout // l.Slots slots
	be    model.StateBackend
	owner []*seqState // by slot; nil when free
	role  []slotRole
	clock int64

	// Read by Engine.Stats without Engine.mu.
	live, snaps atomic.Int64 // slots by role
	restores    atomic.Int64 // turns resumed from a snapshot
	restarts    atomic.Int64 // turns that had history but restarted the state from token 0
}

// seqState is one sequence's share of the state pool.
type seqState struct {
	live  int        // live slot, -1 while it has none
	pos   int        // tokens the live slot has consumed; -1 unknown (restart)
	snaps []snapshot // ascending pos
	used  int64      // last use (statePool.clock), for LRU eviction
	// evicted is called when another sequence takes the live slot: the
	// owner drops its K/V, which no state matches any more.
	evicted func()
}

// snapshot is a slot holding the state after the first pos tokens of its
// sequence's history.
type snapshot struct{ slot, pos int }

func newStatePool(l model.StateLayout, be model.StateBackend) *statePool {
	p := &statePool{l: l, be: be, owner: make([]*seqState, l.Slots), role: make([]slotRole, l.Slots)}
	return p
}

// recurrentState is the state's accounting for the memory plan.
func (p *statePool) recurrentState() kvcache.RecurrentState {
	if p == nil {
		return kvcache.RecurrentState{}
	}
	return kvcache.RecurrentState{Slots: p.l.Slots, PerSlot: p.l.BytesPerSlot()}
}

func (p *statePool) newSeq(evicted func()) *seqState {
	return &seqState{live: -1, pos: -1, evicted: evicted}
}

func (p *statePool) touch(s *seqState) {
	p.clock++
	s.used = p.clock
}

func (p *statePool) take(slot int, s *seqState, r slotRole) {
	p.freeSlot(slot)
	p.owner[slot], p.role[slot] = s, r
	p.count(r, 1)
}

func (p *statePool) freeSlot(slot int) {
	p.count(p.role[slot], -1)
	p.owner[slot], p.role[slot] = nil, slotFree
}

func (p *statePool) count(r slotRole, d int64) {
	switch r {
	case slotLive:
		p.live.Add(d)
	case slotSnap:
		p.snaps.Add(d)
	}
}

// victimSnapshot is the slot of the shallowest snapshot of the least
// recently used sequence other than s, or -1.
func (p *statePool) victimSnapshot(s *seqState) int {
	var best *seqState
	for i, o := range p.owner {
		if p.role[i] == slotSnap && o != s && (best == nil || o.used < best.used) {
			best = o
		}
	}
	if best == nil {
		return -1
	}
	slot := best.snaps[0].slot
	best.snaps = best.snaps[1:]
	p.freeSlot(slot)
	return slot
}

// freeSlotFor finds a free slot, taking another sequence's snapshot when
// none is free; -1 when every other slot is live.
func (p *statePool) freeSlotFor(s *seqState) int {
	if i := slices.Index(p.role, slotFree); i >= 0 {
		return i
	}
	return p.victimSnapshot(s)
}

// acquireLive gives s a live slot if it has none: a free slot, another
// sequence's snapshot, s's own deepest snapshot (which becomes its live
// state), or the live slot of the least recently used other sequence.
func (p *statePool) acquireLive(s *seqState) error {
	p.touch(s)
	if s.live >= 0 {
		return nil
	}
	slot := p.freeSlotFor(s)
	if slot < 0 && len(s.snaps) > 0 {
		// The deepest own snapshot becomes the live state.
		sn := s.snaps[len(s.snaps)-1]
		s.snaps = s.snaps[:len(s.snaps)-1]
		p.take(sn.slot, s, slotLive)
		s.live, s.pos = sn.slot, sn.pos
		return nil
	}
	if slot < 0 {
		var lru *seqState
		for i, o := range p.owner {
			if p.role[i] == slotLive && o != s && (lru == nil || o.used < lru.used) {
				lru = o
			}
		}
		if lru == nil {
			return fmt.Errorf("recurrent state: all %d slots are in use (%s each); the model cannot hold another sequence", p.l.Slots, kvcache.FormatBytes(p.l.BytesPerSlot()))
		}
		slot = lru.live
		p.freeSlot(slot)
		lru.live, lru.pos = -1, -1
		p.trim(lru, 0)
		if lru.evicted != nil {
			lru.evicted()
		}
	}
	p.take(slot, s, slotLive)
	s.live, s.pos = slot, -1 // the slot's contents belong to someone else
	return nil
}

// resumePoint picks where a prompt whose first common tokens match the
// history can resume: the live slot if it has consumed no more than that,
// else the deepest snapshot at or before it, else token 0 (src -1).
func (s *seqState) resumePoint(common int) (pos, src int) {
	if s.live >= 0 && s.pos >= 0 && s.pos <= common {
		return s.pos, s.live
	}
	for i := len(s.snaps) - 1; i >= 0; i-- {
		if s.snaps[i].pos <= common {
			return s.snaps[i].pos, s.snaps[i].slot
		}
	}
	return 0, -1
}

// restore makes the live slot hold the state at pos, from src (the live
// slot itself, a snapshot, or -1 for the empty state of token 0), and
// drops the snapshots past keep (their tokens are about to change).
func (p *statePool) restore(s *seqState, pos, src, keep int, hadHistory bool) {
	switch {
	case src < 0:
		p.be.ClearState(s.live)
		if hadHistory {
			p.restarts.Add(1)
		}
	case src != s.live:
		p.be.CopyState(s.live, src)
		p.restores.Add(1)
	}
	s.pos = pos
	p.trim(s, keep)
}

// trim drops the snapshots of s past n tokens: its history is cut back
// to n, so they no longer describe a prefix of it.
func (p *statePool) trim(s *seqState, n int) {
	k := len(s.snaps)
	for k > 0 && s.snaps[k-1].pos > n {
		k--
		p.freeSlot(s.snaps[k].slot)
	}
	s.snaps = s.snaps[:k]
	if s.pos > n {
		s.pos = -1
	}
}

// snapshot copies the live state of s (at s.pos) into a snapshot slot:
// s's own shallowest one once it has maxSnapshots, else a free slot or
// another sequence's oldest snapshot, else s's own shallowest. It does
// nothing when no slot can be had or a snapshot at this position exists.
func (p *statePool) snapshot(s *seqState) {
	if s.live < 0 || s.pos <= 0 {
		return
	}
	for _, sn := range s.snaps {
		if sn.pos == s.pos {
			return
		}
	}
	slot := -1
	if len(s.snaps) < maxSnapshots {
		slot = p.freeSlotFor(s)
	}
	if slot < 0 && len(s.snaps) > 0 {
		slot = s.snaps[0].slot
		s.snaps = s.snaps[1:]
		p.freeSlot(slot)
	}
	if slot < 0 {
		return
	}
	p.be.CopyState(slot, s.live)
	p.take(slot, s, slotSnap)
	i, _ := slices.BinarySearchFunc(s.snaps, s.pos, func(a snapshot, pos int) int { return a.pos - pos })
	s.snaps = slices.Insert(s.snaps, i, snapshot{slot: slot, pos: s.pos})
}

// release frees every slot of s (the sequence is closed).
func (p *statePool) release(s *seqState) {
	for _, sn := range s.snaps {
		p.freeSlot(sn.slot)
	}
	s.snaps = nil
	if s.live >= 0 {
		p.freeSlot(s.live)
	}
	s.live, s.pos = -1, -1
}

// reset forgets the history of s (/clear) but keeps its live slot.
func (p *statePool) reset(s *seqState) {
	p.trim(s, 0)
	s.pos = -1
}

// scratch lends a cleared state for work outside any session
// (evaluation, speed benchmarks) and gives it back with done. It may take
// a snapshot or, when every slot is live, the least recently used
// sequence's slot. Without a state pool it returns nil and a no-op.
func (p *statePool) scratch() (st *seqState, done func(), err error) {
	if p == nil {
		return nil, func() {}, nil
	}
	st = p.newSeq(nil)
	if err := p.acquireLive(st); err != nil {
		return nil, nil, err
	}
	p.be.ClearState(st.live)
	st.pos = 0
	return st, func() { p.release(st) }, nil
}

// slot is the live slot to name in a batch; 0 without a state (SeqSpan.State
// is ignored by models without recurrent layers).
func (s *seqState) slot() int {
	if s == nil || s.live < 0 {
		return 0
	}
	return s.live
}

// resume prepares a session's sequence and state for prompt, like
// kvcache.Sequence.Reuse: it keeps the longest prefix that both the K/V
// and a state (the live one or a snapshot) hold, cuts the K/V back to
// it, puts that state in the live slot and appends the rest of the
// prompt. The caller prefills prompt[start:]. On an error the K/V is
// unchanged; a *kvcache.PoolFullError is returned as it is.
func (e *Engine) resume(seq *kvcache.Sequence, st *seqState, prompt []int32) (start int, err error) {
	if st == nil {
		return seq.Reuse(prompt)
	}
	p := e.state
	if err := p.acquireLive(st); err != nil {
		return 0, err
	}
	had := seq.Len() > 0
	common := seq.CommonPrefix(prompt)
	pos, src := st.resumePoint(common)
	start, err = seq.ReuseAt(prompt, pos)
	if err != nil {
		return 0, err
	}
	if start != pos {
		// A shared tail page was dropped (forked sequences without a page
		// copier): no state is known there; start over.
		seq.Truncate(0)
		if start, err = seq.ReuseAt(prompt, 0); err != nil {
			p.reset(st)
			return 0, err
		}
		pos, src = 0, -1
	}
	p.restore(st, pos, src, common, had)
	return start, nil
}

// restartState readies a session's state for a re-prefill of its n
// tokens from 0 (/kvdtype): the live slot cleared, the snapshots dropped
// (they were computed over the old K/V); it returns their positions, to
// be taken again.
func (e *Engine) restartState(st *seqState, n int) []int {
	if st == nil {
		return nil
	}
	p := e.state
	var at []int
	for _, sn := range st.snaps {
		if sn.pos <= n {
			at = append(at, sn.pos)
		}
	}
	p.trim(st, 0)
	if err := p.acquireLive(st); err != nil {
		return nil // cannot happen: a session may always take a slot back
	}
	p.be.ClearState(st.live)
	st.pos = 0
	return at
}

// syncState marks a session's state unknown when it no longer matches its
// K/V (an early return cut the K/V back past it): the next turn then
// resumes from a snapshot or token 0, never from a state that disagrees.
func (e *Engine) syncState(seq *kvcache.Sequence, st *seqState) {
	if st == nil {
		return
	}
	n := seq.Len()
	e.state.trim(st, n)
	if st.pos != n {
		st.pos = -1
	}
}

// stateStats fills the state fields of s (Stats reads them without mu).
func (e *Engine) stateStats(s *Stats) {
	p := e.state
	if p == nil {
		return
	}
	s.StateLayers, s.StateBytesPerSeq, s.StateSlots, s.StateBytes = p.l.Layers, p.l.BytesPerSlot(), p.l.Slots, p.l.Bytes()
	s.StateSlotsLive, s.StateSnapshots = int(p.live.Load()), int(p.snaps.Load())
	s.StateRestores, s.StateRestarts = p.restores.Load(), p.restarts.Load()
}

// turnBoundaries are where a prompt's prefill snapshots the state: just
// after the content of its last message, where the template's own text for
// the next turn (end of message, the assistant's header, a <think>
// opening) begins, and just after the message before it. A follow-up turn
// renders that text differently (earlier thinking is dropped, the answer
// follows the header), so the prompt's end is often not a prefix of the
// next prompt, but the first position is; the second is where a retried or
// edited last message diverges (the chat drops a turn that got no answer).
// spans are the prompt's plain-text byte ranges.
func (e *Engine) turnBoundaries(text string, spans [][2]int, ids []int32) []int {
	var at []int
	for k := max(0, len(spans)-2); k < len(spans); k++ {
		end := spans[k][1]
		if end <= 0 || end >= len(text) {
			continue
		}
		// The suffix's tokens are the prompt's last ones: it starts with
		// the template's text after a message, a special token in the chat
		// formats. Elsewhere the position may be off by a token, which costs
		// a token, not correctness: a snapshot is the state at its position,
		// whatever that position is.
		var rest [][2]int
		for _, sp := range spans[k+1:] {
			rest = append(rest, [2]int{sp[0] - end, sp[1] - end})
		}
		n := len(ids) - len(e.tok.EncodeWith(text[end:], tokenizer.EncodeOptions{PlainSpans: rest}))
		if n > 0 && n < len(ids) && (len(at) == 0 || n > at[len(at)-1]) {
			at = append(at, n)
		}
	}
	return at
}
