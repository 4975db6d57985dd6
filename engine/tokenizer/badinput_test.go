package tokenizer

import (
	"runtime"
	"strings"
	"testing"
)

// maxLoadAlloc bounds what loading one crafted file may allocate: the
// inputs below are a few hundred bytes, so anything near this is a table
// sized by a number in the file rather than by the file.
const maxLoadAlloc = 64 << 20

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// tokenizerJSON is a small valid byte-level BPE tokenizer.json with one
// field replaced by each case.
func tokenizerJSON(repl map[string]string) string {
	parts := map[string]string{
		"vocab":          `{"a":0,"b":1,"ab":2}`,
		"merges":         `["a b"]`,
		"type":           `"BPE"`,
		"pre_tokenizer":  `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`,
		"normalizer":     `null`,
		"post_processor": `null`,
		"added_tokens":   `[{"id":3,"content":"<s>","special":true}]`,
	}
	for k, v := range repl {
		parts[k] = v
	}
	return `{"model":{"type":` + parts["type"] + `,"vocab":` + parts["vocab"] + `,"merges":` + parts["merges"] + `},` +
		`"pre_tokenizer":` + parts["pre_tokenizer"] + `,"normalizer":` + parts["normalizer"] + `,` +
		`"post_processor":` + parts["post_processor"] + `,"added_tokens":` + parts["added_tokens"] + `}`
}

