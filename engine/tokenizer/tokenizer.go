// Package tokenizer turns text into token ids and back for the model families
// ftchat runs: byte-level BPE (GPT-2 style: SmolLM2, Llama 3, Qwen2/3) and
// SentencePiece BPE (GGUF tokenizer model "llama"). Vocabularies load from
// GGUF metadata or from a Hugging Face tokenizer.json. Results match HF
// tokenizers id for id (see the reference tests).
package tokenizer

import (
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Model is the tokenization algorithm.
type Model int

const (
	// ByteLevelBPE is GPT-2 style BPE over bytes with ranked merges.
	ByteLevelBPE Model = iota
	// SentencePieceBPE is BPE over characters ranked by piece scores, with
	// ▁ for spaces and byte fallback.
	SentencePieceBPE
)

func (m Model) String() string {
	if m == SentencePieceBPE {
		return "sentencepiece-bpe"
	}
	return "byte-level-bpe"
}

// TokenType follows GGUF's tokenizer.ggml.token_type numbering.
type TokenType int32

const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// addedToken is matched whole in the input before pre-tokenization.
type addedToken struct {
	text    string
	id      int32
	special bool // control token: plain text when the caller asks for it
}

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	model        Model
	pre          PreTokenizer
	nfc          bool
	ignoreMerges bool

	pieces []string    // id -> token as stored (byte-level alphabet, ▁, or added text)
	types  []TokenType // id -> type
	bytes  [][]byte    // id -> decoded bytes
	scores []float32   // SentencePiece piece scores

	wordVocab map[string]int32 // byte-level: raw bytes -> id
	merges    map[uint64]merge // byte-level: (left, right) -> merged
	spmPieces map[string]int32 // SentencePiece: piece text (with ▁) -> id
	byteIDs   [256]int32       // byte -> its single-byte token (<0xNN> in SentencePiece)
	added     []addedToken     // sorted longest first
	addedIdx  [256][]int       // first byte -> indexes into added
	eog       map[int32]bool
	cache     wordCache

	bos, eos, unk, pad int32
	addBOS, addEOS     bool
	addSpacePrefix     bool
}

// EncodeOptions controls Encode.
type EncodeOptions struct {
	// AddSpecial adds BOS/EOS as the model's metadata asks.
	AddSpecial bool
	// PlainSpecials treats the text of special (control) tokens in the input
	// as ordinary text. Use it for user content, so that a user typing
	// "<|im_end|>" cannot end a turn; the chat template's own markers are
	// encoded without it. Non-special added tokens (e.g. <think>) still match.
	PlainSpecials bool
	// PlainSpans are byte ranges [start, end) of the input, sorted and not
	// overlapping, where special-token text is ordinary text (PlainSpecials
	// for part of the input: the message contents inside a rendered chat
	// prompt). A special token is matched only wholly outside them.
	PlainSpans [][2]int
}

// HasSpecialText reports whether s contains the text of a special
// (control) token, which Encode would turn into that token.
func (t *Tokenizer) HasSpecialText(s string) bool {
	for i := 0; i < len(s); i++ {
		if a := t.matchAdded(s, i, false); a != nil && a.special {
			return true
		}
	}
	return false
}

// Encode tokenizes text, matching special tokens written in it.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	return t.EncodeWith(text, EncodeOptions{AddSpecial: addSpecial})
}

// EncodeWith tokenizes text with options.
func (t *Tokenizer) EncodeWith(text string, o EncodeOptions) []int32 {
	ids := make([]int32, 0, len(text)/3+2)
	if o.AddSpecial && t.addBOS && t.bos >= 0 {
		ids = append(ids, t.bos)
	}
	prevSpecial := true // SentencePiece adds the space prefix at the start and after added tokens (as llama.cpp does)
	start := 0
	spans := o.PlainSpans
	for i := 0; i < len(text); {
		for len(spans) > 0 && spans[0][1] <= i {
			spans = spans[1:]
		}
		plain := o.PlainSpecials || (len(spans) > 0 && spans[0][0] <= i)
		a := t.matchAdded(text, i, plain)
		if a != nil && a.special && len(spans) > 0 && i+len(a.text) > spans[0][0] {
			// A special token may not reach into a plain span: text there
			// must not complete one the text before it began.
			a = t.matchAdded(text, i, true)
		}
		if a == nil {
			i++
			continue
		}
		if start < i {
			ids = t.encodeText(ids, text[start:i], prevSpecial)
		}
		ids = append(ids, a.id)
		prevSpecial = true
		i += len(a.text)
		start = i
	}
	if start < len(text) {
		ids = t.encodeText(ids, text[start:], prevSpecial)
	}
	if o.AddSpecial && t.addEOS && t.eos >= 0 {
		ids = append(ids, t.eos)
	}
	return ids
}

