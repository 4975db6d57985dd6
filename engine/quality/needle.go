package quality

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"
)

// Haystack is filler text with one needle sentence inserted.
type Haystack struct {
	Text string
	// Tokens is the counted length of Text (filler plus needle).
	Tokens int
	// Depth is where the needle actually starts, as a fraction of the
	// filler tokens before it (the requested depth rounded to a sentence
	// boundary).
	Depth float64
}

// BuildHaystack repeats the filler sentences, in order, until they hold at
// least tokens tokens minus the needle's, and inserts needle before the
// first sentence at which depth (0..1) of the filler tokens lie before it.
// count gives the token count of a piece of text; sentences are joined by
// one space and counted one by one (a tokenizer may merge across the
// joins, so callers re-count the result; Tokens is that count).
func BuildHaystack(filler []string, needle string, tokens int, depth float64, count func(string) int) (Haystack, error) {
	if len(filler) == 0 {
		return Haystack{}, fmt.Errorf("needle: no filler sentences")
	}
	if depth < 0 || depth > 1 {
		return Haystack{}, fmt.Errorf("needle: depth %v must be between 0 and 1", depth)
	}
	nt := count(needle)
	if tokens <= nt {
		return Haystack{}, fmt.Errorf("needle: a haystack of %d tokens cannot hold the %d-token needle", tokens, nt)
	}
	fl := make([]int, len(filler))
	some := false
	for i, s := range filler {
		fl[i] = count(s)
		some = some || fl[i] > 0
	}
	if !some {
		return Haystack{}, fmt.Errorf("needle: the filler sentences count as 0 tokens")
	}
	var sents []string
	var lens []int
	total := 0
	for i := 0; total+nt < tokens; i++ {
		c := fl[i%len(filler)]
		if c <= 0 {
			continue
		}
		if total+nt+c > tokens && total > 0 {
			break // the next sentence would overshoot the length
		}
		sents = append(sents, filler[i%len(filler)])
		lens = append(lens, c)
		total += c
	}
	at, before := len(sents), total
	for i, cum := 0, 0; i < len(sents); i++ {
		if float64(cum) >= depth*float64(total) {
			at, before = i, cum
			break
		}
		cum += lens[i]
	}
	parts := make([]string, 0, len(sents)+1)
	parts = append(parts, sents[:at]...)
	parts = append(parts, needle)
	parts = append(parts, sents[at:]...)
	text := strings.Join(parts, " ")
	h := Haystack{Text: text, Tokens: count(text)}
	if total > 0 {
		h.Depth = float64(before) / float64(total)
	}
	return h, nil
}

// SplitSentences cuts prose into sentences at '.', '!' or '?' followed by
// white space, and collapses runs of white space (including line breaks)
// to one space. Empty pieces are dropped.
func SplitSentences(text string) []string {
	fields := strings.FieldsFunc(text, unicode.IsSpace)
	var out []string
	var cur []string
	for _, f := range fields {
		cur = append(cur, f)
		if strings.HasSuffix(f, ".") || strings.HasSuffix(f, "!") || strings.HasSuffix(f, "?") {
			out = append(out, strings.Join(cur, " "))
			cur = cur[:0]
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.Join(cur, " "))
	}
	return out
}

var passWords = []string{
	"amber", "basalt", "cobalt", "delta", "ember", "falcon", "glacier", "harbor",
	"indigo", "juniper", "kestrel", "lantern", "meadow", "nectar", "orchid", "pepper",
	"quartz", "raven", "saffron", "tundra", "umber", "velvet", "willow", "zephyr",
}

// Passphrase is a random word followed by four digits, e.g. "kestrel-4821".
func Passphrase(r *rand.Rand) string {
	return fmt.Sprintf("%s-%04d", passWords[r.IntN(len(passWords))], r.IntN(10000))
}

// NeedleSentence states the fact the model is asked to retrieve.
func NeedleSentence(pass string) string {
	return "The secret passphrase is " + pass + "."
}

// NeedleQuestion is appended after the haystack in the user turn.
const NeedleQuestion = "What is the secret passphrase mentioned in the text above? Answer with the passphrase only."

// Found reports whether the answer contains the passphrase's digits and
// word (case-insensitively; the model may drop or change the hyphen).
func Found(answer, pass string) bool {
	a := strings.ToLower(answer)
	word, digits, ok := strings.Cut(strings.ToLower(pass), "-")
	if !ok {
		return strings.Contains(a, strings.ToLower(pass))
	}
	return strings.Contains(a, word) && strings.Contains(a, digits)
}
