package engine

import (
	"context"
	"errors"
	"time"

	"github.com/ftchat/ftchat/engine/kvcache"
	"github.com/ftchat/ftchat/engine/sample"
	"github.com/ftchat/ftchat/engine/tokenizer"
)

// Session is one conversation. It owns a page table in the engine's pool
// and the token history whose K/V the pool holds, so a follow-up turn
// prefills only what is new.
type Session struct {
	e   *Engine
	seq *kvcache.Sequence // replaced by Engine.Reconfigure; guarded by e.mu
	// st is the recurrent state of a hybrid model (state.go): the live
	// slot in step with seq, and turn-boundary snapshots. nil otherwise.
	st *seqState
}

// statsInterval spaces EventStats during generation.
const statsInterval = 250 * time.Millisecond

// Generate renders req with the model's chat template and streams the
// answer. The channel is closed after EventDone or EventError. Cancelling
// ctx stops within one token; the session stays consistent (it holds the
// prompt and the tokens generated so far).
func (s *Session) Generate(ctx context.Context, req Request) <-chan Event {
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		send := func(ev Event) {
			select {
			case ch <- ev:
			case <-ctx.Done():
				// The reader may have gone; deliver terminal events anyway
				// without blocking forever.
				if ev.Kind == EventDone || ev.Kind == EventError {
					select {
					case ch <- ev:
					case <-time.After(time.Second):
					}
				}
			}
		}
		if err := s.generate(ctx, req, send); err != nil {
			send(Event{Kind: EventError, Err: err, Stats: s.e.Stats()})
		}
	}()
	return ch
}

func (e *Engine) encodePrompt(req Request) ([]int32, error) {
	_, ids, err := e.renderPrompt(req)
	return ids, err
}

// RenderPrompt is the prompt text Generate would feed the model for req:
// the conversation through the model's chat template, with tools inlined
// when the template has no tool format.
func (e *Engine) RenderPrompt(req Request) (string, error) {
	return e.tmpl.Render(req.Messages, req.Tools, true)
}

// renderPrompt renders req with the chat template and tokenizes it. The
// template writes BOS itself, so none is added (as HF apply_chat_template).
// Message data (contents, tool results, names, tool-call arguments: a file
// the agent read, a pasted transcript) is always encoded as text, never as
// control tokens, so it cannot forge turns (HF would parse it as tokens);
// only the template's own text has special tokens (chatTemplate.RenderSpans).
func (e *Engine) renderPrompt(req Request) (string, []int32, error) {
	text, _, ids, err := e.renderPromptSpans(req)
	return text, ids, err
}

// renderPromptSpans is renderPrompt with the plain-text spans of text.
func (e *Engine) renderPromptSpans(req Request) (string, [][2]int, []int32, error) {
	text, spans, err := e.tmpl.RenderSpans(req.Messages, req.Tools, true)
	if err != nil {
		return "", nil, nil, err
	}
	return text, spans, e.tok.EncodeWith(text, tokenizer.EncodeOptions{PlainSpans: spans}), nil
}

