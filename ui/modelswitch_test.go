package ui

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine"
)

// fakeModels is a ModelSource over fake engines: Load makes a fakeEngine
// named after the file, with a session that records its Prefill.
type fakeModels struct {
	mu     sync.Mutex
	list   []ModelChoice
	loads  []string
	used   []*LoadedModel
	closed []string

	loadErr      error
	loadHold     chan struct{} // Load waits half way for it (or a cancel)
	ignoreCancel bool          // …and finishes even when cancelled
	fitTokens    int           // the loaded engine's FitCheck limit (0: none)
	prefillHold  chan struct{} // Prefill waits for it (or a cancel)
	last         *prefillSession
}

var cacheDate = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func newFakeModels() *fakeModels {
	return &fakeModels{list: []ModelChoice{
		{Name: "SmolLM2-135M-Instruct.Q4_1.gguf", Path: "/cache/SmolLM2-135M-Instruct.Q4_1.gguf", Size: 98362432, ModTime: cacheDate, Current: true},
		{Name: "tiny_qwen35.gguf", Path: "/cache/tiny_qwen35.gguf", Size: 99584, ModTime: cacheDate},
		{Name: "tiny_qwen35moe.gguf", Path: "/cache/tiny_qwen35moe.gguf", Size: 146592, ModTime: cacheDate},
	}}
}

func (f *fakeModels) Models() ([]ModelChoice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ModelChoice(nil), f.list...), nil
}

