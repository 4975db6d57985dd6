package tokenizer

import (
	"fmt"
	"sort"
	"strings"
)

// spec is what both loaders (GGUF metadata, tokenizer.json) extract; build
// turns it into a Tokenizer.
type spec struct {
	source       string // for error messages
	model        Model
	pre          PreTokenizer
	nfc          bool
	ignoreMerges bool

	tokens []string
	types  []TokenType // nil: all normal
	scores []float32
	merges [][2]string
	added  []addedToken // extra added tokens (tokenizer.json); GGUF marks them by type

	bos, eos, unk, pad, eot, eom   int32
	addBOS, addEOS, addSpacePrefix bool
}

func newSpec(source string) *spec {
	return &spec{source: source, bos: -1, eos: -1, unk: -1, pad: -1, eot: -1, eom: -1}
}

// eogTexts are end-of-generation markers of known chat formats.
var eogTexts = map[string]bool{
	"<|eot_id|>": true, "<|eom_id|>": true, "<|im_end|>": true, "<|end|>": true,
	"<end_of_turn>": true, "<|endoftext|>": true, "<|end_of_text|>": true, "</s>": true,
	"<|return|>": true, "<|call|>": true, "<EOT>": true, "<|end_of_turn|>": true,
	"<｜end▁of▁sentence｜>": true,
}

func (s *spec) build() (*Tokenizer, error) {
	if s.model == ByteLevelBPE {
		if err := s.pre.valid(); err != nil {
			return nil, fmt.Errorf("%s: %w", s.source, err)
		}
	}
	n := len(s.tokens)
	for _, a := range s.added {
		// The loaders check ids too; this keeps the dense tables below
		// proportional to the input whatever the loader.
		if a.id < 0 || int64(a.id) >= int64(len(s.tokens)+len(s.added))+maxIDGap {
			return nil, fmt.Errorf("%s: added token %q has id %d, outside 0..%d", s.source, a.text, a.id, len(s.tokens)+len(s.added)+maxIDGap-1)
		}
		n = max(n, int(a.id)+1)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: the vocabulary is empty", s.source)
	}
	if s.types != nil && len(s.types) != len(s.tokens) {
		return nil, fmt.Errorf("%s: %d token types for %d tokens", s.source, len(s.types), len(s.tokens))
	}
	if s.model == SentencePieceBPE && len(s.scores) != len(s.tokens) {
		return nil, fmt.Errorf("%s: SentencePiece vocabulary needs one score per token: %d scores for %d tokens", s.source, len(s.scores), len(s.tokens))
	}
	t := &Tokenizer{
		model: s.model, pre: s.pre, nfc: s.nfc, ignoreMerges: s.ignoreMerges,
		pieces: make([]string, n), types: make([]TokenType, n), bytes: make([][]byte, n),
		scores: s.scores, eog: map[int32]bool{},
		bos: s.bos, eos: s.eos, unk: s.unk, pad: s.pad,
		addBOS: s.addBOS, addEOS: s.addEOS, addSpacePrefix: s.addSpacePrefix,
	}
	for i := range t.byteIDs {
		t.byteIDs[i] = -1
	}
	for id, tok := range s.tokens {
		t.pieces[id] = tok
		t.types[id] = TypeNormal
		if s.types != nil {
			t.types[id] = s.types[id]
		}
	}
	for id := len(s.tokens); id < n; id++ {
		t.types[id] = TypeUnused
	}
	// Added tokens from tokenizer.json override the model's entry.
	for _, a := range s.added {
		t.pieces[a.id] = a.text
		if a.special {
			t.types[a.id] = TypeControl
		} else {
			t.types[a.id] = TypeUserDefined
		}
	}
	textID := make(map[string]int32, n) // stored spelling -> id, model tokens only
	switch s.model {
	case ByteLevelBPE:
		t.wordVocab = make(map[string]int32, n)
		for id, tok := range t.pieces {
			switch t.types[id] {
			case TypeNormal, TypeUnknown, TypeByte, TypeUndefined:
				b := byteLevelDecode(tok)
				t.bytes[id] = b
				if _, dup := t.wordVocab[string(b)]; !dup {
					t.wordVocab[string(b)] = int32(id)
				}
				if _, dup := textID[tok]; !dup {
					textID[tok] = int32(id)
				}
			default:
				t.bytes[id] = []byte(tok)
			}
		}
		for b := 0; b < 256; b++ {
			if id, ok := t.wordVocab[string([]byte{byte(b)})]; ok {
				t.byteIDs[b] = id
			}
		}
		t.merges = make(map[uint64]merge, len(s.merges))
		for rank, m := range s.merges {
			l, okl := textID[m[0]]
			r, okr := textID[m[1]]
			if !okl || !okr {
				return nil, fmt.Errorf("%s: merge %d (%q %q) uses a token that is not in the vocabulary", s.source, rank, m[0], m[1])
			}
			res, ok := textID[m[0]+m[1]]
			if !ok {
				return nil, fmt.Errorf("%s: merge %d (%q %q) makes %q, which is not in the vocabulary", s.source, rank, m[0], m[1], m[0]+m[1])
			}
			k := mergeKey(l, r)
			if _, dup := t.merges[k]; !dup {
				t.merges[k] = merge{rank: int32(rank), id: res}
			}
		}
	case SentencePieceBPE:
		t.spmPieces = make(map[string]int32, n)
		for id, tok := range t.pieces {
			switch t.types[id] {
			case TypeByte:
				var b byte
				if _, err := fmt.Sscanf(tok, "<0x%02X>", &b); err != nil || len(tok) != 6 {
					return nil, fmt.Errorf("%s: byte token %d is spelled %q, want <0xNN>", s.source, id, tok)
				}
				t.bytes[id] = []byte{b}
				if t.byteIDs[b] < 0 {
					t.byteIDs[b] = int32(id)
				}
			case TypeNormal, TypeUserDefined, TypeUndefined:
				t.bytes[id] = []byte(strings.ReplaceAll(tok, spmSpace, " "))
				if _, dup := t.spmPieces[tok]; !dup {
					t.spmPieces[tok] = int32(id)
				}
			default: // control, unknown, unused: never produced from text
				t.bytes[id] = []byte(tok)
			}
		}
	}
	// Added tokens: GGUF control and user-defined tokens, and tokenizer.json's list.
	seen := map[int32]bool{}
	for id, ty := range t.types {
		if (ty == TypeControl || ty == TypeUserDefined) && t.pieces[id] != "" && !seen[int32(id)] {
			seen[int32(id)] = true
			t.added = append(t.added, addedToken{text: t.pieces[id], id: int32(id), special: ty == TypeControl})
		}
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].text) > len(t.added[j].text) })
	for k, a := range t.added {
		t.addedIdx[a.text[0]] = append(t.addedIdx[a.text[0]], k)
	}
	for _, id := range []*int32{&t.bos, &t.eos, &t.unk, &t.pad, &s.eot, &s.eom} {
		if *id >= int32(n) {
			return nil, fmt.Errorf("%s: special token id %d is outside the vocabulary of %d", s.source, *id, n)
		}
	}
	for _, id := range []int32{t.eos, s.eot, s.eom} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	for _, a := range t.added {
		if eogTexts[a.text] {
			t.eog[a.id] = true
		}
	}
	return t, nil
}
