package safetensors

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ftchat/ftchat/internal/safefile"
)

// IndexName is the index file of a sharded checkpoint.
const IndexName = "model.safetensors.index.json"

// MaxIndex bounds an index file (real ones are well under 10 MB).
const MaxIndex = 64 << 20

// Index is a parsed model.safetensors.index.json: which shard holds each tensor.
type Index struct {
	WeightMap map[string]string // tensor name -> shard file name (a base name in the same directory)
	Shards    []string          // distinct shard names, sorted
}

// ReadIndex reads and checks the index at path.
func ReadIndex(path string) (*Index, error) {
	b, err := safefile.ReadFile(path, MaxIndex, "safetensors index")
	if err != nil {
		return nil, err
	}
	return ParseIndex(path, b)
}

// ParseIndex parses index JSON; shard names must be plain file names
// (no directories, no ".."), so an index cannot point outside its directory.
func ParseIndex(path string, b []byte) (*Index, error) {
	var raw struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, &Error{path, "not valid JSON: " + err.Error()}
	}
	if len(raw.WeightMap) == 0 {
		return nil, &Error{path, "weight_map is missing or empty"}
	}
	ix := &Index{WeightMap: raw.WeightMap}
	seen := map[string]bool{}
	for name, shard := range raw.WeightMap {
		if shard == "" || shard == "." || shard == ".." || strings.ContainsAny(shard, "/\\\x00") || filepath.Base(shard) != shard {
			return nil, &Error{path, fmt.Sprintf("tensor %q: shard %q is not a plain file name in the checkpoint directory", name, shard)}
		}
		if !seen[shard] {
			seen[shard] = true
			ix.Shards = append(ix.Shards, shard)
		}
	}
	sort.Strings(ix.Shards)
	return ix, nil
}
