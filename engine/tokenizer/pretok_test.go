package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// pretokCases were checked against HF tokenizers' pre-tokenizers (ByteLevel
// use_regex, Digits+ByteLevel, Split with the Llama 3 and Qwen2 regexes).
var pretokCases = []struct {
	in                          string
	gpt2, smollm, llama3, qwen2 []string
}{
	{in: "Hello world",
		gpt2:   []string{"Hello", " world"},
		smollm: []string{"Hello", " world"},
		llama3: []string{"Hello", " world"},
		qwen2:  []string{"Hello", " world"}},
	{in: "I'M here, it's",
		gpt2:   []string{"I", "'", "M", " here", ",", " it", "'s"},
		smollm: []string{"I", "'", "M", " here", ",", " it", "'s"},
		llama3: []string{"I", "'M", " here", ",", " it", "'s"},
		qwen2:  []string{"I", "'M", " here", ",", " it", "'s"}},
	{in: "'S 'ſ 're",
		gpt2:   []string{"'", "S", " '", "ſ", " '", "re"},
		smollm: []string{"'", "S", " '", "ſ", " '", "re"},
		llama3: []string{"'S", " '", "ſ", " '", "re"},
		qwen2:  []string{"'S", " '", "ſ", " '", "re"}},
	{in: "  two  spaces  ",
		gpt2:   []string{" ", " two", " ", " spaces", "  "},
		smollm: []string{" ", " two", " ", " spaces", "  "},
		llama3: []string{" ", " two", " ", " spaces", "  "},
		qwen2:  []string{" ", " two", " ", " spaces", "  "}},
	{in: "a\tb\t\tc",
		gpt2:   []string{"a", "\t", "b", "\t", "\t", "c"},
		smollm: []string{"a", "\t", "b", "\t", "\t", "c"},
		llama3: []string{"a", "\tb", "\t", "\tc"},
		qwen2:  []string{"a", "\tb", "\t", "\tc"}},
	{in: "x\n\n  y",
		gpt2:   []string{"x", "\n\n ", " y"},
		smollm: []string{"x", "\n\n ", " y"},
		llama3: []string{"x", "\n\n", " ", " y"},
		qwen2:  []string{"x", "\n\n", " ", " y"}},
	{in: "end  \n",
		gpt2:   []string{"end", "  \n"},
		smollm: []string{"end", "  \n"},
		llama3: []string{"end", "  \n"},
		qwen2:  []string{"end", "  \n"}},
	{in: "   ",
		gpt2:   []string{"   "},
		smollm: []string{"   "},
		llama3: []string{"   "},
		qwen2:  []string{"   "}},
	{in: "12345 678",
		gpt2:   []string{"12345", " 678"},
		smollm: []string{"1", "2", "3", "4", "5", " ", "6", "7", "8"},
		llama3: []string{"123", "45", " ", "678"},
		qwen2:  []string{"1", "2", "3", "4", "5", " ", "6", "7", "8"}},
	{in: "abc123def",
		gpt2:   []string{"abc", "123", "def"},
		smollm: []string{"abc", "1", "2", "3", "def"},
		llama3: []string{"abc", "123", "def"},
		qwen2:  []string{"abc", "1", "2", "3", "def"}},
	{in: "(hello) [x]",
		gpt2:   []string{"(", "hello", ")", " [", "x", "]"},
		smollm: []string{"(", "hello", ")", " [", "x", "]"},
		llama3: []string{"(hello", ")", " [", "x", "]"},
		qwen2:  []string{"(hello", ")", " [", "x", "]"}},
	{in: "foo.bar()",
		gpt2:   []string{"foo", ".", "bar", "()"},
		smollm: []string{"foo", ".", "bar", "()"},
		llama3: []string{"foo", ".bar", "()"},
		qwen2:  []string{"foo", ".bar", "()"}},
	{in: " \t x",
		gpt2:   []string{" \t", " x"},
		smollm: []string{" \t", " x"},
		llama3: []string{" \t", " x"},
		qwen2:  []string{" \t", " x"}},
	{in: "\r\n\r\n",
		gpt2:   []string{"\r\n\r\n"},
		smollm: []string{"\r\n\r\n"},
		llama3: []string{"\r\n\r\n"},
		qwen2:  []string{"\r\n\r\n"}},
	{in: "a  b",
		gpt2:   []string{"a", " ", " ", "b"},
		smollm: []string{"a", " ", " ", "b"},
		llama3: []string{"a", " ", " b"},
		qwen2:  []string{"a", " ", " b"}},
	{in: "中文 字符",
		gpt2:   []string{"中文", " 字符"},
		smollm: []string{"中文", " 字符"},
		llama3: []string{"中文", " 字符"},
		qwen2:  []string{"中文", " 字符"}},
	{in: "😀👍🏽 ok",
		gpt2:   []string{"😀👍🏽", " ok"},
		smollm: []string{"😀👍🏽", " ok"},
		llama3: []string{"😀👍🏽", " ok"},
		qwen2:  []string{"😀👍🏽", " ok"}},
	{in: "ét́",
		gpt2:   []string{"e", "́", "t", "́"},
		smollm: []string{"e", "́", "t", "́"},
		llama3: []string{"e", "́t", "́"},
		qwen2:  []string{"e", "́t", "́"}},
	{in: "x = 1;\n",
		gpt2:   []string{"x", " =", " 1", ";", "\n"},
		smollm: []string{"x", " =", " ", "1", ";", "\n"},
		llama3: []string{"x", " =", " ", "1", ";\n"},
		qwen2:  []string{"x", " =", " ", "1", ";\n"}},
	{in: "$1,000.50",
		gpt2:   []string{"$", "1", ",", "000", ".", "50"},
		smollm: []string{"$", "1", ",", "0", "0", "0", ".", "5", "0"},
		llama3: []string{"$", "1", ",", "000", ".", "50"},
		qwen2:  []string{"$", "1", ",", "0", "0", "0", ".", "5", "0"}},
	{in: "٣٤٥x",
		gpt2:   []string{"٣٤٥", "x"},
		smollm: []string{"٣", "٤", "٥", "x"},
		llama3: []string{"٣٤٥", "x"},
		qwen2:  []string{"٣", "٤", "٥", "x"}},
	{in: "don't!!\n\nok",
		gpt2:   []string{"don", "'t", "!!", "\n", "\n", "ok"},
		smollm: []string{"don", "'t", "!!", "\n", "\n", "ok"},
		llama3: []string{"don", "'t", "!!\n\n", "ok"},
		qwen2:  []string{"don", "'t", "!!\n\n", "ok"}},
}

