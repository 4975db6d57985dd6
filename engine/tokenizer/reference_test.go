package tokenizer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/ftchat/ftchat/internal/testmodel"
)

// The reference ids come from scripts/tokenizer_fixtures.py (HF tokenizers
// and sentencepiece); see its docstring for how each reference is built.

func readGzJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := readMaybeGzip(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadInputs(t testing.TB) []string {
	var b64 []string
	readGzJSON(t, "testdata/inputs.json.gz", &b64)
	out := make([]string, len(b64))
	for i, s := range b64 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

// testModelPath is where CI puts the default model (see the project rules).
func testModelPath() string { return testmodel.Path() }

var (
	vocabMu    sync.Mutex
	vocabCache = map[string]*Tokenizer{}
)

// loadVocab loads a real vocabulary once per test process.
func loadVocab(t testing.TB, name string) *Tokenizer {
	t.Helper()
	vocabMu.Lock()
	defer vocabMu.Unlock()
	if tok, ok := vocabCache[name]; ok {
		return tok
	}
	var (
		tok *Tokenizer
		err error
	)
	switch name {
	case "smollm2":
		p := testModelPath()
		if _, statErr := os.Stat(p); statErr != nil {
			t.Skipf("SmolLM2 GGUF not found at %s (set FTCHAT_TEST_MODEL)", p)
		}
		tok, err = FromGGUFFile(p)
	default:
		tok, err = FromJSONFile(vocabPath(t, name))
	}
	if err != nil {
		t.Fatal(err)
	}
	vocabCache[name] = tok
	return tok
}

func TestMatchesHF(t *testing.T) {
	inputs := loadInputs(t)
	if len(inputs) < 1000 {
		t.Fatalf("only %d fixture inputs", len(inputs))
	}
	for _, name := range []string{"smollm2", "qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			tok := loadVocab(t, name)
			var ref struct {
				IDs           [][]int32
				PlainSpecials map[string][]int32 `json:"plain_specials"`
			}
			readGzJSON(t, "testdata/ids_"+name+".json.gz", &ref)
			if len(ref.IDs) != len(inputs) {
				t.Fatalf("%d reference rows for %d inputs: regenerate the fixtures", len(ref.IDs), len(inputs))
			}
			bad := 0
			for i, in := range inputs {
				got := tok.Encode(in, false)
				if !slices.Equal(got, ref.IDs[i]) {
					bad++
					if bad <= 5 {
						t.Errorf("input %d %q:\n got %v %s\nwant %v %s", i, in, got, pieces(tok, got), ref.IDs[i], pieces(tok, ref.IDs[i]))
					}
				}
				want := representable(tok, in)
				if tok.nfc {
					want = nfcValid(want)
				}
				if dec := tok.Decode(got); dec != want {
					t.Errorf("input %d: Decode(Encode(s)) = %q, want %q", i, dec, want)
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d inputs differ from HF", bad, len(inputs))
			}
			if len(ref.PlainSpecials) < 20 {
				t.Fatalf("only %d plain-specials references", len(ref.PlainSpecials))
			}
			for k, want := range ref.PlainSpecials {
				i, _ := strconv.Atoi(k)
				if got := tok.EncodeWith(inputs[i], EncodeOptions{PlainSpecials: true}); !slices.Equal(got, want) {
					t.Errorf("PlainSpecials input %s %q:\n got %v %s\nwant %v %s", k, inputs[i], got, pieces(tok, got), want, pieces(tok, want))
				}
			}
		})
	}
}

// representable drops the bytes the vocabulary cannot spell (SmolLM2 has no
// token for 0x1D and a few bytes that never occur in valid UTF-8); HF drops
// them too.
func representable(tok *Tokenizer, s string) string {
	return string(slices.DeleteFunc([]byte(s), func(b byte) bool {
		return tok.model == ByteLevelBPE && tok.byteIDs[b] < 0
	}))
}

func pieces(tok *Tokenizer, ids []int32) string {
	var sb strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&sb, "|%s", tok.Piece(id))
	}
	return sb.String()
}

// jsonMetadata serves GGUF-style metadata from JSON (the SentencePiece fixture).
type jsonMetadata map[string]any

