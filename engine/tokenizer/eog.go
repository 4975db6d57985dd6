package tokenizer

import "fmt"

// AddEOG adds ids to the end-of-generation set, for stop ids a model
// names outside its tokenizer (a Hugging Face generation_config.json's
// eos_token_id); an id outside the vocabulary is refused.
func (t *Tokenizer) AddEOG(ids ...int32) error {
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.pieces) {
			return fmt.Errorf("end-of-generation id %d is outside the vocabulary of %d", id, len(t.pieces))
		}
	}
	for _, id := range ids {
		t.eog[id] = true
	}
	return nil
}