func (f *fakeModels) Load(ctx context.Context, path string, progress func(engine.LoadProgress)) (*LoadedModel, error) {
	f.mu.Lock()
	f.loads = append(f.loads, path)
	hold, err := f.loadHold, f.loadErr
	f.mu.Unlock()
	progress(engine.LoadProgress{Stage: "reading " + path, Done: 0, Total: 100 << 10})
	progress(engine.LoadProgress{Stage: "reading " + path, Done: 50 << 10, Total: 100 << 10})
	if hold != nil {
		if f.ignoreCancel {
			<-hold
		} else {
			select {
			case <-hold:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")
	eng := newFakeEngine()
	eng.stats.Model, eng.stats.TokensUsed, eng.fitTokens = name, 0, f.fitTokens
	sess := &prefillSession{eng: eng, hold: f.prefillHold}
	f.mu.Lock()
	f.last = sess
	f.mu.Unlock()
	return &LoadedModel{Engine: eng, Session: sess, Info: "fake " + name, Path: path, Close: func() {
		f.mu.Lock()
		f.closed = append(f.closed, name)
		f.mu.Unlock()
	}}, nil
}

func (f *fakeModels) Use(lm *LoadedModel) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.used = append(f.used, lm)
	for i := range f.list {
		f.list[i].Current = f.list[i].Path == lm.Path
	}
}

// prefillSession is a fakeSession with Prefill: a word is a token.
type prefillSession struct {
	fakeSession
	eng      *fakeEngine
	hold     chan struct{}
	prefills []engine.Request
}

func (s *prefillSession) Prefill(ctx context.Context, req engine.Request, progress func(done, total int)) error {
	n := 0
	for _, m := range req.Messages {
		n += len(strings.Fields(m.Content))
	}
	s.mu.Lock()
	s.prefills = append(s.prefills, req)
	s.mu.Unlock()
	progress(0, n)
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	progress(n, n)
	s.eng.mu.Lock()
	s.eng.stats.TokensUsed = n
	s.eng.mu.Unlock()
	return nil
}

func newModelsDriver(t *testing.T, fm *fakeModels, w, h int) *driver {
	d := newDriver(t, func(c *Config) { c.Models, c.Width, c.Height = fm, w, h })
	d.sess.push(text("Use `for`: it is Go's only loop."), done(engine.StopEOS))
	d.submit("How do I loop in Go?")
	d.settle()
	return d
}

// Issue 15 item 17: /model NAME loads the model, the chat continues on it
// with the same transcript (prefilled into the new model's cache), the
// earlier answer keeps its model's name, and the old model is freed.
func TestModelSwitchKeepsTheConversation(t *testing.T) {
	fm := newFakeModels()
	d := newModelsDriver(t, fm, 80, 24)
	d.submit("/model tiny_qwen35.gguf")
	d.settle()
	if len(fm.loads) != 1 || fm.loads[0] != "/cache/tiny_qwen35.gguf" {
		t.Fatalf("loads = %v", fm.loads)
	}
	if len(fm.used) != 1 || d.m.eng != fm.used[0].Engine || d.m.sess != fm.used[0].Session || d.m.swap != nil {
		t.Fatalf("the chat is not on the new model (used %d, swap %+v)", len(fm.used), d.m.swap)
	}
	ps := fm.last
	if len(ps.prefills) != 1 || len(ps.prefills[0].Messages) != 2 || ps.prefills[0].Messages[1].Content != "Use `for`: it is Go's only loop." {
		t.Fatalf("prefill requests = %+v, want the conversation", ps.prefills)
	}
	f := d.frame()
	for _, want := range []string{"◆ SmolLM2-135M-Instruct", "now on tiny_qwen35 (was SmolLM2-135M-Instruct)", "tiny_qwen35 holds the conversation: 13 tokens"} {
		if !strings.Contains(f, want) {
			t.Errorf("frame lacks %q:\n%s", want, f)
		}
	}
	ps.push(text("Or `for cond {}`."), done(engine.StopEOS))
	d.submit("And a while loop?")
	d.settle()
	if len(d.sess.reqs) != 1 {
		t.Errorf("the old session got %d requests, want only the first turn", len(d.sess.reqs))
	}
	if len(ps.reqs) != 1 || len(ps.reqs[0].Messages) != 3 {
		t.Fatalf("the new session's requests = %+v, want the whole conversation", ps.reqs)
	}
	checkGolden(t, "model_switched_80x24", d.frame())
	if got := d.m.sessionFile().Model; got != "tiny_qwen35" {
		t.Errorf("the session file names %q", got)
	}
}

// A message typed while the model loads is queued and sent to the new one.
func TestModelSwitchQueuesTypedMessage(t *testing.T) {
	fm := newFakeModels()
	fm.loadHold = make(chan struct{})
	d := newModelsDriver(t, fm, 80, 24)
	d.submit("/model 2")
	d.submit("typed while loading")
	if d.m.queued != "typed while loading" || len(d.sess.reqs) != 1 {
		t.Fatalf("queued %q, old session requests %d", d.m.queued, len(d.sess.reqs))
	}
	close(fm.loadHold)
	d.settle()
	if ps := fm.last; ps == nil || len(ps.reqs) != 1 || ps.reqs[0].Messages[2].Content != "typed while loading" {
		t.Fatalf("the queued message did not reach the new model")
	}
}

func TestModelSwitchEscKeepsTheOldModel(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		fm := newFakeModels()
		fm.loadHold, fm.ignoreCancel = make(chan struct{}), ignore
		d := newModelsDriver(t, fm, 80, 24)
		d.submit("/model tiny_qwen35moe")
		d.key(keyEsc)
		if ignore {
			close(fm.loadHold) // the load finishes after Esc: it is freed
		}
		d.settle()
		if d.m.eng != Engine(d.eng) || d.m.swap != nil || len(fm.used) != 0 {
			t.Fatalf("ignoreCancel %v: not on the old model after Esc", ignore)
		}
		if ignore && (len(fm.closed) != 1 || fm.closed[0] != "tiny_qwen35moe") {
			t.Errorf("the model loaded after Esc was not freed: closed %v", fm.closed)
		}
		if got := d.lastEntry().text; got != "/model tiny_qwen35moe cancelled; still on SmolLM2-135M-Instruct" {
			t.Errorf("ignoreCancel %v: last entry %q", ignore, got)
		}
	}
}

func TestModelSwitchFailuresKeepTheOldModel(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*fakeModels)
		arg  string
		want string
	}{
		{"load error", func(f *fakeModels) { f.loadErr = errors.New(`unsupported architecture "mamba"`) }, "tiny_qwen35",
			`/model tiny_qwen35 failed, still on SmolLM2-135M-Instruct: unsupported architecture "mamba"`},
		{"does not fit", func(f *fakeModels) { f.fitTokens = 4 }, "tiny_qwen35",
			"/model tiny_qwen35 failed, still on SmolLM2-135M-Instruct: the conversation does not fit it: "},
		{"ambiguous", nil, "tiny", `/model: "tiny" matches tiny_qwen35.gguf, tiny_qwen35moe.gguf: give more of the name`},
		{"number out of range", nil, "7", "/model: no model number 7: /model lists 3"},
		{"in use", nil, "smollm2", "/model: SmolLM2-135M-Instruct.Q4_1.gguf is the model in use"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fm := newFakeModels()
			if tc.mut != nil {
				tc.mut(fm)
			}
			d := newModelsDriver(t, fm, 80, 24)
			d.run(d.m.command("/model " + tc.arg)) // as typed, not a menu row
			d.settle()
			if d.m.eng != Engine(d.eng) || d.m.swap != nil || len(fm.used) != 0 {
				t.Fatal("not on the old model")
			}
			if len(fm.loads) != len(fm.closed) && tc.name != "load error" {
				t.Errorf("loaded %v, freed %v", fm.loads, fm.closed)
			}
			if got := d.lastEntry().text; !strings.HasPrefix(got, tc.want) {
				t.Errorf("last entry %q, want %q…", got, tc.want)
			}
		})
	}
}

