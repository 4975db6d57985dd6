package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// openModelFile opens a GGUF file, or a Hugging Face checkpoint directory
// as a virtual GGUF (engine/hfmodel).
func openModelFile(path string) (*gguf.File, error) {
	if hfmodel.IsCheckpoint(path) {
		return hfmodel.Open(path)
	}
	return gguf.Open(path)
}

// loadTokenizer reads the GGUF's tokenizer metadata, or a checkpoint
// directory's tokenizer.json (with tokenizer_config.json beside it).
func loadTokenizer(f *gguf.File) (*tokenizer.Tokenizer, error) {
	dir, ok := hfmodel.Dir(f)
	if !ok {
		return tokenizer.FromGGUF(f)
	}
	p := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer.json is missing from the checkpoint directory (only fast tokenizers are read: save the tokenizer with transformers to get one)")
	}
	return tokenizer.FromJSONFile(p)
}
