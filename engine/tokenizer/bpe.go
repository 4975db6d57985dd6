package tokenizer

import "unicode/utf8"

// GPT-2's byte-level alphabet: every byte is spelled as one printable rune so
// that vocabularies can be stored as text. Printable Latin-1 bytes stand for
// themselves; the others are moved to U+0100 and up, in byte order.
var byteToRune [256]rune
var runeToByte = map[rune]byte{}

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode turns a token spelled in the byte-level alphabet back into
// bytes. Runes outside the alphabet are kept as their UTF-8 encoding.
func byteLevelDecode(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// mergeKey packs a pair of token ids.
func mergeKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type merge struct {
	rank int32
	id   int32 // the merged token
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32 // indexes, -1 at the ends
	start, end int32 // byte range in the word (used by SentencePiece)
}

// candidate is a mergeable adjacent pair. Lower prio pops first; ties go to
// the leftmost pair, as in HF tokenizers and SentencePiece.
type candidate struct {
	prio        float64
	pos         int32
	left, right int32 // ids when pushed, to detect stale entries
	merged      int32
}

func (a candidate) less(b candidate) bool {
	return a.prio < b.prio || a.prio == b.prio && a.pos < b.pos
}

// pairHeap is a binary min-heap of candidates, hand-rolled to avoid interface
// calls on the hot path.
type pairHeap []candidate

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// mergeSymbols repeatedly merges the best adjacent pair; pairOf reports
// whether two ids merge, into what, and with which priority (lower first).
// It returns the surviving ids appended to dst.
func mergeSymbols(dst []int32, syms []symbol, pairOf func(l, r *symbol) (int32, float64, bool)) []int32 {
	var h pairHeap
	try := func(i int32) {
		j := syms[i].next
		if j < 0 {
			return
		}
		if id, prio, ok := pairOf(&syms[i], &syms[j]); ok {
			h.push(candidate{prio: prio, pos: i, left: syms[i].id, right: syms[j].id, merged: id})
		}
	}
	for i := range syms {
		try(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		l := &syms[c.pos]
		if l.id != c.left || l.next < 0 {
			continue
		}
		r := &syms[l.next]
		if r.id != c.right {
			continue
		}
		l.id = c.merged
		l.end = r.end
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		r.id = -1
		if l.prev >= 0 {
			try(l.prev)
		}
		try(c.pos)
	}
	for i := int32(0); i >= 0 && int(i) < len(syms); i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// bpeWord encodes one pre-tokenized word (raw bytes) with byte-level BPE.
func (t *Tokenizer) bpeWord(dst []int32, word string) []int32 {
	if id, ok := t.wordVocab[word]; ok && (t.ignoreMerges || len(word) == 1) {
		return append(dst, id)
	}
	if ids, ok := t.cache.get(word); ok {
		return append(dst, ids...)
	}
	syms := make([]symbol, 0, len(word))
	for i := 0; i < len(word); i++ {
		id := t.byteIDs[word[i]]
		if id < 0 {
			// The vocabulary cannot spell this byte (SmolLM2 lacks a few):
			// drop it, as HF tokenizers does.
			continue
		}
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	if len(syms) == 0 {
		return dst
	}
	syms[len(syms)-1].next = -1
	start := len(dst)
	dst = mergeSymbols(dst, syms, func(l, r *symbol) (int32, float64, bool) {
		m, ok := t.merges[mergeKey(l.id, r.id)]
		return m.id, float64(m.rank), ok
	})
	t.cache.put(word, dst[start:])
	return dst
}
