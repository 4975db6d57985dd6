package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// PreTokenizer names the rule that cuts text into words before byte-level BPE.
// Each one is a hand-written scanner equivalent to a regular expression used by
// Hugging Face tokenizers (Oniguruma syntax, with lookaheads and Unicode
// classes Go's regexp lacks). Invalid UTF-8 bytes are scanned one at a time as
// characters that are neither letters, digits nor whitespace, so no byte is lost.
type PreTokenizer string

const (
	// PreGPT2 is the GPT-2 ByteLevel regex:
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	PreGPT2 PreTokenizer = "gpt2"
	// PreSmolLM isolates every digit (HF Digits(individual_digits=true)) and
	// applies the GPT-2 regex to the text between digits.
	PreSmolLM PreTokenizer = "smollm"
	// PreLlama3 is the Llama 3 regex:
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PreLlama3 PreTokenizer = "llama3"
	// PreQwen2 is the Llama 3 regex with single digits (\p{N} instead of \p{N}{1,3}).
	PreQwen2 PreTokenizer = "qwen2"
	// PreQwen35 is the Qwen2 regex with combining marks in words and out of
	// punctuation runs (Qwen3.5/3.6; llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35):
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	// A mark that the optional prefix could take starts a [\p{L}\p{M}] run
	// either way, so this is the Qwen2 scanner with marks counted as letters.
	PreQwen35 PreTokenizer = "qwen35"
)

