package ui

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/agent/tui"
	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/engine/kvcache"
)

// waitCancel is a scripted event kind: the session blocks until its
// context is cancelled, then ends the stream as the engine does (the
// EventDone carries the scripted event's Stats).
const waitCancel engine.EventKind = -1

// fakeEngine is a deterministic engine double: tokens are words.
type fakeEngine struct {
	mu        sync.Mutex
	stats     engine.Stats
	reconfErr error
	reconfs   []string
	// fitTokens, when set, makes FitCheck refuse prompts of more words
	// with a *kvcache.PoolFullError, as the engine does.
	fitTokens int
	// reconfHold, when set, blocks SwitchKV half way until it is closed
	// or the switch is cancelled.
	reconfHold chan struct{}
	// reconfDelay slows each quarter of SwitchKV down (the tmux test).
	reconfDelay time.Duration
	fitChecks   int
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{stats: engine.Stats{
		Model: "SmolLM2-135M-Instruct", Device: "cuda:0 NVIDIA H200", KVDType: "bf16", PageSize: 16,
		PagesTotal: 4096, PagesUsed: 1024, TokensCapacity: 65536, TokensUsed: 16000,
		BytesPerToken: 23040, BytesUsed: 16000 * 23040, BytesBF16: 16000 * 23040, CapacityRatio: 1,
		FP8TokensCapacity: 122880,
		BudgetBytes:       8 << 30, WeightsBytes: 100 << 20, PoolBytes: 65536 * 23040,
		PrefillTokensPerS: 12345.6, DecodeTokensPerS: 87.25,
	}}
}

func (f *fakeEngine) Stats() engine.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *fakeEngine) CountTokens(text string) int { return len(strings.Fields(text)) }

func (f *fakeEngine) FitCheck(req engine.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fitChecks++
	n := 0
	for _, m := range req.Messages {
		n += f.CountTokens(m.Content)
	}
	if f.fitTokens > 0 && n > f.fitTokens {
		return &kvcache.PoolFullError{Asked: n, Fit: f.fitTokens, Held: f.fitTokens, Prompt: true,
			Capacity: f.fitTokens, Used: f.fitTokens, DType: kvcache.BF16}
	}
	if n > f.stats.TokensCapacity {
		return fmt.Errorf("prompt needs %d tokens, the KV pool holds %d", n, f.stats.TokensCapacity)
	}
	return nil
}

func (f *fakeEngine) SwitchKV(ctx context.Context, dtype string, progress func(done, total int)) error {
	f.mu.Lock()
	f.reconfs = append(f.reconfs, dtype)
	err, used, hold := f.reconfErr, f.stats.TokensUsed, f.reconfHold
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for i := 0; i <= 4; i++ {
		progress(used*i/4, used)
		if delay := f.reconfDelay; delay > 0 && i < 4 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return fmt.Errorf("/kvdtype %s cancelled; the cache is %s as before: %w", dtype, f.Stats().KVDType, ctx.Err())
			}
		}
		if i == 2 && hold != nil {
			// Half way: wait for the test, or for a cancel.
			select {
			case <-hold:
			case <-ctx.Done():
				return fmt.Errorf("/kvdtype %s cancelled; the cache is %s as before: %w", dtype, f.Stats().KVDType, ctx.Err())
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if dtype == "fp8_e4m3" {
		s := &f.stats
		s.KVDType, s.BytesPerToken = dtype, 12240
		s.PagesTotal *= 2
		s.TokensCapacity = s.PagesTotal * s.PageSize
		s.BytesUsed = int64(s.TokensUsed) * 12240
		s.CapacityRatio = 23040.0 / 12240
	}
	return nil
}

// fakeSession plays one script per Generate call and records requests.
type fakeSession struct {
	mu      sync.Mutex
	scripts [][]engine.Event
	reqs    []engine.Request
	resets  int
}

func (s *fakeSession) push(evs ...engine.Event) { s.scripts = append(s.scripts, evs) }

func (s *fakeSession) Generate(ctx context.Context, req engine.Request) <-chan engine.Event {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	var script []engine.Event
	if len(s.scripts) > 0 {
		script, s.scripts = s.scripts[0], s.scripts[1:]
	}
	s.mu.Unlock()
	ch := make(chan engine.Event)
	go func() {
		defer close(ch)
		for _, ev := range script {
			if ev.Kind == waitCancel {
				<-ctx.Done()
				ch <- engine.Event{Kind: engine.EventDone, Stop: engine.StopCancelled, Stats: ev.Stats}
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				ch <- engine.Event{Kind: engine.EventDone, Stop: engine.StopCancelled}
				return
			}
		}
	}()
	return ch
}

func (s *fakeSession) Reset() {
	s.mu.Lock()
	s.resets++
	s.mu.Unlock()
}

func (s *fakeSession) lastReq() engine.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs[len(s.reqs)-1]
}