// Esc while the new model prefills the conversation keeps the new model;
// the next message prefills the rest.
func TestModelSwitchEscDuringPrefill(t *testing.T) {
	fm := newFakeModels()
	fm.prefillHold = make(chan struct{})
	d := newModelsDriver(t, fm, 80, 24)
	d.submit("/model tiny_qwen35")
	deadline := time.Now().Add(5 * time.Second)
	for (d.m.swap == nil || !d.m.swap.prefill) && time.Now().Before(deadline) {
		d.step()
	}
	if d.m.swap == nil || !d.m.swap.prefill {
		t.Fatal("the prefill did not start")
	}
	if f := d.frame(); !strings.Contains(f, "tiny_qwen35: prefill") || !strings.Contains(f, "esc stops") {
		t.Errorf("no prefill progress:\n%s", f)
	}
	d.key(keyEsc)
	d.settle()
	if d.m.swap != nil || len(fm.used) != 1 || d.m.eng != fm.used[0].Engine {
		t.Fatal("Esc during the prefill did not keep the new model")
	}
	if got := d.lastEntry().text; !strings.HasPrefix(got, "prefill stopped at 0 of 13 tokens") {
		t.Errorf("last entry %q", got)
	}
}

// step handles one pending command's message, waiting for it.
func (d *driver) step() {
	if len(d.pending) == 0 {
		time.Sleep(10 * time.Millisecond)
		return
	}
	ch := d.pending[0]
	d.pending = d.pending[1:]
	select {
	case msg := <-ch:
		d.handle(msg)
	case <-time.After(5 * time.Second):
		d.t.Fatal("a command did not finish within 5s")
	}
}

func TestGoldenModelScreens(t *testing.T) {
	tests := []struct {
		name string
		mut  func(d *driver, fm *fakeModels)
	}{
		{"model_list_80x24", func(d *driver, fm *fakeModels) { d.submit("/model") }},
		{"model_menu_80x24", func(d *driver, fm *fakeModels) { d.typeText("/model tiny") }},
		{"model_loading_80x24", func(d *driver, fm *fakeModels) {
			fm.loadHold = make(chan struct{})
			d.submit("/model tiny_qwen35moe")
			for d.m.swap.done < 50<<10 {
				d.step() // up to the progress at half
			}
			t.Cleanup(func() { close(fm.loadHold) })
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fm := newFakeModels()
			d := newModelsDriver(t, fm, 80, 24)
			tc.mut(d, fm)
			checkGolden(t, tc.name, d.frame())
		})
	}
}

// The menu lists the cached models after "/model "; Enter on one switches.
func TestModelMenuSwitches(t *testing.T) {
	fm := newFakeModels()
	d := newModelsDriver(t, fm, 80, 24)
	d.typeText("/model ")
	items := d.m.menuItems()
	if len(items) != 3 || items[1].name != "/model tiny_qwen35" || !strings.Contains(items[0].help, "in use") {
		t.Fatalf("menu = %+v", items)
	}
	d.key(keyDown)
	d.key(keyDown)
	d.enter()
	d.settle()
	if len(fm.loads) != 1 || fm.loads[0] != "/cache/tiny_qwen35moe.gguf" {
		t.Fatalf("loads = %v", fm.loads)
	}
	d.typeText("/model tiny_qwen35m")
	d.key(keyTab)
	if got := d.m.input.Value(); got != "/model tiny_qwen35moe " {
		t.Errorf("Tab completed to %q", got)
	}
}

func TestMatchModel(t *testing.T) {
	list := newFakeModels().list
	tests := []struct {
		arg, want string
		ok        bool
		err       string
	}{
		{"1", "SmolLM2-135M-Instruct.Q4_1.gguf", true, ""},
		{"3", "tiny_qwen35moe.gguf", true, ""},
		{"0", "", false, "no model number 0"},
		{"tiny_qwen35", "tiny_qwen35.gguf", true, ""}, // exact beats prefix
		{"TINY_QWEN35.GGUF", "tiny_qwen35.gguf", true, ""},
		{"smol", "SmolLM2-135M-Instruct.Q4_1.gguf", true, ""},
		{"moe", "tiny_qwen35moe.gguf", true, ""},
		{"qwen", "", false, "matches"},
		{"/models/other.gguf", "", false, ""},
	}
	for _, tc := range tests {
		got, ok, err := matchModel(list, tc.arg)
		if ok != tc.ok || got.Name != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("matchModel(%q) = %q, %v, %v", tc.arg, got.Name, ok, err)
		}
	}
}