func (s *Session) generate(ctx context.Context, req Request, send func(Event)) error {
	e := s.e
	sampler, err := sample.New(sample.Params{
		Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK, TopP: req.Sampling.TopP,
		MinP: req.Sampling.MinP, RepeatPenalty: req.Sampling.RepeatPenalty,
		RepeatLastN: req.Sampling.RepeatLastN, Seed: req.Sampling.Seed,
	})
	if err != nil {
		return err
	}
	promptText, spans, prompt, err := e.renderTurn(req)
	if err != nil {
		return err
	}

	var snapAt []int // hybrid models: where the prefill snapshots the state
	if s.st != nil {
		snapAt = e.turnBoundaries(promptText, spans, prompt)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	seq, st := s.seq, s.st
	turnStart := time.Now()
	if st != nil {
		// Runs after the truncation below: the state never claims more
		// than the K/V holds.
		defer e.syncState(seq, st)
	}
	start, err := e.resumeTurn(seq, st, prompt)
	if err != nil {
		return err
	}
	// computed is how many history tokens have K/V; on any early return the
	// sequence is cut back to it so it never claims uncomputed tokens.
	computed := start
	defer func() {
		if seq.Len() > computed {
			seq.Truncate(computed)
		}
	}()

	newTokens := len(prompt) - start
	send(Event{Kind: EventProgress, Done: 0, Total: newTokens})
	var logits []float32
	done := 0
	err = e.prefill(ctx, seq, st, prompt, start, &logits, func(n int) {
		done += n
		computed += n
		send(Event{Kind: EventProgress, Done: done, Total: newTokens})
	}, snapAt...)
	prefillDur := time.Since(turnStart)
	if err != nil {
		newTokens = done // a cut-short prefill counts only what it computed
	}
	e.recordPrefill(start, newTokens, prefillDur)
	if err != nil {
		if ctx.Err() != nil {
			// Release the uncomputed tail before the final stats, or they
			// show the whole prompt as held in the cache.
			seq.Truncate(computed)
			send(Event{Kind: EventDone, Stop: StopCancelled, Stats: e.Stats()})
			return nil
		}
		return err
	}

	stopper := sample.NewStopper(e.tok.EOGs(), req.Sampling.Stop)
	dec := e.tok.NewStreamDecoder()
	parser := newOutputParser(e.tmpl, promptText, len(req.Tools) > 0, req.Tools...)
	var text string // decoded answer so far (for stop strings)
	shown := 0      // bytes of text already passed to the parser
	history := append([]int32(nil), prompt...)
	decodeStart := time.Now()
	generated := 0
	lastStats := time.Now()
	stop := StopMaxTokens

	emit := func(upto int) {
		for _, ev := range parser.feed(text[shown:upto]) {
			send(ev)
		}
		shown = upto
	}
	maxTokens := req.MaxTokens
	// The first token comes from the prefill's host logits; decode steps
	// leave theirs on the device unless FTCHAT_DEVICE_SAMPLING=0.
	var src sample.Logits = sample.Slice(logits)
	onDevice := deviceSampling()
	for {
		if ctx.Err() != nil {
			stop = StopCancelled
			break
		}
		id := sampler.SampleFrom(src, history)
		if err := sourceErr(src); err != nil {
			return err
		}
		if stopper.IsEOG(id) {
			stop = StopEOS
			break
		}
		text += dec.Add(id)
		keep, hit := stopper.Check(text)
		if hit {
			text = text[:keep]
			emit(keep)
			stop = StopString
			break
		}
		emit(keep)
		if parser.stopAtCall && parser.calls > 0 {
			stop = StopToolCall
			break
		}
		generated++
		if maxTokens > 0 && generated >= maxTokens {
			// The token is shown but not fed back: nothing follows it.
			stop = StopMaxTokens
			break
		}
		if len(history)+1 >= e.info.ContextLen {
			stop = StopMaxTokens
			break
		}
		pos, err := seq.Append(id)
		if err != nil {
			var full *kvcache.PoolFullError
			if errors.As(err, &full) {
				stop = StopPoolFull
				e.recordDecode(generated, time.Since(decodeStart))
				emit(len(text))
				s.finish(parser, send)
				send(Event{Kind: EventDone, Stop: stop, Err: err, Stats: e.Stats()})
				return nil
			}
			return err
		}
		history = append(history, id)
		out, err := e.decodeToken(id, pos, seq.Pages(), st, onDevice)
		if err != nil {
			return err
		}
		computed = pos + 1
		src = out
		if time.Since(lastStats) >= statsInterval {
			lastStats = time.Now()
			e.recordDecode(generated, time.Since(decodeStart))
			send(Event{Kind: EventStats, Stats: e.Stats()})
		}
	}
	text += dec.Flush()
	emit(len(text))
	if st != nil && st.pos == seq.Len() {
		e.state.snapshot(st) // the end of the answer: a turn boundary
	}
	e.recordDecode(generated, time.Since(decodeStart))
	e.statsMu.Lock()
	e.lastTurn = time.Since(turnStart)
	e.statsMu.Unlock()
	if calls := s.finish(parser, send); calls > 0 && stop == StopEOS {
		stop = StopToolCall
	}
	send(Event{Kind: EventDone, Stop: stop, Stats: e.Stats()})
	return nil
}

// finish flushes the output parser and returns how many tool calls the
// answer held.
func (s *Session) finish(p *outputParser, send func(Event)) int {
	for _, ev := range p.flush() {
		send(ev)
	}
	return p.calls
}

func (e *Engine) recordPrefill(reused, n int, d time.Duration) {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	e.turnDecoded = 0
	e.prefillTokens += int64(n)
	e.reusedTokens += int64(reused)
	e.lastPrefill = n
	if d > 0 && n > 0 {
		e.prefillRate = float64(n) / d.Seconds()
	}
}

func (e *Engine) recordDecode(n int, d time.Duration) {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	if n > 0 && d > 0 {
		e.decodeRate = float64(n) / d.Seconds()
	}
	e.decodeTokens += int64(n) - e.turnDecoded
	e.turnDecoded = int64(n)
}

// Reset drops the conversation's cached tokens (/clear).
func (s *Session) Reset() {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	s.seq.Truncate(0)
	if s.st != nil {
		s.e.state.reset(s.st)
	}
}

// Tokens is how many tokens the session holds in the cache.
func (s *Session) Tokens() int {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.seq.Len()
}

// Close frees the session's pages.
func (s *Session) Close() {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	s.seq.Free()
	if s.st != nil {
		s.e.state.release(s.st)
	}
	delete(s.e.sessions, s)
}

// resumeTurn is resume for a new turn: a pool-full refusal also says how
// many tokens an fp8_e4m3 pool would hold, when the pool is not fp8 already.
func (e *Engine) resumeTurn(seq *kvcache.Sequence, st *seqState, prompt []int32) (int, error) {
	start, err := e.resume(seq, st, prompt)
	var full *kvcache.PoolFullError
	if errors.As(err, &full) && full.E4M3Capacity == 0 && e.layout.DType != kvcache.FP8E4M3 {
		full.E4M3Capacity = e.fp8Capacity()
	}
	return start, err
}

// renderTurn renders req's conversation for a new turn and refuses one
// that leaves no room in the context for a token of answer.
func (e *Engine) renderTurn(req Request) (text string, spans [][2]int, prompt []int32, err error) {
	text, spans, prompt, err = e.renderPromptSpans(req)
	if err == nil && len(prompt) >= e.info.ContextLen {
		err = &ContextFullError{Need: len(prompt) + 1, ContextLen: e.info.ContextLen,
			pool: &kvcache.PoolFullError{Asked: len(prompt) + 1, Fit: e.info.ContextLen, DType: e.layout.DType}}
	}
	return text, spans, prompt, err
}
