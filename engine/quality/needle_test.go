package quality

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// words counts space-separated words: a stand-in tokenizer.
func words(s string) int { return len(strings.Fields(s)) }

func TestBuildHaystackDepths(t *testing.T) {
	// Ten 4-word sentences (40 filler words per cycle), needle of 5 words.
	var filler []string
	for i := range 10 {
		filler = append(filler, strings.Repeat("w ", 3)+string(rune('a'+i))+".")
	}
	needle := "The secret passphrase is X."
	cases := []struct {
		depth     float64
		tokens    int
		before    int // filler sentences before the needle
		sentences int
	}{
		{0, 45, 0, 10},
		{1, 45, 10, 10},
		{0.5, 45, 5, 10},
		{0.1, 45, 1, 10},
		{0.9, 45, 9, 10},
		{0.5, 85, 10, 20}, // two cycles of the filler
		{0.26, 45, 3, 10}, // rounds up to the next sentence boundary (30%)
		{0.5, 47, 5, 10},  // 2 words short of another sentence: not added
	}
	for _, c := range cases {
		h, err := BuildHaystack(filler, needle, c.tokens, c.depth, words)
		if err != nil {
			t.Fatal(err)
		}
		idx := strings.Index(h.Text, needle)
		if idx < 0 {
			t.Fatalf("depth %v: needle missing from %q", c.depth, h.Text)
		}
		before := strings.Count(h.Text[:idx], ".")
		after := strings.Count(h.Text[idx+len(needle):], ".")
		if before != c.before || before+after != c.sentences {
			t.Errorf("depth %v, %d tokens: %d sentences before the needle and %d after; want %d of %d", c.depth, c.tokens, before, after, c.before, c.sentences)
		}
		if h.Tokens > c.tokens || h.Tokens != words(h.Text) {
			t.Errorf("depth %v: %d tokens (counted %d), limit %d", c.depth, h.Tokens, words(h.Text), c.tokens)
		}
		if want := float64(c.before) / float64(c.sentences); h.Depth != want {
			t.Errorf("depth %v: actual depth %v, want %v", c.depth, h.Depth, want)
		}
	}
}

func TestBuildHaystackErrors(t *testing.T) {
	ok := []string{"one two three."}
	for _, c := range []struct {
		name   string
		filler []string
		tokens int
		depth  float64
	}{
		{"no filler", nil, 100, 0.5},
		{"zero-token filler", []string{""}, 100, 0.5},
		{"depth above 1", ok, 100, 1.5},
		{"negative depth", ok, 100, -0.1},
		{"too short for the needle", ok, 3, 0.5},
	} {
		if _, err := BuildHaystack(c.filler, "a b c d e", c.tokens, c.depth, words); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func TestSplitSentences(t *testing.T) {
	got := SplitSentences("  First one.\nSecond\tline!  Third? tail ")
	want := []string{"First one.", "Second line!", "Third?", "tail"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPassphraseAndFound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	re := regexp.MustCompile(`^[a-z]+-[0-9]{4}$`)
	for range 100 {
		p := Passphrase(r)
		if !re.MatchString(p) {
			t.Fatalf("passphrase %q does not look like word-1234", p)
		}
		if !Found("The passphrase is "+strings.ToUpper(p)+".", p) {
			t.Fatalf("Found missed %q", p)
		}
	}
	cases := []struct {
		answer string
		want   bool
	}{
		{"kestrel-4821", true},
		{"The secret passphrase is Kestrel 4821.", true},
		{"kestrel", false},
		{"4821", false},
		{"falcon-4821", false},
		{"", false},
	}
	for _, c := range cases {
		if got := Found(c.answer, "kestrel-4821"); got != c.want {
			t.Errorf("Found(%q) = %v, want %v", c.answer, got, c.want)
		}
	}
	if s := NeedleSentence("kestrel-4821"); s != "The secret passphrase is kestrel-4821." {
		t.Errorf("needle sentence %q", s)
	}
}
