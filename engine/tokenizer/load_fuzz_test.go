package tokenizer

import (
	"encoding/json"
	"testing"
)

// checkLoaded exercises a tokenizer a fuzzed file produced: encoding must
// stay inside the vocabulary and decoding must not panic.
func checkLoaded(t *testing.T, tok *Tokenizer) {
	t.Helper()
	for _, s := range []string{"ab ba <s> 12 ", "\xff\x00é"} {
		for _, id := range tok.EncodeWith(s, EncodeOptions{}) {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("Encode(%q): id %d outside vocabulary of %d", s, id, tok.VocabSize())
			}
		}
		d := tok.NewStreamDecoder()
		for id := range int32(min(tok.VocabSize(), 64)) {
			d.Add(id)
		}
		d.Flush()
	}
}

// FuzzFromJSON checks that no tokenizer.json (and tokenizer_config.json)
// panics the loader or yields a tokenizer that encodes outside its vocabulary.
func FuzzFromJSON(f *testing.F) {
	f.Add([]byte(tokenizerJSON(nil)), []byte(nil))
	f.Add([]byte(tokenizerJSON(map[string]string{"pre_tokenizer": `{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel"}]}`})), []byte(`{"bos_token":"<s>","add_bos_token":true}`))
	f.Add([]byte(tokenizerJSON(map[string]string{"pre_tokenizer": `{"type":"Sequence","pretokenizers":[]}`})), []byte(nil))
	f.Add([]byte(tokenizerJSON(map[string]string{"merges": `[["a","b"]]`, "normalizer": `{"type":"NFC"}`,
		"post_processor": `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{}}]}`})), []byte(`{"eos_token":{"content":"<s>"}}`))
	f.Add([]byte(tokenizerJSON(map[string]string{"vocab": `{"a":0,"b":1,"ab":2147483647}`})), []byte(nil))
	f.Fuzz(func(t *testing.T, data, config []byte) {
		tok, err := FromJSON(data, config)
		if err != nil {
			return
		}
		checkLoaded(t, tok)
	})
}

// FuzzFromGGUF does the same for GGUF tokenizer metadata, given as the JSON
// of the tokenizer.ggml.* keys (numbers are float64, as jsonMetadata reads them).
func FuzzFromGGUF(f *testing.F) {
	for _, md := range []map[string]any{
		{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
			"tokenizer.ggml.tokens": []any{"a", "b", "ab", "<s>"}, "tokenizer.ggml.token_type": []any{1, 1, 1, 3},
			"tokenizer.ggml.merges": []any{"a b"}, "tokenizer.ggml.bos_token_id": 3},
		{"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": []any{"<unk>", "<s>", "<0x41>", "▁a", "a"},
			"tokenizer.ggml.token_type": []any{2, 3, 6, 1, 1}, "tokenizer.ggml.scores": []any{0, 0, 0, -1, -2},
			"tokenizer.ggml.unknown_token_id": 0},
	} {
		b, err := json.Marshal(md)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var md jsonMetadata
		if json.Unmarshal(data, &md) != nil {
			return
		}
		tok, err := FromGGUF(md)
		if err != nil {
			return
		}
		checkLoaded(t, tok)
	})
}
