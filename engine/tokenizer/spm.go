package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// spmSpace is SentencePiece's visible space, U+2581.
const spmSpace = "\u2581"

// spmSegment encodes one run of plain text with SentencePiece BPE: spaces
// become ▁ (plus one in front when prefix is set), characters start as
// symbols, and the adjacent pair whose concatenation is the highest-scoring
// piece is merged first (leftmost on ties), as sentencepiece's bpe_model does.
// Symbols left that are not pieces become byte tokens <0xNN> (byte fallback),
// or unk when the vocabulary has no byte tokens.
func (t *Tokenizer) spmSegment(dst []int32, text string, prefix bool) []int32 {
	var sb strings.Builder
	if prefix {
		sb.WriteString(spmSpace)
	}
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' {
			sb.WriteString(spmSpace)
		} else {
			sb.WriteByte(text[i])
		}
	}
	s := sb.String()
	if s == "" {
		return dst
	}
	syms := make([]symbol, 0, len(s))
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		id, ok := t.spmPieces[s[i:i+n]]
		if !ok {
			id = -1
		}
		k := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: k - 1, next: k + 1, start: int32(i), end: int32(i + n)})
		i += n
	}
	syms[len(syms)-1].next = -1
	// Symbols are identified by text here, not by id (a character missing from
	// the vocabulary has id -1 but may still merge), so give unknown
	// characters distinct negative ids to keep the stale-entry check sound.
	for i := range syms {
		if syms[i].id < 0 {
			syms[i].id = -2 - int32(i)
		}
	}
	start := len(dst)
	dst = mergeSymbols(dst, syms, func(l, r *symbol) (int32, float64, bool) {
		id, ok := t.spmPieces[s[l.start:r.end]]
		if !ok {
			return 0, 0, false
		}
		return id, -float64(t.scores[id]), true
	})
	// Byte fallback for symbols that are not pieces. mergeSymbols returned
	// ids in order; walk the list again to know each one's text.
	out := dst[:start]
	for i := int32(0); i >= 0; i = syms[i].next {
		if syms[i].id >= 0 {
			out = append(out, syms[i].id)
			continue
		}
		text := s[syms[i].start:syms[i].end]
		if t.hasByteTokens(text) {
			for _, b := range []byte(text) {
				out = append(out, t.byteIDs[b])
			}
		} else if t.unk >= 0 {
			out = append(out, t.unk) // one unk per character, as sentencepiece does
		}
	}
	return out
}

func (t *Tokenizer) hasByteTokens(text string) bool {
	for i := 0; i < len(text); i++ {
		if t.byteIDs[text[i]] < 0 {
			return false
		}
	}
	return true
}