func text(s string) engine.Event  { return engine.Event{Kind: engine.EventText, Text: s} }
func think(s string) engine.Event { return engine.Event{Kind: engine.EventThinking, Text: s} }
func done(stop engine.StopReason) engine.Event {
	return engine.Event{Kind: engine.EventDone, Stop: stop}
}

// driver runs a model like Bubble Tea does, synchronously: commands run,
// their messages are fed back. A command still blocked after a short wait
// (an engine stream waiting for cancel) is kept pending for settle.
type driver struct {
	t       *testing.T
	m       *model
	eng     *fakeEngine
	sess    *fakeSession
	pending []chan tea.Msg
	quit    bool
	other   []tea.Msg // messages the model does not handle (OSC 52, ...)
}

func newDriver(t *testing.T, mut func(*Config)) *driver {
	t.Helper()
	eng, sess := newFakeEngine(), &fakeSession{}
	cfg := Config{Engine: eng, Session: sess, SessionDir: t.TempDir(), Width: 80, Height: 24}
	if mut != nil {
		mut(&cfg)
	}
	m := newModel(context.Background(), cfg)
	m.tick = func() tea.Cmd { return nil } // frames are driven by hand with tickMsg
	m.clip = func(string) (string, error) { return "fakeclip", nil }
	d := &driver{t: t, m: m, eng: eng, sess: sess}
	d.run(m.Init())
	return d
}

func (d *driver) send(msg tea.Msg) {
	_, cmd := d.m.Update(msg)
	d.run(cmd)
}

func (d *driver) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	ch := make(chan tea.Msg, 1)
	go func() { ch <- cmd() }()
	select {
	case msg := <-ch:
		d.handle(msg)
	case <-time.After(150 * time.Millisecond):
		d.pending = append(d.pending, ch)
	}
}

func (d *driver) handle(msg tea.Msg) {
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			d.run(c)
		}
	case tea.QuitMsg:
		d.quit = true
	case eventsMsg, tickMsg, reconfProgMsg, reconfDoneMsg, savedMsg, copiedMsg, startMsg, agentDoneMsg, tui.DecidedMsg,
		swapProgMsg, swapLoadedMsg, swapPrefilledMsg:
		d.send(msg)
	default:
		d.other = append(d.other, msg)
	}
}

// settle waits for the pending commands to finish.
func (d *driver) settle() {
	d.t.Helper()
	for len(d.pending) > 0 {
		ch := d.pending[0]
		d.pending = d.pending[1:]
		select {
		case msg := <-ch:
			d.handle(msg)
		case <-time.After(5 * time.Second):
			d.t.Fatal("a command did not finish within 5s")
		}
	}
}

func (d *driver) typeText(s string) {
	for _, r := range s {
		if r == '\n' {
			d.key(tea.KeyPressMsg{Code: 'j', Mod: tea.ModCtrl})
			continue
		}
		d.key(tea.KeyPressMsg{Code: r, Text: string(r)})
	}
}

func (d *driver) key(k tea.KeyPressMsg) { d.send(k) }

func (d *driver) enter() { d.key(tea.KeyPressMsg{Code: tea.KeyEnter}) }

func (d *driver) submit(s string) { d.typeText(s); d.enter() }

func (d *driver) frame() string {
	s, _ := d.m.frame()
	return stripFrame(s)
}

// lastEntry returns the plain text of the last chat entry.
func (d *driver) lastEntry() *entry {
	if len(d.m.entries) == 0 {
		d.t.Fatal("no entries")
	}
	return d.m.entries[len(d.m.entries)-1]
}

var (
	keyCtrlC = tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	keyCtrlD = tea.KeyPressMsg{Code: 'd', Mod: tea.ModCtrl}
	keyCtrlT = tea.KeyPressMsg{Code: 't', Mod: tea.ModCtrl}
	keyEsc   = tea.KeyPressMsg{Code: tea.KeyEscape}
	keyTab   = tea.KeyPressMsg{Code: tea.KeyTab}
	keyUp    = tea.KeyPressMsg{Code: tea.KeyUp}
	keyDown  = tea.KeyPressMsg{Code: tea.KeyDown}
	keyPgUp  = tea.KeyPressMsg{Code: tea.KeyPgUp}
	keyPgDn  = tea.KeyPressMsg{Code: tea.KeyPgDown}
	keyHome  = tea.KeyPressMsg{Code: tea.KeyHome}
	keyEnd   = tea.KeyPressMsg{Code: tea.KeyEnd}
)