// Without a ModelSource (a remote engine) /model NAME says how to switch.
func TestModelWithoutSource(t *testing.T) {
	d := newDriver(t, nil)
	d.submit("/model tiny")
	if got := d.lastEntry().text; got != "/model: switching models needs a restart: ftchat --model tiny" {
		t.Errorf("last entry %q", got)
	}
}

// CacheModels on a real cache directory and real engines: it lists the
// GGUF files (a symlinked one by its target's size), marks the model in
// use, loads another with the chat's options and frees the old one.
func TestCacheModels(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FTCHAT_CACHE_DIR", dir)
	src := filepath.Join("..", "engine", "model", "testdata")
	for _, name := range []string{"tiny_qwen35.gguf", "tiny_qwen35moe.gguf"} {
		abs, err := filepath.Abs(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	opts := engine.Options{Device: "cpu", KVTokens: 2048}
	o := opts
	o.Model = filepath.Join(dir, "tiny_qwen35.gguf")
	eng, err := engine.Load(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCacheModels(opts, eng, eng.NewSession(), nil)
	defer c.Close()
	list, err := c.Models()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || !list[0].Current || list[1].Current || list[1].Size != 146592 {
		t.Fatalf("Models() = %+v", list)
	}
	var stages []string
	lm, err := c.Load(context.Background(), list[1].Path, func(p engine.LoadProgress) { stages = append(stages, p.Stage) })
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) == 0 || !strings.Contains(lm.Info, "tiny_qwen35moe.gguf") || lm.Engine.Stats().TokensCapacity != 2048 {
		t.Errorf("stages %v, info %q, capacity %d", stages, lm.Info, lm.Engine.Stats().TokensCapacity)
	}
	if _, ok := lm.Session.(prefiller); !ok {
		t.Error("the engine session has no Prefill")
	}
	c.Use(lm)
	if list, _ = c.Models(); !list[1].Current || list[0].Current {
		t.Errorf("after Use: %+v", list)
	}
	// A /kvdtype choice carries over to the next model; without one the
	// chat's option (bf16 here) does.
	if err := lm.Engine.SwitchKV(context.Background(), "fp8_e4m3", func(int, int) {}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fp8_e4m3", "fp8_e4m3"} {
		next, err := c.Load(context.Background(), list[0].Path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := next.Engine.Stats().KVDType; got != want {
			t.Errorf("the model loaded after /kvdtype fp8_e4m3 has a %s cache, want %s", got, want)
		}
		c.Use(next)
	}
	if err := c.cur.Engine.SwitchKV(context.Background(), "bf16", func(int, int) {}); err != nil {
		t.Fatal(err)
	}
	next, err := c.Load(context.Background(), list[1].Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Engine.Stats().KVDType; got != "bf16" {
		t.Errorf("after /kvdtype bf16 the next model has a %s cache", got)
	}
	next.Close()
	if _, err := c.Load(context.Background(), "no-such-model", nil); err == nil || !strings.Contains(err.Error(), "no-such-model") {
		t.Errorf("Load of a missing model: %v", err)
	}
}

// A message refused for the old model's full pool is sent whole to the new
// model: the offer to drop turns was for the old pool.
func TestModelSwitchForgetsTheDropOffer(t *testing.T) {
	fm := newFakeModels()
	d := newModelsDriver(t, fm, 80, 24)
	d.eng.fitTokens = 14 // the conversation holds 13 words
	d.submit("one two three")
	if d.m.drop == nil || len(d.sess.reqs) != 1 {
		t.Fatalf("no drop offer (requests %d)", len(d.sess.reqs))
	}
	d.m.input.Reset()
	d.submit("/model tiny_qwen35")
	d.settle()
	fm.last.push(text("ok"), done(engine.StopEOS))
	d.submit("one two three")
	d.settle()
	if ps := fm.last; len(ps.reqs) != 1 || len(ps.reqs[0].Messages) != 3 {
		t.Fatalf("the new model got %+v, want the whole conversation and the message", ps.reqs)
	}
}