// The exact regex strings found in tokenizer.json files, mapped to scanners.
const (
	regexLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	regexGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	regexQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitRegexes maps Split pre-tokenizer patterns (HF spelling and the
// llama.cpp spelling of the contractions) to scanners.
var splitRegexes = map[string]PreTokenizer{
	regexLlama3: PreLlama3,
	regexQwen2:  PreQwen2,
	regexGPT2:   PreGPT2,
	regexQwen35: PreQwen35,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: PreQwen35,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:        PreLlama3,
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:             PreQwen2,
}

// ggufPre maps tokenizer.ggml.pre values to scanners.
var ggufPre = map[string]PreTokenizer{
	"":                 PreGPT2,
	"default":          PreGPT2,
	"gpt2":             PreGPT2,
	"gpt-2":            PreGPT2,
	"smollm":           PreSmolLM,
	"llama3":           PreLlama3,
	"llama-v3":         PreLlama3,
	"llama-bpe":        PreLlama3,
	"smaug-bpe":        PreLlama3,
	"falcon3":          PreLlama3,
	"qwen2":            PreQwen2,
	"deepseek-r1-qwen": PreQwen2,
	"megrez":           PreQwen2,
	"qwen35":           PreQwen35,
}

// split calls emit for every word of s, in order; the words cover s exactly.
func (p PreTokenizer) split(s string, emit func(word string)) {
	switch p {
	case PreSmolLM:
		start := 0
		for i := 0; i < len(s); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if isNumber(r, n) {
				if start < i {
					splitWith(s[start:i], scanGPT2, emit)
				}
				emit(s[i : i+n])
				start = i + n
			}
			i += n
		}
		if start < len(s) {
			splitWith(s[start:], scanGPT2, emit)
		}
	case PreLlama3:
		splitWith(s, scanLlama3, emit)
	case PreQwen2:
		splitWith(s, scanQwen2, emit)
	case PreQwen35:
		splitWith(s, scanQwen35, emit)
	default:
		splitWith(s, scanGPT2, emit)
	}
}

func (p PreTokenizer) valid() error {
	switch p {
	case PreGPT2, PreSmolLM, PreLlama3, PreQwen2, PreQwen35:
		return nil
	}
	return fmt.Errorf("unknown pre-tokenizer %q (supported: gpt2, smollm, llama3, qwen2, qwen35)", string(p))
}

// Split returns the words the pre-tokenizer cuts s into (for tests and tools).
func (p PreTokenizer) Split(s string) []string {
	var out []string
	p.split(s, func(w string) { out = append(out, w) })
	return out
}

func splitWith(s string, scan func(s string, i int) int, emit func(string)) {
	for i := 0; i < len(s); {
		j := scan(s, i)
		emit(s[i:j])
		i = j
	}
}

// Character classes as Oniguruma sees them (\p{L}, \p{N}, \s = White_Space).
// An invalid byte (RuneError of width 1) is "other".
type class uint8

const (
	clsOther class = iota
	clsLetter
	clsNumber
	clsSpace
)

func classOf(r rune, n int) class {
	if r < utf8.RuneSelf {
		switch {
		case 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z':
			return clsLetter
		case '0' <= r && r <= '9':
			return clsNumber
		case r == ' ' || '\t' <= r && r <= '\r':
			return clsSpace
		}
		return clsOther
	}
	if r == utf8.RuneError && n == 1 {
		return clsOther
	}
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.Is(unicode.N, r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

func isNumber(r rune, n int) bool { return classOf(r, n) == clsNumber }

func at(s string, i int) (class, rune, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r, n), r, n
}

// atMarks is at with combining marks (\p{M}) counted as letters (qwen35).
func atMarks(s string, i int) (class, rune, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	c := classOf(r, n)
	if c == clsOther && r >= utf8.RuneSelf && unicode.Is(unicode.M, r) {
		c = clsLetter
	}
	return c, r, n
}

// runOf returns the end of the run of class c starting at i.
func runOf(s string, i int, c class) int { return runWith(s, i, c, at) }

func runWith(s string, i int, c class, at func(string, int) (class, rune, int)) int {
	for i < len(s) {
		cc, _, n := at(s, i)
		if cc != c {
			break
		}
		i += n
	}
	return i
}

// spaceEnd implements \s+(?!\S)|\s+ at i (s[i] is whitespace): the whole run
// when it reaches the end or is a single character, otherwise the run without
// its last character, which then prefixes the next word.
func spaceEnd(s string, i int) int {
	last := i
	j := i
	for j < len(s) {
		c, _, n := at(s, j)
		if c != clsSpace {
			break
		}
		last = j
		j += n
	}
	if j == len(s) || last == i {
		return j
	}
	return last
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i (s[i] == '\”) and returns
// its length, or 0. With fold, letters match case-insensitively as Oniguruma
// folds them (which includes U+017F LATIN SMALL LETTER LONG S for s).
func contraction(s string, i int, fold bool) int {
	eq := func(j int, lower byte) bool {
		if j >= len(s) {
			return false
		}
		if s[j] == lower || fold && s[j] == lower-'a'+'A' {
			return true
		}
		return false
	}
	j := i + 1
	switch {
	case eq(j, 's') || eq(j, 't') || eq(j, 'm') || eq(j, 'd'):
		return 2
	case fold && j+1 < len(s) && s[j] == 0xC5 && s[j+1] == 0xBF: // ſ
		return 3
	case eq(j, 'r') && eq(j+1, 'e') || eq(j, 'v') && eq(j+1, 'e') || eq(j, 'l') && eq(j+1, 'l'):
		return 3
	}
	return 0
}

func scanGPT2(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	c, _, n := at(s, i)
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _, n2 := at(s, i+1); c2 != clsSpace {
			return runOf(s, i+1+n2, c2)
		}
	}
	if c != clsSpace {
		return runOf(s, i+n, c)
	}
	return spaceEnd(s, i)
}

func scanLlama3(s string, i int) int { return scanLlamaStyle(s, i, 3, at) }
func scanQwen2(s string, i int) int  { return scanLlamaStyle(s, i, 1, at) }
func scanQwen35(s string, i int) int { return scanLlamaStyle(s, i, 1, atMarks) }

func scanLlamaStyle(s string, i int, maxDigits int, at func(string, int) (class, rune, int)) int {
	runOf := func(s string, i int, c class) int { return runWith(s, i, c, at) }
	if s[i] == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	c, r, n := at(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return runOf(s, i+n, clsLetter)
	}
	if c != clsNumber && r != '\r' && r != '\n' && i+n < len(s) {
		if c2, _, n2 := at(s, i+n); c2 == clsLetter {
			return runOf(s, i+n+n2, clsLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if c == clsNumber {
		j := i + n
		for k := 1; k < maxDigits && j < len(s); k++ {
			c2, _, n2 := at(s, j)
			if c2 != clsNumber {
				break
			}
			j += n2
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	if c == clsOther {
		start = i + n
	} else if r == ' ' && i+1 < len(s) {
		if c2, _, n2 := at(s, i+1); c2 == clsOther {
			start = i + 1 + n2
		}
	}
	if start >= 0 {
		j := runOf(s, start, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// c is whitespace. \s*[\r\n]+ : through the last newline of the run.
	j, nl := i, -1
	for j < len(s) {
		c2, r2, n2 := at(s, j)
		if c2 != clsSpace {
			break
		}
		if r2 == '\r' || r2 == '\n' {
			nl = j
		}
		j += n2
	}
	if nl >= 0 {
		return nl + 1
	}
	return spaceEnd(s, i)
}
