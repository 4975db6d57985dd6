package tokenizer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
)

// Metadata is the part of a GGUF file the tokenizer reads; *gguf.File
// satisfies it.
type Metadata interface {
	String(key string) (string, bool)
	Strings(key string) ([]string, bool)
	Uint(key string) (uint64, bool)
	Bool(key string) (bool, bool)
	Ints(key string) ([]int64, bool)
	Floats(key string) ([]float32, bool)
}

var _ Metadata = (*gguf.File)(nil)

// FromGGUF builds the tokenizer described by a GGUF file's tokenizer.ggml.*
// metadata.
func FromGGUF(md Metadata) (*Tokenizer, error) {
	const src = "GGUF tokenizer"
	s := newSpec(src)
	kind, _ := md.String("tokenizer.ggml.model")
	switch kind {
	case "gpt2":
		s.model = ByteLevelBPE
		pre, _ := md.String("tokenizer.ggml.pre")
		p, ok := ggufPre[pre]
		if !ok {
			return nil, fmt.Errorf("%s: tokenizer.ggml.pre %q is not supported (supported: %s)", src, pre, strings.Join(sortedKeys(ggufPre), ", "))
		}
		s.pre = p
		// Llama 3 tokenizers take a word whole when it is in the vocabulary
		// (HF ignore_merges); Qwen2 and Qwen3.5 tokenizers normalize to NFC.
		s.ignoreMerges = p == PreLlama3
		s.nfc = p == PreQwen2 || p == PreQwen35
	case "llama":
		s.model = SentencePieceBPE
		s.addBOS = true
		s.addSpacePrefix = true
	case "":
		return nil, fmt.Errorf("%s: tokenizer.ggml.model is missing: the file carries no tokenizer", src)
	default:
		return nil, fmt.Errorf("%s: tokenizer.ggml.model %q is not supported (supported: gpt2, llama)", src, kind)
	}
	toks, ok := md.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) == 0 {
		return nil, fmt.Errorf("%s: tokenizer.ggml.tokens is missing or not a string array", src)
	}
	s.tokens = toks
	if tt, ok := md.Ints("tokenizer.ggml.token_type"); ok {
		if len(tt) != len(toks) {
			return nil, fmt.Errorf("%s: tokenizer.ggml.token_type has %d entries for %d tokens", src, len(tt), len(toks))
		}
		s.types = make([]TokenType, len(tt))
		for i, v := range tt {
			if v < int64(TypeUndefined) || v > int64(TypeByte) {
				return nil, fmt.Errorf("%s: tokenizer.ggml.token_type[%d] is %d, want %d..%d", src, i, v, TypeUndefined, TypeByte)
			}
			s.types[i] = TokenType(v)
		}
	}
	if sc, ok := md.Floats("tokenizer.ggml.scores"); ok {
		s.scores = sc
	}
	if s.model == ByteLevelBPE {
		m, ok := md.Strings("tokenizer.ggml.merges")
		if !ok {
			return nil, fmt.Errorf("%s: tokenizer.ggml.merges is missing (needed by byte-level BPE)", src)
		}
		s.merges = make([][2]string, len(m))
		for i, line := range m {
			a, b, ok := strings.Cut(line, " ")
			if !ok {
				return nil, fmt.Errorf("%s: merge %d is %q, want two tokens separated by a space", src, i, line)
			}
			s.merges[i] = [2]string{a, b}
		}
	}
	ids := map[string]*int32{"bos": &s.bos, "eos": &s.eos, "unknown": &s.unk, "padding": &s.pad, "eot": &s.eot, "eom": &s.eom}
	for name, dst := range ids {
		if v, ok := md.Uint("tokenizer.ggml." + name + "_token_id"); ok {
			if v >= uint64(len(toks)) {
				return nil, fmt.Errorf("%s: tokenizer.ggml.%s_token_id is %d, outside the vocabulary of %d", src, name, v, len(toks))
			}
			*dst = int32(v)
		}
	}
	flags := map[string]*bool{"add_bos_token": &s.addBOS, "add_eos_token": &s.addEOS, "add_space_prefix": &s.addSpacePrefix}
	for name, dst := range flags {
		if v, ok := md.Bool("tokenizer.ggml." + name); ok {
			*dst = v
		}
	}
	return s.build()
}

// FromGGUFFile opens a GGUF file and builds its tokenizer.
func FromGGUFFile(path string) (*Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