func (m jsonMetadata) String(k string) (string, bool) { s, ok := m[k].(string); return s, ok }
func (m jsonMetadata) Bool(k string) (bool, bool)     { b, ok := m[k].(bool); return b, ok }
func (m jsonMetadata) Uint(k string) (uint64, bool) {
	f, ok := m[k].(float64)
	if !ok || f < 0 {
		return 0, false
	}
	return uint64(f), true
}
func (m jsonMetadata) Strings(k string) ([]string, bool) {
	a, ok := m[k].([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, len(a))
	for i, v := range a {
		if out[i], ok = v.(string); !ok {
			return nil, false
		}
	}
	return out, true
}
func (m jsonMetadata) Ints(k string) ([]int64, bool) {
	a, ok := m[k].([]any)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(a))
	for i, v := range a {
		f, ok := v.(float64)
		if !ok {
			return nil, false
		}
		out[i] = int64(f)
	}
	return out, true
}
func (m jsonMetadata) Floats(k string) ([]float32, bool) {
	a, ok := m[k].([]any)
	if !ok {
		return nil, false
	}
	out := make([]float32, len(a))
	for i, v := range a {
		f, ok := v.(float64)
		if !ok {
			return nil, false
		}
		out[i] = float32(f)
	}
	return out, true
}

type spmFixture struct {
	Metadata jsonMetadata
	Inputs   []string
	IDs      [][]int32
}

func loadSPM(t testing.TB) (*Tokenizer, spmFixture) {
	var f spmFixture
	readGzJSON(t, "testdata/spm_tiny.json.gz", &f)
	tok, err := FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return tok, f
}

func TestSentencePieceMatchesReference(t *testing.T) {
	tok, f := loadSPM(t)
	if len(f.Inputs) < 200 {
		t.Fatalf("only %d SentencePiece fixture inputs", len(f.Inputs))
	}
	bad := 0
	for i, in := range f.Inputs {
		got := tok.Encode(in, false)
		if !slices.Equal(got, f.IDs[i]) {
			bad++
			if bad <= 5 {
				t.Errorf("input %d %q:\n got %v %s\nwant %v %s", i, in, got, pieces(tok, got), f.IDs[i], pieces(tok, f.IDs[i]))
			}
		}
		if dec := tok.Decode(got); dec != in {
			t.Errorf("input %d: Decode(Encode(s)) = %q, want %q", i, dec, in)
		}
		withBOS := tok.Encode(in, true)
		if len(withBOS) == 0 || withBOS[0] != tok.BOS() || !slices.Equal(withBOS[1:], got) {
			t.Errorf("input %d: Encode(s, true) = %v, want BOS %d then %v", i, withBOS, tok.BOS(), got)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d inputs differ from sentencepiece", bad, len(f.Inputs))
	}
}

// Invalid UTF-8 in SentencePiece input falls back to byte tokens and
// round-trips exactly.
func TestSentencePieceInvalidUTF8(t *testing.T) {
	tok, _ := loadSPM(t)
	for _, in := range []string{"\xff", "a\xe4\xb8b", "\xf0\x9f\x98", " \x80 x"} {
		ids := tok.Encode(in, false)
		if dec := tok.Decode(ids); dec != in {
			t.Errorf("%q: round trip gave %q (ids %v)", in, dec, ids)
		}
		if !utf8.ValidString(in) && !slices.ContainsFunc(ids, func(id int32) bool { return tok.Type(id) == TypeByte }) {
			t.Errorf("%q: no byte-fallback token in %v", in, ids)
		}
	}
}

func TestSpecialTokens(t *testing.T) {
	tok := loadVocab(t, "qwen3")
	imEnd, ok := tok.TokenID("<|im_end|>")
	if !ok || imEnd != 151645 {
		t.Fatalf("<|im_end|> id = %d, %v", imEnd, ok)
	}
	text := "hi<|im_end|>"
	parsed := tok.Encode(text, false)
	if !slices.Contains(parsed, imEnd) {
		t.Errorf("Encode(%q) = %v: special token not matched", text, parsed)
	}
	plain := tok.EncodeWith(text, EncodeOptions{PlainSpecials: true})
	if slices.Contains(plain, imEnd) {
		t.Errorf("PlainSpecials: Encode(%q) = %v still holds <|im_end|>", text, plain)
	}
	if tok.Decode(plain) != text {
		t.Errorf("PlainSpecials round trip = %q", tok.Decode(plain))
	}
	// <think> is a non-special added token: it matches even with PlainSpecials.
	think, _ := tok.TokenID("<think>")
	if ids := tok.EncodeWith("<think>x", EncodeOptions{PlainSpecials: true}); ids[0] != think {
		t.Errorf("<think> not matched as added token: %v", ids)
	}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, _ := tok.TokenID(s)
		if !tok.IsEOG(id) {
			t.Errorf("%s (%d) is not EOG", s, id)
		}
	}
	if tok.IsEOG(think) {
		t.Errorf("<think> is EOG")
	}
	if tok.EOS() != imEnd || tok.BOS() != -1 || tok.AddsBOS() {
		t.Errorf("qwen3: EOS %d BOS %d addBOS %v; want %d, -1, false (from tokenizer_config.json)", tok.EOS(), tok.BOS(), tok.AddsBOS(), imEnd)
	}
	if tok.VocabSize() != 151669 {
		t.Errorf("qwen3 vocab size %d, want 151669", tok.VocabSize())
	}

	l3 := loadVocab(t, "llama3")
	eot, _ := l3.TokenID("<|eot_id|>")
	if l3.BOS() != 128000 || l3.EOS() != 128001 || !l3.IsEOG(eot) || !l3.IsEOG(128001) || l3.VocabSize() != 128256 {
		t.Errorf("llama3: BOS %d EOS %d eot %d EOG %v vocab %d", l3.BOS(), l3.EOS(), eot, l3.EOGs(), l3.VocabSize())
	}
}

