package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// codeText returns n bytes of real source code: this package's Go files and
// the fixture script, repeated as needed.
func codeText(b *testing.B, n int) string {
	files, _ := filepath.Glob("*.go")
	files = append(files, filepath.Join("..", "..", "scripts", "tokenizer_fixtures.py"))
	var sb strings.Builder
	for sb.Len() < n {
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			sb.Write(data)
		}
		if sb.Len() == 0 {
			b.Fatal("no source files to tokenize")
		}
	}
	return sb.String()[:n]
}

func benchEncode(b *testing.B, tok *Tokenizer, cold bool) {
	text := codeText(b, 100<<10)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		if cold {
			tok.cache = wordCache{}
		}
		if len(tok.Encode(text, false)) == 0 {
			b.Fatal("no ids")
		}
	}
}

// 100 KB of code, word cache cleared before each run.
func BenchmarkEncode100KBCodeLlama3Cold(b *testing.B) { benchEncode(b, loadVocab(b, "llama3"), true) }
func BenchmarkEncode100KBCodeLlama3Warm(b *testing.B) { benchEncode(b, loadVocab(b, "llama3"), false) }
func BenchmarkEncode100KBCodeQwen3Cold(b *testing.B)  { benchEncode(b, loadVocab(b, "qwen3"), true) }
func BenchmarkEncode100KBCodeSmolLM2Cold(b *testing.B) {
	benchEncode(b, loadVocab(b, "smollm2"), true)
}
func BenchmarkEncode100KBCodeSentencePiece(b *testing.B) {
	tok, _ := loadSPM(b)
	benchEncode(b, tok, false)
}

func BenchmarkDecode(b *testing.B) {
	tok := loadVocab(b, "llama3")
	ids := tok.Encode(codeText(b, 100<<10), false)
	b.ResetTimer()
	for b.Loop() {
		_ = tok.Decode(ids)
	}
}

func BenchmarkLoadQwen3JSON(b *testing.B) {
	for b.Loop() {
		if _, err := FromJSONFile(vocabPath(b, "qwen3")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadSmolLM2GGUF(b *testing.B) {
	if _, err := os.Stat(testModelPath()); err != nil {
		b.Skip("SmolLM2 GGUF not present")
	}
	for b.Loop() {
		if _, err := FromGGUFFile(testModelPath()); err != nil {
			b.Fatal(err)
		}
	}
}
