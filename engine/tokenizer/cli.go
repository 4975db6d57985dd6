package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ftchat/ftchat/engine/gguf"
	"github.com/ftchat/ftchat/internal/safefile"
)

// Load builds a tokenizer from a GGUF model or a tokenizer.json (optionally
// gzipped), telling them apart by content.
func Load(path string) (*Tokenizer, error) {
	f, _, err := safefile.Open(path, "tokenizer")
	if err != nil {
		return nil, err
	}
	head := make([]byte, 4)
	_, err = io.ReadFull(f, head)
	f.Close()
	if err == nil && string(head) == gguf.Magic {
		return FromGGUFFile(path)
	}
	return FromJSONFile(path)
}

// PrintOptions controls WriteIDs.
type PrintOptions struct {
	JSON          bool // {"ids": [...], "count": N, "pieces": [...]} instead of one line of ids
	AddSpecial    bool // add BOS/EOS as the model asks
	PlainSpecials bool // special-token text in the input is plain text
}

// WriteIDs tokenizes text and writes the ids to w: one line of
// space-separated ids, or JSON with the ids, their count and each token's
// vocabulary spelling. It backs `ftchat tokenize`.
func WriteIDs(w io.Writer, t *Tokenizer, text string, o PrintOptions) error {
	_, err := WriteIDsCount(w, t, text, o)
	return err
}

// WriteIDsCount is WriteIDs that also returns how many tokens it wrote.
func WriteIDsCount(w io.Writer, t *Tokenizer, text string, o PrintOptions) (int, error) {
	ids := t.EncodeWith(text, EncodeOptions{AddSpecial: o.AddSpecial, PlainSpecials: o.PlainSpecials})
	n, err := writeIDs(w, t, ids, o)
	return n, err
}

func writeIDs(w io.Writer, t *Tokenizer, ids []int32, o PrintOptions) (int, error) {
	if o.JSON {
		pieces := make([]string, len(ids))
		for i, id := range ids {
			pieces[i] = t.Piece(id)
		}
		if ids == nil {
			ids = []int32{}
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			IDs    []int32  `json:"ids"`
			Count  int      `json:"count"`
			Pieces []string `json:"pieces"`
		}{ids, len(ids), pieces}); err != nil {
			return 0, err
		}
		_, err := w.Write(buf.Bytes())
		return len(ids), err
	}
	var sb strings.Builder
	for i, id := range ids {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strconv.Itoa(int(id)))
	}
	sb.WriteByte('\n')
	_, err := io.WriteString(w, sb.String())
	if err != nil {
		return 0, fmt.Errorf("writing ids: %w", err)
	}
	return len(ids), nil
}
