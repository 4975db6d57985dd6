package engine

import (
	"context"
	"time"
)

// Prefill computes the K/V (and, on a hybrid model, the recurrent state)
// of the conversation req holds, rendered as Generate renders it, without
// generating: the next Generate then prefills only its new turn. /model
// uses it after switching models (issue 15 item 17): the new model's
// tokenizer and template differ, so the conversation is prefilled again
// from its text. progress gets the tokens done of the total, 0 / total
// first. Cancelling ctx stops between chunks; what was computed is kept
// and the rest is prefilled by the next Generate.
func (s *Session) Prefill(ctx context.Context, req Request, progress func(done, total int)) error {
	e := s.e
	promptText, spans, prompt, err := e.renderTurn(req)
	if err != nil {
		return err
	}
	var snapAt []int
	if s.st != nil {
		snapAt = e.turnBoundaries(promptText, spans, prompt)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	seq, st := s.seq, s.st
	if st != nil {
		defer e.syncState(seq, st)
	}
	t0 := time.Now()
	start, err := e.resumeTurn(seq, st, prompt)
	if err != nil {
		return err
	}
	computed := start
	defer func() {
		if seq.Len() > computed {
			seq.Truncate(computed) // never claim uncomputed tokens
		}
	}()
	total := len(prompt) - start
	if progress == nil {
		progress = func(int, int) {}
	}
	progress(0, total)
	done := 0
	err = e.prefill(ctx, seq, st, prompt, start, nil, func(n int) {
		done += n
		computed += n
		progress(done, total)
	}, snapAt...)
	e.recordPrefill(start, done, time.Since(t0))
	return err
}