// Crafted tokenizer.json files used to panic (an empty pre-tokenizer
// Sequence indexed list[-1]) or allocate tens of GB (an id near 2^31 sized
// the token tables); duplicate ids were taken silently (issue 10 item 7).
// Each now loads, or fails with a message naming the problem, within a
// small allocation.
func TestFromJSONRejectsMalformedTokenizers(t *testing.T) {
	tests := []struct {
		name    string
		repl    map[string]string
		config  string
		wantErr string // "" = loads
	}{
		{"valid", nil, "", ""},
		{"empty pre-tokenizer sequence", map[string]string{"pre_tokenizer": `{"type":"Sequence","pretokenizers":[]}`}, "", "empty Sequence"},
		{"nested empty pre-tokenizer sequence", map[string]string{"pre_tokenizer": `{"type":"Sequence","pretokenizers":[{"type":"Sequence"}]}`}, "", "empty Sequence"},
		{"pre-tokenizer sequence without the key", map[string]string{"pre_tokenizer": `{"type":"Sequence"}`}, "", "empty Sequence"},
		{"pre-tokenizer without type", map[string]string{"pre_tokenizer": `{}`}, "", "pre_tokenizer ends with"},
		{"pre-tokenizer not an object", map[string]string{"pre_tokenizer": `[1]`}, "", "pre_tokenizer:"},
		{"empty normalizer sequence", map[string]string{"normalizer": `{"type":"Sequence","normalizers":[]}`}, "", ""},
		{"nested normalizer sequence", map[string]string{"normalizer": `{"type":"Sequence","normalizers":[{"type":"Sequence","normalizers":[{"type":"NFC"}]}]}`}, "", ""},
		{"normalizer without type", map[string]string{"normalizer": `{"type":"Sequence","normalizers":[{}]}`}, "", "normalizer has no type"},
		{"empty post-processor sequence", map[string]string{"post_processor": `{"type":"Sequence","processors":[]}`}, "", ""},
		{"post-processor empty template item", map[string]string{"post_processor": `{"type":"TemplateProcessing","single":[{}]}`}, "", ""},
		{"post-processor unknown special", map[string]string{"post_processor": `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<x>"}}]}`}, "", "not in the vocabulary"},
		{"vocab id near 2^31", map[string]string{"vocab": `{"a":0,"b":1,"ab":2147483647}`}, "", "id 2147483647 is far beyond the 4 tokens"},
		{"vocab id just past the gap", map[string]string{"vocab": `{"a":0,"b":1,"ab":65540}`}, "", "far beyond"},
		{"vocab with a few unused ids", map[string]string{"vocab": `{"a":0,"b":1,"ab":10}`}, "", ""},
		{"negative vocab id", map[string]string{"vocab": `{"a":0,"b":-1,"ab":2}`}, "", "id -1 is negative"},
		{"duplicate vocab id", map[string]string{"vocab": `{"a":0,"b":0,"ab":2}`}, "", `gives id 0 to both "a" and "b"`},
		{"added id near 2^31", map[string]string{"added_tokens": `[{"id":2147483647,"content":"<s>"}]`}, "", "id 2147483647 is far beyond"},
		{"negative added id", map[string]string{"added_tokens": `[{"id":-5,"content":"<s>"}]`}, "", "id -5 is negative"},
		{"duplicate added id", map[string]string{"added_tokens": `[{"id":3,"content":"<s>"},{"id":3,"content":"</s>"}]`}, "", "gives id 3 to both"},
		{"added token also in vocab", map[string]string{"vocab": `{"a":0,"b":1,"ab":2,"<s>":3}`}, "", ""},
		{"empty added content", map[string]string{"added_tokens": `[{"id":3,"content":""}]`}, "", "empty content"},
		{"merge of unknown token", map[string]string{"merges": `["a zz"]`}, "", "not in the vocabulary"},
		{"merge result unknown", map[string]string{"merges": `["b a"]`}, "", `makes "ba", which is not in the vocabulary`},
		{"merge without space", map[string]string{"merges": `["ab"]`}, "", "want two tokens"},
		{"merge pair of one", map[string]string{"merges": `[["a"]]`}, "", "has 1 elements, want 2"},
		{"merges wrong type", map[string]string{"merges": `5`}, "", "neither a list"},
		{"empty vocabulary", map[string]string{"vocab": `{}`, "merges": `[]`, "added_tokens": `[]`}, "", "vocabulary is empty"},
		{"vocab not a map", map[string]string{"vocab": `[1,2]`}, "", "not valid JSON"},
		{"model type missing", map[string]string{"type": `""`}, "", `model.type "" is not supported`},
		{"config names unknown bos", nil, `{"bos_token":"<nope>"}`, `token "<nope>" is not in the vocabulary`},
		{"config not JSON", nil, `{`, "tokenizer_config.json: not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg []byte
			if tt.config != "" {
				cfg = []byte(tt.config)
			}
			var err error
			n := allocated(func() { _, err = FromJSON([]byte(tokenizerJSON(tt.repl)), cfg) })
			if n > maxLoadAlloc {
				t.Errorf("allocated %d MiB loading a %d-byte file", n>>20, len(tokenizerJSON(tt.repl)))
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// GGUF tokenizer metadata is checked the same way: token types outside
// the GGUF enum, special ids outside the vocabulary, malformed merges
// (issue 10 item 7).
func TestFromGGUFRejectsMalformedMetadata(t *testing.T) {
	base := func() jsonMetadata {
		return jsonMetadata{
			"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
			"tokenizer.ggml.tokens":     []any{"a", "b", "ab", "<s>"},
			"tokenizer.ggml.token_type": []any{1.0, 1.0, 1.0, 3.0},
			"tokenizer.ggml.merges":     []any{"a b"},
		}
	}
	tests := []struct {
		name    string
		key     string
		value   any // nil deletes the key
		wantErr string
	}{
		{"valid", "", nil, ""},
		{"token type too large", "tokenizer.ggml.token_type", []any{1.0, 1.0, 1.0, 2147483647.0}, "token_type[3] is 2147483647, want 0..6"},
		{"negative token type", "tokenizer.ggml.token_type", []any{-1.0, 1.0, 1.0, 3.0}, "token_type[0] is -1"},
		{"token types short", "tokenizer.ggml.token_type", []any{1.0}, "has 1 entries for 4 tokens"},
		{"no tokens", "tokenizer.ggml.tokens", []any{}, "tokens is missing"},
		{"tokens missing", "tokenizer.ggml.tokens", nil, "tokens is missing"},
		{"merges missing", "tokenizer.ggml.merges", nil, "merges is missing"},
		{"merge without space", "tokenizer.ggml.merges", []any{"ab"}, "want two tokens"},
		{"merge of unknown token", "tokenizer.ggml.merges", []any{"a zz"}, "not in the vocabulary"},
		{"bos near 2^31", "tokenizer.ggml.bos_token_id", 2147483647.0, "outside the vocabulary of 4"},
		{"eos past the end", "tokenizer.ggml.eos_token_id", 4.0, "outside the vocabulary of 4"},
		{"eot near 2^64", "tokenizer.ggml.eot_token_id", 1.8e19, "outside the vocabulary"},
		{"unknown model", "tokenizer.ggml.model", "bert", "not supported"},
		{"unknown pre-tokenizer", "tokenizer.ggml.pre", "nope", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := base()
			if tt.key != "" {
				if tt.value == nil {
					delete(md, tt.key)
				} else {
					md[tt.key] = tt.value
				}
			}
			var err error
			if n := allocated(func() { _, err = FromGGUF(md) }); n > maxLoadAlloc {
				t.Errorf("allocated %d MiB", n>>20)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
