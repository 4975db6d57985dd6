package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/engine/hfmodel"
	"github.com/ftchat/ftchat/engine/kvcache"
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
// directory's tokenizer.json (with tokenizer_config.json beside it), whose
// stop set then also holds generation_config.json's eos_token_id.
func loadTokenizer(f *gguf.File) (*tokenizer.Tokenizer, error) {
	dir, ok := hfmodel.Dir(f)
	if !ok {
		return tokenizer.FromGGUF(f)
	}
	p := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer.json is missing from the checkpoint directory (only fast tokenizers are read: save the tokenizer with transformers to get one)")
	}
	tok, err := tokenizer.FromJSONFile(p)
	if err != nil {
		return nil, err
	}
	if err := tok.AddEOG(hfmodel.EOSIDs(f)...); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id: %w", filepath.Join(dir, "generation_config.json"), err)
	}
	return tok, nil
}

// applyCheckpointScales is --kv-scales checkpoint: the k_scale/v_scale
// tensors of a Hugging Face checkpoint (engine/hfmodel.KVScales).
func (e *Engine) applyCheckpointScales(l *kvcache.Layout) error {
	sf, ok := hfmodel.KVScales(e.file, l.KVHeads)
	if !ok {
		return fmt.Errorf("--kv-scales checkpoint: %s has no k_scale/v_scale tensors; use a calibration file from `ftchat calibrate`", e.file.Path)
	}
	err := sf.Match(l.Layers, l.KVHeads)
	if err == nil {
		err = expandScales(sf, l) // each fp8 half in its format (kvtypes.go)
	}
	if err != nil {
		return fmt.Errorf("--kv-scales checkpoint: %w", err)
	}
	return nil
}