// matchAdded returns the longest added token starting at text[i], if any.
func (t *Tokenizer) matchAdded(text string, i int, plainSpecials bool) *addedToken {
	for _, k := range t.addedIdx[text[i]] {
		a := &t.added[k]
		if plainSpecials && a.special {
			continue
		}
		if strings.HasPrefix(text[i:], a.text) {
			return a // added is sorted longest first
		}
	}
	return nil
}

func (t *Tokenizer) encodeText(ids []int32, s string, prefix bool) []int32 {
	if t.nfc {
		s = nfcValid(s)
	}
	if t.model == SentencePieceBPE {
		return t.spmSegment(ids, s, prefix && t.addSpacePrefix)
	}
	t.pre.split(s, func(w string) { ids = t.bpeWord(ids, w) })
	return ids
}

// nfcValid applies NFC to the valid UTF-8 runs of s and keeps invalid bytes.
func nfcValid(s string) string {
	if utf8.ValidString(s) {
		return norm.NFC.String(s)
	}
	var sb strings.Builder
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			sb.WriteString(norm.NFC.String(s[start:i]))
			sb.WriteByte(s[i])
			start = i + 1
		}
		i += n
	}
	sb.WriteString(norm.NFC.String(s[start:]))
	return sb.String()
}

// Decode returns the text of ids, byte for byte: special tokens appear as
// their text, and ids outside the vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	atStart := true
	for _, id := range ids {
		b = t.appendPiece(b, id, &atStart)
	}
	return string(b)
}

// appendPiece appends the bytes of id. *atStart is true until the first text
// token: SentencePiece drops that token's space prefix (the one Encode added),
// as sentencepiece's decoder does; special tokens before it do not count.
func (t *Tokenizer) appendPiece(b []byte, id int32, atStart *bool) []byte {
	if id < 0 || int(id) >= len(t.bytes) {
		return b
	}
	p := t.bytes[id]
	switch t.types[id] {
	case TypeControl, TypeUserDefined, TypeUnused:
		return append(b, p...)
	}
	if *atStart && t.model == SentencePieceBPE && t.addSpacePrefix && len(p) > 0 && p[0] == ' ' && t.types[id] == TypeNormal {
		p = p[1:]
	}
	*atStart = false
	return append(b, p...)
}

// Piece returns the token as the vocabulary spells it ("Ġhello", "▁the",
// "<0x0A>", "<|im_end|>"), or "" for an id outside the vocabulary.
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// TokenBytes returns the bytes id decodes to (not to be modified).
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.bytes) {
		return nil
	}
	return t.bytes[id]
}

// Type returns the token's type (TypeUndefined outside the vocabulary).
func (t *Tokenizer) Type(id int32) TokenType {
	if id < 0 || int(id) >= len(t.types) {
		return TypeUndefined
	}
	return t.types[id]
}

// IsSpecial reports whether id is a control token (e.g. <|im_start|>).
func (t *Tokenizer) IsSpecial(id int32) bool { return t.Type(id) == TypeControl }

// IsEOG reports whether id ends generation: EOS, end-of-turn and the other
// end markers of the known chat formats.
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// EOGs returns the end-of-generation ids, ascending.
func (t *Tokenizer) EOGs() []int32 {
	out := make([]int32, 0, len(t.eog))
	for id := range t.eog {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// VocabSize is the number of ids (the model's embedding rows it needs).
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// BOS returns the beginning-of-sequence id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// Pad returns the padding id, or -1.
func (t *Tokenizer) Pad() int32 { return t.pad }

// AddsBOS reports whether Encode(text, true) prepends BOS.
func (t *Tokenizer) AddsBOS() bool { return t.addBOS && t.bos >= 0 }

// Model returns the algorithm.
func (t *Tokenizer) Model() Model { return t.model }

// PreTokenizer returns the byte-level pre-tokenizer (unused by SentencePiece).
func (t *Tokenizer) PreTokenizer() PreTokenizer { return t.pre }

// TokenID returns the id of a token spelled as the vocabulary spells it.
func (t *Tokenizer) TokenID(piece string) (int32, bool) {
	for _, a := range t.added {
		if a.text == piece {
			return a.id, true
		}
	}
	if t.model == SentencePieceBPE {
		id, ok := t.spmPieces[piece]
		return id, ok
	}
	id, ok := t.wordVocab[string(byteLevelDecode(piece))]
	return id, ok
}

// wordCache remembers the ids of frequent words; it is cleared when full.
type wordCache struct {
	mu sync.Mutex
	m  map[string][]int32
}

const (
	cacheMaxEntries = 1 << 16
	cacheMaxWord    = 64
)

func (c *wordCache) get(w string) ([]int32, bool) {
	if len(w) > cacheMaxWord {
		return nil, false
	}
	c.mu.Lock()
	ids, ok := c.m[w]
	c.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	if len(w) > cacheMaxWord {
		return
	}
	cp := append([]int32(nil), ids...)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheMaxEntries {
		c.m = make(map[string][]int32)
	}
	c.m[strings.Clone(w)] = cp
	c.mu.Unlock()
}
