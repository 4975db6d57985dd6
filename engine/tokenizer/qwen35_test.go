package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The qwen35 pre-tokenizer keeps combining marks in words; the expected
// splits are Python regex's for the Qwen3.5 pattern (regexQwen35).
func TestPreQwen35Marks(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"I'M here, it's 12345", []string{"I", "'M", " here", ",", " it", "'s", " ", "1", "2", "3", "4", "5"}},
		{"नमस्ते दुनिया", []string{"नमस्ते", " दुनिया"}},
		{"e\u0301te\u0301 cafe\u0301!", []string{"e\u0301te\u0301", " cafe\u0301", "!"}},
		{" \u0301abc", []string{" \u0301abc"}},
		{"x\u0300\u0301 ?\u0302!", []string{"x\u0300\u0301", " ?", "\u0302", "!"}},
		{"สวัสดีครับ ผมชื่อ", []string{"สวัสดีครับ", " ผมชื่อ"}},
		{"a,\u0301b", []string{"a", ",\u0301b"}},
	} {
		if got := PreQwen35.Split(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("qwen35 %q: %q, want %q", tc.in, got, tc.want)
		}
	}
	// Without marks it is the Qwen2 split.
	for _, c := range pretokCases {
		if got := PreQwen35.Split(c.in); !slices.Equal(got, c.qwen2) && !hasMark(c.in) {
			t.Errorf("qwen35 %q: %q, qwen2 gives %q", c.in, got, c.qwen2)
		}
	}
	if p, ok := splitRegexes[regexQwen35]; !ok || p != PreQwen35 || ggufPre["qwen35"] != PreQwen35 {
		t.Error("the Qwen3.5 regex or tokenizer.ggml.pre qwen35 does not select PreQwen35")
	}
}

func hasMark(s string) bool {
	for i := 0; i < len(s); {
		c, _, n := atMarks(s, i)
		c0, _, _ := at(s, i)
		if c != c0 {
			return true
		}
		i += n
	}
	return false
}

// The tiny Qwen3.5-MoE fixture (converted by llama.cpp's converter,
// tokenizer.ggml.pre "qwen35") encodes its reference text to the ids
// transformers produced.
func TestQwen35GGUFEncodesReference(t *testing.T) {
	dir := filepath.Join("..", "model", "testdata")
	var ref struct {
		Text   string  `json:"text"`
		Tokens []int32 `json:"tokens"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "tiny_qwen35moe.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUFFile(filepath.Join(dir, "tiny_qwen35moe.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(ref.Text, false); !slices.Equal(got, ref.Tokens) {
		t.Errorf("encoded %d ids, want %d:\n got %v\nwant %v", len(got), len(ref.Tokens), got, ref.Tokens)
	}
}
