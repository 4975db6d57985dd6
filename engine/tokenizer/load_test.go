package tokenizer

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// ggufMetadataFromJSON re-expresses a tokenizer.json the way llama.cpp's
// converter writes it into a GGUF, so the GGUF loading path can be checked
// against the same HF reference ids.
func ggufMetadataFromJSON(t *testing.T, name, pre string) jsonMetadata {
	data, err := readMaybeGzip(vocabPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	n := len(f.Model.Vocab) + len(f.AddedTokens)
	tokens, types := make([]any, n), make([]any, n)
	for tok, id := range f.Model.Vocab {
		tokens[id], types[id] = tok, 1.0
	}
	for _, a := range f.AddedTokens {
		ty := 4.0
		if a.Special {
			ty = 3.0
		}
		tokens[a.ID], types[a.ID] = a.Content, ty
	}
	for i := range tokens {
		if tokens[i] == nil {
			t.Fatalf("%s: hole at id %d", name, i)
		}
	}
	pairs, err := hfMerges(f.Model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	merges := make([]any, len(pairs))
	for i, p := range pairs {
		merges[i] = p[0] + " " + p[1]
	}
	return jsonMetadata{
		"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
		"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges,
	}
}

func TestGGUFPathMatchesHF(t *testing.T) {
	inputs := loadInputs(t)
	for _, c := range []struct{ name, pre string }{{"llama3", "llama-bpe"}, {"qwen3", "qwen2"}} {
		t.Run(c.pre, func(t *testing.T) {
			tok, err := FromGGUF(ggufMetadataFromJSON(t, c.name, c.pre))
			if err != nil {
				t.Fatal(err)
			}
			var ref struct{ IDs [][]int32 }
			readGzJSON(t, "testdata/ids_"+c.name+".json.gz", &ref)
			bad := 0
			for i, in := range inputs {
				if got := tok.Encode(in, false); !slices.Equal(got, ref.IDs[i]) {
					if bad++; bad <= 3 {
						t.Errorf("input %d %q: got %v want %v", i, in, got, ref.IDs[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d inputs differ from HF", bad, len(inputs))
			}
		})
	}
}

// HF's ids decode to the input: checks Decode independently of Encode.
func TestDecodeHFIDs(t *testing.T) {
	inputs := loadInputs(t)
	for _, name := range []string{"smollm2", "qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			tok := loadVocab(t, name)
			var ref struct{ IDs [][]int32 }
			readGzJSON(t, "testdata/ids_"+name+".json.gz", &ref)
			for i, in := range inputs {
				want := representable(tok, in)
				if tok.nfc {
					want = nfcValid(want)
				}
				if got := tok.Decode(ref.IDs[i]); got != want {
					t.Errorf("input %d: Decode(HF ids) = %q, want %q", i, got, want)
				}
			}
		})
	}
}

// A small hand-made tokenizer.json: merges as [a, b] pairs, a
// TemplateProcessing post-processor adding BOS and EOS, added tokens.
func TestFromJSONSmall(t *testing.T) {
	doc := `{
	  "added_tokens": [{"id": 5, "content": "<bos>", "special": true}, {"id": 6, "content": "<eos>", "special": true},
	                   {"id": 7, "content": "<x>", "special": false}],
	  "normalizer": null,
	  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
	  "post_processor": {"type": "TemplateProcessing",
	    "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<eos>", "type_id": 0}}]},
	  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4},
	            "merges": [["a", "b"], ["Ġ", "ab"]]}
	}`
	tok, err := FromJSON([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		in      string
		special bool
		want    []int32
	}{
		{"ab ab", false, []int32{3, 4}},
		{"ab ab", true, []int32{5, 3, 4, 6}},
		{"ba<x>", false, []int32{1, 0, 7}},
		{"<bos>ab", false, []int32{5, 3}},
		{"c", false, nil}, // 'c' is not in this vocabulary: dropped, as HF does
	}
	for _, c := range cases {
		if got := tok.Encode(c.in, c.special); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v) = %v, want %v", c.in, c.special, got, c.want)
		}
	}
	if tok.BOS() != 5 || tok.EOS() != 6 || !tok.IsEOG(6) || tok.VocabSize() != 8 {
		t.Errorf("BOS %d EOS %d EOG %v size %d", tok.BOS(), tok.EOS(), tok.EOGs(), tok.VocabSize())
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadVocab(t, "llama3")
	inputs := loadInputs(t)
	want := make([][]int32, len(inputs))
	for i, in := range inputs {
		want[i] = tok.Encode(in, false)
	}
	tok.cache = wordCache{}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := range inputs {
				k := (i + g*97) % len(inputs)
				if got := tok.Encode(inputs[k], false); !slices.Equal(got, want[k]) {
					t.Errorf("goroutine %d input %d: %v != %v", g, k, got, want[k])
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// The SentencePiece fixture written as a real GGUF file reads through
// engine/gguf (and Load's format sniffing) to the same ids.
func TestSentencePieceGGUFFile(t *testing.T) {
	tok, err := Load(filepath.Join("testdata", "spm_tiny.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Model() != SentencePieceBPE || !tok.AddsBOS() {
		t.Fatalf("model %v addBOS %v", tok.Model(), tok.AddsBOS())
	}
	_, f := loadSPM(t)
	for i, in := range f.Inputs {
		if got := tok.Encode(in, false); !slices.Equal(got, f.IDs[i]) {
			t.Fatalf("input %d %q: got %v want %v", i, in, got, f.IDs[i])
		}
	}
	js, err := Load(vocabPath(t, "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	if js.Model() != ByteLevelBPE || js.PreTokenizer() != PreLlama3 {
		t.Errorf("Load(tokenizer.json.gz): model %v pre %v", js.Model(), js.PreTokenizer())
	}
	if _, err := Load(filepath.Join("testdata", "missing.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}
