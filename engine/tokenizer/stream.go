package tokenizer

import "unicode/utf8"

// StreamDecoder turns a stream of token ids into text for display. A token
// can end in the middle of a UTF-8 character (byte tokens, emoji split across
// tokens); the decoder holds such a tail back until the character is
// complete. The concatenation of everything it returns, Flush included,
// equals Decode of all ids fed, byte for byte.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
	atStart bool
}

// NewStreamDecoder starts a decoder; the first id fed is treated as the first
// token of the text (SentencePiece drops its space prefix).
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t, atStart: true} }

// Add feeds one id and returns the text that became complete ("" if none).
func (d *StreamDecoder) Add(id int32) string {
	d.pending = d.t.appendPiece(d.pending, id, &d.atStart)
	cut := completePrefix(d.pending)
	if cut == 0 {
		return ""
	}
	out := string(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// Flush returns whatever is held back (an incomplete character at the end of
// generation) and resets the decoder's buffer.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// completePrefix returns the length of b without a trailing incomplete (but
// so far valid) UTF-8 sequence. Invalid bytes count as complete: they will
// never become valid, so they are passed on unchanged.
func completePrefix(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return len(b) // ASCII: nothing incomplete after it
		}
		if c >= 0xC0 { // lead byte
			if !utf8.FullRune(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}