func TestPreTokenizers(t *testing.T) {
	for _, c := range pretokCases {
		for _, p := range []struct {
			pre  PreTokenizer
			want []string
		}{{PreGPT2, c.gpt2}, {PreSmolLM, c.smollm}, {PreLlama3, c.llama3}, {PreQwen2, c.qwen2}} {
			if got := p.pre.Split(c.in); !slices.Equal(got, p.want) {
				t.Errorf("%s.Split(%q) = %q, want %q", p.pre, c.in, got, p.want)
			}
		}
	}
}

// Invalid bytes are single "other" characters: they join punctuation runs,
// prefix letters in the Llama 3 rule, and are never lost.
func TestPreTokenizersInvalidUTF8(t *testing.T) {
	cases := []struct {
		pre  PreTokenizer
		in   string
		want []string
	}{
		{PreGPT2, "a\xffb", []string{"a", "\xff", "b"}},
		{PreGPT2, " \xff\xfe!x", []string{" \xff\xfe!", "x"}},
		{PreLlama3, "\xffabc", []string{"\xffabc"}},
		{PreLlama3, "x\xe4\xb8 1234", []string{"x", "\xe4\xb8", " ", "123", "4"}},
		{PreQwen2, "\xc3\n\n", []string{"\xc3\n\n"}},
		{PreSmolLM, "1\xff2", []string{"1", "\xff", "2"}},
	}
	for _, c := range cases {
		if got := c.pre.Split(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s.Split(%q) = %q, want %q", c.pre, c.in, got, c.want)
		}
		if strings.Join(c.pre.Split(c.in), "") != c.in {
			t.Errorf("%s.Split(%q) loses bytes", c.pre, c.in)
		}
	}
}