func TestSmolLM2Metadata(t *testing.T) {
	tok := loadVocab(t, "smollm2")
	if tok.PreTokenizer() != PreSmolLM || tok.BOS() != 1 || tok.EOS() != 2 || tok.VocabSize() != 49152 || tok.AddsBOS() {
		t.Errorf("pre %s BOS %d EOS %d vocab %d addBOS %v", tok.PreTokenizer(), tok.BOS(), tok.EOS(), tok.VocabSize(), tok.AddsBOS())
	}
	if !tok.IsEOG(2) || tok.IsEOG(1) {
		t.Errorf("EOG set %v, want <|im_end|> (2) in and <|im_start|> (1) out", tok.EOGs())
	}
	ids := tok.Encode("<|im_start|>user\nHi<|im_end|>", false)
	if ids[0] != 1 || ids[len(ids)-1] != 2 {
		t.Errorf("chat markers not parsed: %v", ids)
	}
}

func TestStreamDecoder(t *testing.T) {
	inputs := loadInputs(t)
	for _, name := range []string{"qwen3", "llama3"} {
		tok := loadVocab(t, name)
		for i, in := range inputs {
			ids := tok.Encode(in, false)
			d := tok.NewStreamDecoder()
			var sb strings.Builder
			for _, id := range ids {
				out := d.Add(id)
				// Held-back text is only ever an incomplete character.
				if out != "" && !utf8.ValidString(out) && utf8.ValidString(tok.Decode(ids)) {
					t.Fatalf("%s input %d: streamed invalid UTF-8 %q from valid text", name, i, out)
				}
				sb.WriteString(out)
			}
			sb.WriteString(d.Flush())
			if sb.String() != tok.Decode(ids) {
				t.Fatalf("%s input %d: stream %q != Decode %q", name, i, sb.String(), tok.Decode(ids))
			}
		}
	}
	// An emoji split over byte tokens comes out whole, once complete.
	tok := loadVocab(t, "llama3")
	d := tok.NewStreamDecoder()
	emoji := "😀"
	var outs []string
	for i := 0; i < len(emoji); i++ {
		outs = append(outs, d.Add(tok.byteIDs[emoji[i]]))
	}
	if !slices.Equal(outs, []string{"", "", "", emoji}) || d.Flush() != "" {
		t.Errorf("byte-wise emoji streamed as %q", outs)
	}
	d.Add(tok.byteIDs[0xE4])
	if got := d.Flush(); got != "\xe4" {
		t.Errorf("Flush = %q, want the held byte", got)
	}
}

