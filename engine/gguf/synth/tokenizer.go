package synth

import "fmt"

// Special tokens, at the start of the vocabulary as in SmolLM2.
const (
	TokenEndOfText = "<|endoftext|>"
	TokenIMStart   = "<|im_start|>"
	TokenIMEnd     = "<|im_end|>"
)

// ChatTemplate is a plain ChatML template.
const ChatTemplate = "{% for message in messages %}" +
	"{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// llama.cpp token types.
const (
	tokNormal  int32 = 1
	tokControl int32 = 3
	tokUnused  int32 = 5
)

// byteSymbols returns the GPT-2 byte-level alphabet: symbol i stands for
// byte i. Printable Latin-1 bytes map to themselves, the rest to code
// points from U+0100 upward in byte order.
func byteSymbols() [256]string {
	var out [256]string
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF
		if printable {
			out[b] = string(rune(b))
		} else {
			out[b] = string(next)
			next++
		}
	}
	return out
}

// baseMerges are a few frequent English merges (in byte-level symbols,
// Ġ = space), so that the tokenizer exercises its merge loop.
var baseMerges = [][2]string{
	{"Ġ", "t"}, {"Ġ", "a"}, {"h", "e"}, {"i", "n"}, {"r", "e"}, {"o", "n"}, {"Ġt", "he"},
	{"e", "r"}, {"Ġ", "s"}, {"a", "t"}, {"Ġ", "w"}, {"Ġ", "o"}, {"e", "n"}, {"Ġ", "c"},
	{"i", "t"}, {"i", "s"}, {"a", "n"}, {"o", "r"}, {"e", "s"}, {"Ġ", "b"}, {"e", "d"},
	{"Ġ", "f"}, {"in", "g"}, {"Ġ", "p"}, {"o", "u"}, {"Ġa", "n"}, {"a", "l"}, {"a", "r"},
	{"Ġ", "h"}, {"Ġt", "o"}, {"Ġ", "i"}, {"Ġan", "d"}, {"Ġ", "m"}, {"l", "l"}, {"Ġo", "f"},
	{"Ġ", "d"}, {"l", "e"}, {"t", "h"},
}

// vocab is the tokenizer metadata of a synthetic model.
type vocab struct {
	tokens []string
	types  []int32
	merges []string
}

// baseVocabSize is the number of real (non-padding) tokens.
func baseVocabSize() int { return 3 + 256 + len(baseMerges) }

func buildVocab(size int) (vocab, error) {
	if size < baseVocabSize() {
		return vocab{}, fmt.Errorf("vocab size %d is below the %d tokens the byte-level tokenizer needs", size, baseVocabSize())
	}
	v := vocab{tokens: make([]string, 0, size), types: make([]int32, 0, size)}
	for _, s := range []string{TokenEndOfText, TokenIMStart, TokenIMEnd} {
		v.tokens = append(v.tokens, s)
		v.types = append(v.types, tokControl)
	}
	syms := byteSymbols()
	for _, s := range syms {
		v.tokens = append(v.tokens, s)
		v.types = append(v.types, tokNormal)
	}
	seen := map[string]bool{}
	for _, t := range v.tokens {
		seen[t] = true
	}
	for _, m := range baseMerges {
		if !seen[m[0]] || !seen[m[1]] {
			return vocab{}, fmt.Errorf("internal: merge %q+%q uses an unknown token", m[0], m[1])
		}
		merged := m[0] + m[1]
		if seen[merged] {
			return vocab{}, fmt.Errorf("internal: duplicate merge result %q", merged)
		}
		seen[merged] = true
		v.tokens = append(v.tokens, merged)
		v.types = append(v.types, tokNormal)
		v.merges = append(v.merges, m[0]+" "+m[1])
	}
	for i := len(v.tokens); i < size; i++ {
		v.tokens = append(v.tokens, fmt.Sprintf("<unused_%d>", i))
		v.types = append(v.types, tokUnused)
	}
	return v, nil
}