func TestWriteIDs(t *testing.T) {
	tok := loadVocab(t, "llama3")
	var buf bytes.Buffer
	if err := WriteIDs(&buf, tok, "Hello world", PrintOptions{}); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "9906 1917\n" {
		t.Errorf("plain output %q", buf.String())
	}
	buf.Reset()
	if err := WriteIDs(&buf, tok, "Hello world", PrintOptions{JSON: true}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		IDs    []int32
		Count  int
		Pieces []string
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if !slices.Equal(got.IDs, []int32{9906, 1917}) || got.Count != 2 || !slices.Equal(got.Pieces, []string{"Hello", "Ġworld"}) {
		t.Errorf("JSON output %s", buf.String())
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"not json", `{`, "not valid JSON"},
		{"unigram", `{"model":{"type":"Unigram"}}`, `model.type "Unigram" is not supported`},
		{"unknown regex", `{"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated"},{"type":"ByteLevel","use_regex":false}]},"model":{"type":"BPE","vocab":{"a":0}}}`, `regex "\\w+" is not one of the known ones`},
		{"metaspace", `{"pre_tokenizer":{"type":"Metaspace"},"model":{"type":"BPE","vocab":{"a":0}}}`, "only byte-level BPE"},
		{"bad merge", `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}}`, `makes "ab", which is not in the vocabulary`},
		{"normalizer", `{"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0}}}`, `normalizer "Lowercase" is not supported`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromJSON([]byte(c.json), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	ggufCases := []struct {
		name string
		md   jsonMetadata
		want string
	}{
		{"no model", jsonMetadata{}, "tokenizer.ggml.model is missing"},
		{"bert", jsonMetadata{"tokenizer.ggml.model": "bert"}, `"bert" is not supported`},
		{"pre", jsonMetadata{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "klingon"}, `tokenizer.ggml.pre "klingon" is not supported`},
		{"no tokens", jsonMetadata{"tokenizer.ggml.model": "gpt2"}, "tokenizer.ggml.tokens is missing"},
		{"no merges", jsonMetadata{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": []any{"a"}}, "merges is missing"},
		{"bad eos", jsonMetadata{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": []any{"a"}, "tokenizer.ggml.merges": []any{}, "tokenizer.ggml.eos_token_id": 5.0}, "eos_token_id is 5, outside"},
		{"no scores", jsonMetadata{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": []any{"a"}}, "one score per token"},
	}
	for _, c := range ggufCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromGGUF(c.md)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// SentencePiece: BOS then text decodes without the space prefix, and a
// streamed decode agrees with Decode.
func TestSentencePieceSpecials(t *testing.T) {
	tok, _ := loadSPM(t)
	for _, in := range []string{"hello world", " leading", "<s>hello", "a\tb\n"} {
		ids := tok.Encode(in, true)
		want := "<s>" + in
		if got := tok.Decode(ids); got != want {
			t.Errorf("Decode(Encode(%q, true)) = %q, want %q", in, got, want)
		}
		d := tok.NewStreamDecoder()
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Add(id))
		}
		if sb.String()+d.Flush() != want {
			t.Errorf("stream of %q = %q", in, sb.String())
		}
	}
}

func TestPlainSpans(t *testing.T) {
	tok := loadVocab(t, "qwen3")
	imEnd, _ := tok.TokenID("<|im_end|>")
	text := "a<|im_end|>b<|im_end|>c<|im_end|>"
	count := func(ids []int32) (n int) {
		for _, id := range ids {
			if id == imEnd {
				n++
			}
		}
		return n
	}
	tests := []struct {
		name  string
		spans [][2]int
		want  int // <|im_end|> tokens
	}{
		{"none", nil, 3},
		{"first", [][2]int{{0, 11}}, 2},
		{"first and last", [][2]int{{0, 11}, {23, 34}}, 1},
		{"all", [][2]int{{0, len(text)}}, 0},
		{"span ends before the token", [][2]int{{0, 1}}, 3},
		// A special token begun before a span may not end inside it.
		{"token reaches into a span", [][2]int{{5, 7}}, 2},
		{"token's last byte in a span", [][2]int{{10, 11}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids := tok.EncodeWith(text, EncodeOptions{PlainSpans: tc.spans})
			if got := count(ids); got != tc.want {
				t.Errorf("%d <|im_end|> tokens, want %d: %v", got, tc.want, ids)
			}
			if tok.Decode(ids) != text {
				t.Errorf("round trip %q", tok.Decode(ids))
			}
		})
	}
	if !tok.HasSpecialText(text) || tok.HasSpecialText("plain <think> text") {
		t.Error("HasSpecialText: <|im_end|> is special text, <think> is not")
	}
}
