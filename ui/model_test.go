package ui

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/engine"
)

func TestSendStreamsAndSaves(t *testing.T) {
	d := newDriver(t, nil)
	st := d.eng.Stats()
	st.TokensUsed, st.DecodeTokensPerS = 17000, 99.5
	d.sess.push(
		engine.Event{Kind: engine.EventProgress, Done: 5, Total: 10},
		think("first I consider "), think("the question"),
		text("Hello, "), text("**world**"),
		engine.Event{Kind: engine.EventStats, Stats: st},
		text("!\n"),
		engine.Event{Kind: engine.EventDone, Stop: engine.StopEOS, Stats: st},
	)
	d.submit("hi there")
	d.settle()

	req := d.sess.lastReq()
	if len(req.Messages) != 1 || req.Messages[0].Role != "user" || req.Messages[0].Content != "hi there" {
		t.Fatalf("request messages = %+v", req.Messages)
	}
	if d.m.gen != nil {
		t.Fatal("generation still marked running after EventDone")
	}
	if got := d.m.msgs; len(got) != 2 || got[1].Content != "Hello, **world**!\n" {
		t.Fatalf("conversation = %+v", got)
	}
	if d.m.stats.TokensUsed != 17000 || d.m.stats.DecodeTokensPerS != 99.5 {
		t.Errorf("status stats not taken from the engine: %+v", d.m.stats)
	}
	f := d.frame()
	for _, want := range []string{"hi there", "Hello, world!", "thinking (5 words)", "17,000 / 65,536 tok", "decode 99.5 tok/s"} {
		if !strings.Contains(f, want) {
			t.Errorf("frame lacks %q:\n%s", want, f)
		}
	}
	if strings.Contains(f, "the question") {
		t.Error("thinking text shown while collapsed")
	}
	// autosave after the turn
	names, err := d.m.store.List()
	if err != nil || len(names) != 1 {
		t.Fatalf("saved sessions = %v, %v", names, err)
	}
	sf, err := d.m.store.Load(names[0])
	if err != nil || len(sf.Messages) != 2 {
		t.Fatalf("saved session = %+v, %v", sf, err)
	}
}

// Streaming: text shows up only at frame ticks, not per token.
func TestStreamingRendersOnTick(t *testing.T) {
	d := newDriver(t, nil)
	d.sess.push(text("alpha "), text("beta"), engine.Event{Kind: waitCancel})
	d.submit("go")
	if d.m.ticksSched != 1 || !d.m.ticking {
		t.Fatalf("a frame tick should be scheduled while streaming (scheduled %d)", d.m.ticksSched)
	}
	if strings.Contains(d.frame(), "alpha") {
		t.Fatal("text rendered before a frame tick")
	}
	d.send(tickMsg{})
	if f := d.frame(); !strings.Contains(f, "alpha beta") || !strings.Contains(f, "answering") {
		t.Fatalf("after a tick the streamed text should show:\n%s", f)
	}
	if d.m.ticksSched != 2 {
		t.Fatalf("tick should re-arm while streaming, scheduled %d", d.m.ticksSched)
	}
	d.key(keyEsc)
	d.settle()
}

func TestCancel(t *testing.T) {
	for _, k := range []struct {
		name string
		key  tea.KeyPressMsg
	}{{"esc", keyEsc}, {"ctrl+c", keyCtrlC}} {
		t.Run(k.name, func(t *testing.T) {
			d := newDriver(t, nil)
			d.sess.push(text("partial answer"), engine.Event{Kind: waitCancel})
			d.submit("tell me a story")
			if d.m.gen == nil {
				t.Fatal("not generating")
			}
			d.key(k.key)
			d.settle()
			if d.m.gen != nil {
				t.Fatal("still generating after cancel")
			}
			if d.quit {
				t.Fatal("cancel quit the program")
			}
			if n := d.lastEntry().note; n != "stopped" {
				t.Errorf("note = %q, want stopped", n)
			}
			if d.m.notice != "stopped" {
				t.Errorf("notice = %q", d.m.notice)
			}
			if got := d.m.msgs; len(got) != 2 || got[1].Content != "partial answer" {
				t.Errorf("partial answer should stay in the conversation: %+v", got)
			}
			if !strings.Contains(d.frame(), "stopped") {
				t.Error("frame does not say stopped")
			}
		})
	}
}

// A cancel before any text takes the unanswered question out of the
// conversation so two user turns never follow each other.
func TestCancelBeforeAnswer(t *testing.T) {
	d := newDriver(t, nil)
	d.sess.push(engine.Event{Kind: waitCancel})
	d.submit("q1")
	d.key(keyEsc)
	d.settle()
	if len(d.m.msgs) != 0 {
		t.Fatalf("conversation = %+v, want empty", d.m.msgs)
	}
	d.sess.push(text("a2"), done(engine.StopEOS))
	d.submit("q2")
	d.settle()
	if r := d.sess.lastReq(); len(r.Messages) != 1 || r.Messages[0].Content != "q2" {
		t.Fatalf("second request = %+v", r.Messages)
	}
}

func TestThinkingToggle(t *testing.T) {
	d := newDriver(t, nil)
	d.sess.push(think("secret reasoning here"), text("answer"), done(engine.StopEOS))
	d.submit("q")
	d.settle()
	if strings.Contains(d.frame(), "secret reasoning") {
		t.Fatal("thinking shown before toggle")
	}
	d.key(keyCtrlT)
	if f := d.frame(); !strings.Contains(f, "secret reasoning here") || !strings.Contains(f, "ctrl+t to hide") {
		t.Fatalf("thinking not shown after ctrl+t:\n%s", f)
	}
	d.key(keyCtrlT)
	if strings.Contains(d.frame(), "secret reasoning") {
		t.Fatal("thinking shown after second toggle")
	}
	if got := d.m.msgs[1].Content; got != "answer" {
		t.Errorf("thinking leaked into the conversation: %q", got)
	}
}

func TestPoolFullStop(t *testing.T) {
	d := newDriver(t, nil)
	st := d.eng.Stats()
	st.TokensUsed = st.TokensCapacity
	d.sess.push(text("long answer"), engine.Event{Kind: engine.EventDone, Stop: engine.StopPoolFull, Stats: st})
	d.submit("q")
	d.settle()
	want := "the KV pool is full (65,536 / 65,536 tokens)"
	if n := d.lastEntry().note; !strings.Contains(n, want) {
		t.Fatalf("note = %q, want %q", n, want)
	}
	if !strings.Contains(d.frame(), "65,536 / 65,536 tok") {
		t.Error("status pane does not show the full pool")
	}
}

func TestEngineError(t *testing.T) {
	d := newDriver(t, nil)
	d.sess.push(engine.Event{Kind: engine.EventError, Err: errors.New("cuda: out of memory")})
	d.submit("q")
	d.settle()
	if d.m.gen != nil {
		t.Fatal("still generating")
	}
	found := false
	for _, e := range d.m.entries {
		if e.kind == entryError && strings.Contains(e.text, "cuda: out of memory") {
			found = true
		}
	}
	if !found {
		t.Fatal("engine error not shown")
	}
	if len(d.m.msgs) != 0 {
		t.Errorf("failed turn left in the conversation: %+v", d.m.msgs)
	}
}

func TestPipedContext(t *testing.T) {
	piped := "package main\n\nfunc main() {}\n"
	d := newDriver(t, func(c *Config) { c.Piped = piped })
	d.sess.push(text("looks fine"), done(engine.StopEOS))
	d.submit("review this")
	d.settle()
	first := d.sess.lastReq().Messages[0].Content
	if !strings.HasPrefix(first, "review this\n\nContext (piped from stdin):\n```\n") || !strings.Contains(first, "func main() {}\n```") {
		t.Fatalf("piped context not attached as a fenced block:\n%s", first)
	}
	if !strings.Contains(d.frame(), "stdin context: 5 tokens") {
		t.Errorf("frame does not mention the attached context:\n%s", d.frame())
	}
	d.sess.push(text("ok"), done(engine.StopEOS))
	d.submit("and now?")
	d.settle()
	msgs := d.sess.lastReq().Messages
	if got := msgs[len(msgs)-1].Content; got != "and now?" {
		t.Errorf("context attached twice: %q", got)
	}
}

func TestSplitContext(t *testing.T) {
	for _, from := range []string{"", "main.go", "stdin, a.go, b (1).go"} {
		for _, ctx := range []string{"one line", "a\nb\nc\n", "has ``` fences\ninside"} {
			p, n, ok := splitContext(attachContext("the prompt", ctx, from))
			want := strings.Count(strings.TrimRight(ctx, "\n"), "\n") + 1
			if !ok || p != "the prompt" || n != want {
				t.Errorf("splitContext(attach(%q, from %q)) = %q, %d, %v; want %d lines", ctx, from, p, n, ok, want)
			}
		}
	}
	if got := attachContext("q", "x", "main.go"); got != "q\n\nContext (from main.go):\n```\nx\n```" {
		t.Errorf("attachContext from a file = %q", got)
	}
	if p, _, ok := splitContext("plain"); ok || p != "plain" {
		t.Error("plain message split")
	}
}

func TestPipedContextTooBig(t *testing.T) {
	piped := strings.Repeat("word ", 70000)
	d := newDriver(t, func(c *Config) { c.Piped = piped })
	d.submit("summarize")
	if len(d.sess.reqs) != 0 {
		t.Fatal("a request that cannot fit was sent")
	}
	e := d.lastEntry()
	if e.kind != entryError || !strings.Contains(e.text, "70,000 tokens") || !strings.Contains(e.text, "the KV pool holds 65536") {
		t.Fatalf("refusal should give the token counts: %+v", e)
	}
	if d.m.input.Value() != "summarize" {
		t.Errorf("the prompt should go back to the input, got %q", d.m.input.Value())
	}
	// /clear drops the piped input; the prompt then goes alone.
	d.m.input.Reset()
	d.submit("/clear")
	d.sess.push(text("ok"), done(engine.StopEOS))
	d.submit("summarize")
	d.settle()
	if len(d.sess.reqs) != 1 || d.sess.lastReq().Messages[0].Content != "summarize" {
		t.Fatalf("after /clear: %+v", d.sess.reqs)
	}
}

func TestHistory(t *testing.T) {
	d := newDriver(t, nil)
	for _, q := range []string{"one", "two\nlines"} {
		d.sess.push(text("a"), done(engine.StopEOS))
		d.submit(q)
		d.settle()
	}
	d.typeText("draft")
	steps := []struct {
		key  tea.KeyPressMsg
		want string
	}{
		{keyUp, "two\nlines"}, // cursor lands on the first line
		{keyUp, "one"},
		{keyUp, "one"}, // oldest: stays
		{keyDown, "two\nlines"},
		{keyDown, "draft"},
	}
	for i, s := range steps {
		d.key(s.key)
		if got := d.m.input.Value(); got != s.want {
			t.Fatalf("step %d (%s): input = %q, want %q", i, s.key.Keystroke(), got, s.want)
		}
	}
}

func TestNewlineKeys(t *testing.T) {
	for _, k := range []tea.KeyPressMsg{
		{Code: 'j', Mod: tea.ModCtrl},
		{Code: tea.KeyEnter, Mod: tea.ModShift},
	} {
		d := newDriver(t, nil)
		d.typeText("a")
		d.key(k)
		d.typeText("b")
		if got := d.m.input.Value(); got != "a\nb" {
			t.Errorf("%s: input = %q", k.Keystroke(), got)
		}
		if len(d.sess.reqs) != 0 {
			t.Errorf("%s sent the message", k.Keystroke())
		}
	}
}

func TestLongInputAndPaste(t *testing.T) {
	d := newDriver(t, nil)
	long := strings.Repeat("x", 5000) + "\n" + strings.Repeat("line\n", 200) + "end"
	d.send(tea.PasteMsg{Content: long})
	if got := d.m.input.Value(); got != long {
		t.Fatalf("paste truncated: %d of %d chars", len(got), len(long))
	}
	d.sess.push(text("ok"), done(engine.StopEOS))
	d.enter()
	d.settle()
	if got := d.sess.lastReq().Messages[0].Content; got != long {
		t.Fatalf("sent %d chars, want %d", len(got), len(long))
	}
}

// TestPastedTabsReachTheModel guards issue 15 item 6: the textarea turned
// pasted tabs into four spaces, so the model got different code than was
// pasted. Tabs are kept in what is sent, also after a history recall, and
// the input shows each one as an arrow.
func TestPastedTabsReachTheModel(t *testing.T) {
	const code = "fix this:\nfunc f() {\n\treturn\t1\n}"
	d := newDriver(t, nil)
	d.send(tea.PasteMsg{Content: code})
	if f := d.frame(); !strings.Contains(f, tabGlyph+"return"+tabGlyph+"1") {
		t.Errorf("input does not show the tabs as %s:\n%s", tabGlyph, f)
	}
	for i, recall := range []bool{false, true} {
		if recall {
			d.key(tea.KeyPressMsg{Code: tea.KeyUp})
		}
		d.sess.push(text("ok"), done(engine.StopEOS))
		d.enter()
		d.settle()
		if got := d.sess.lastReq().Messages[2*i].Content; got != code {
			t.Errorf("recall=%v: sent %q, want %q", recall, got, code)
		}
	}
}

func TestHugePasteRefused(t *testing.T) {
	d := newDriver(t, nil)
	d.typeText("keep")
	d.send(tea.PasteMsg{Content: strings.Repeat("l\n", 12000)})
	if d.m.input.Value() != "keep" || !strings.Contains(d.m.notice, "12,001 lines") {
		t.Fatalf("input %d chars, notice %q", len(d.m.input.Value()), d.m.notice)
	}
}

func TestQuitKeys(t *testing.T) {
	d := newDriver(t, nil)
	d.typeText("some text")
	d.key(keyCtrlC)
	if d.quit || d.m.input.Value() != "" {
		t.Fatalf("ctrl+c with text should clear it, quit=%v input=%q", d.quit, d.m.input.Value())
	}
	d.key(keyCtrlC)
	if d.quit || !strings.Contains(d.m.notice, "again") {
		t.Fatalf("first ctrl+c on empty input should warn; quit=%v notice=%q", d.quit, d.m.notice)
	}
	d.typeText("x") // any other key disarms
	d.key(keyCtrlC) // clears x
	d.key(keyCtrlC) // arms
	if d.quit {
		t.Fatal("quit without a second ctrl+c")
	}
	d.key(keyCtrlC)
	if !d.quit {
		t.Fatal("second ctrl+c on empty input did not quit")
	}

	d2 := newDriver(t, nil)
	d2.typeText("abc")
	d2.key(keyCtrlD)
	if !d2.quit {
		t.Fatal("ctrl+d did not quit")
	}
}

// While idle, nothing schedules frames: idle CPU stays near zero.
func TestIdleSchedulesNoTicks(t *testing.T) {
	d := newDriver(t, nil)
	if d.m.ticksSched != 0 || d.m.ticking {
		t.Fatal("a tick is scheduled at start")
	}
	d.sess.push(text("a"), done(engine.StopEOS))
	d.submit("q")
	d.settle()
	before := d.m.ticksSched
	if before == 0 {
		t.Fatal("no tick during generation")
	}
	// The tick armed during the generation fires after it ended: it must
	// not re-arm.
	_, cmd := d.m.Update(tickMsg{})
	if cmd != nil || d.m.ticking {
		t.Fatal("the frame clock kept running after the generation ended")
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"typing", func() { d.typeText("typing while idle") }},
		{"resize", func() { d.send(tea.WindowSizeMsg{Width: 100, Height: 30}) }},
		{"wheel", func() { d.send(tea.MouseWheelMsg{Button: tea.MouseWheelUp}) }},
		{"ctrl+t", func() { d.key(keyCtrlT) }},
		{"/stats", func() { d.m.input.Reset(); d.submit("/stats") }},
		{"frame", func() { d.frame() }},
	}
	for _, s := range steps {
		s.do()
		if d.m.ticksSched != before || d.m.ticking {
			t.Fatalf("idle %s scheduled a tick: %d -> %d", s.name, before, d.m.ticksSched)
		}
	}
	if d.m.input.Cursor() == nil {
		t.Error("the input should use the terminal cursor (no blink ticks)")
	}
}

func TestSlashCommands(t *testing.T) {
	tests := []struct {
		in      string
		isErr   bool
		want    string
		setup   func(d *driver)
		nothing bool // no entry expected
	}{
		{in: "/help", want: "/kvdtype <dtype>"},
		{in: "/frobnicate", isErr: true, want: "unknown command /frobnicate; /help lists the commands"},
		{in: "/kvdtype", isErr: true, want: "/kvdtype needs a dtype: fp8_e4m3, fp8_e5m2, bf16, fp16, auto (now bf16)"},
		{in: "/kvdtype int3", isErr: true, want: `unknown dtype "int3"`},
		{in: "/stats now", isErr: true, want: `/stats takes no arguments (got "now")`},
		{in: "/stats", want: "capacity ratio vs bf16"},
		{in: "/model", want: "SmolLM2-135M-Instruct"},
		{in: "/model qwen3", isErr: true, want: "restart: ftchat --model qwen3"},
		{in: "/system", want: "no system prompt set"},
		{in: "/system be brief", want: "system prompt set"},
		{in: "/load", isErr: true, want: "/load needs a session name; saved: none"},
		{in: "/load nope", isErr: true, want: `no session named "nope"`},
		{in: "/load ../etc/passwd", isErr: true, want: "bad session name"},
		{in: "/save a/b", isErr: true, want: "bad session name"},
		{in: "/save mine", want: `saved as "mine"`},
		{in: "/copy", isErr: true, want: "no answer to copy yet"},
		{in: "/clear extra", isErr: true, want: "/clear takes no arguments"},
		{in: "/clear", want: "conversation cleared"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			d := newDriver(t, nil)
			d.submit(tc.in)
			e := d.lastEntry()
			if (e.kind == entryError) != tc.isErr || !strings.Contains(e.text, tc.want) {
				t.Fatalf("%s: entry kind=%d text=%q; want error=%v containing %q", tc.in, e.kind, e.text, tc.isErr, tc.want)
			}
			if tc.isErr && strings.Count(strings.TrimSpace(e.text), "\n") > 0 {
				t.Errorf("error is not one line: %q", e.text)
			}
			if len(d.sess.reqs) != 0 {
				t.Error("a command was sent to the model")
			}
		})
	}
}

func TestSystemPromptSent(t *testing.T) {
	d := newDriver(t, nil)
	d.submit("/system answer in French")
	d.sess.push(text("bonjour"), done(engine.StopEOS))
	d.submit("hello")
	d.settle()
	m := d.sess.lastReq().Messages
	if len(m) != 2 || m[0].Role != "system" || m[0].Content != "answer in French" {
		t.Fatalf("messages = %+v", m)
	}
}

func TestClearResetsSession(t *testing.T) {
	d := newDriver(t, nil)
	d.sess.push(text("a"), done(engine.StopEOS))
	d.submit("q")
	d.settle()
	d.submit("/clear")
	if d.sess.resets != 1 || len(d.m.msgs) != 0 {
		t.Fatalf("resets=%d msgs=%v", d.sess.resets, d.m.msgs)
	}
	if strings.Contains(d.frame(), "▌ you") {
		t.Error("old conversation still shown")
	}
}

func TestKVDType(t *testing.T) {
	d := newDriver(t, nil)
	d.submit("/kvdtype fp8_e4m3")
	d.settle()
	if len(d.eng.reconfs) != 1 || d.eng.reconfs[0] != "fp8_e4m3" {
		t.Fatalf("Reconfigure calls = %v", d.eng.reconfs)
	}
	if d.m.reconf != nil {
		t.Fatal("still reconfiguring")
	}
	e := d.lastEntry()
	if e.kind != entryInfo || !strings.Contains(e.text, "capacity 65,536 → 131,072 tokens") {
		t.Fatalf("entry = %q", e.text)
	}
	f := d.frame()
	for _, want := range []string{"kv fp8_e4m3", "16,000 / 131,072 tok", "×1.88 of bf16"} {
		if !strings.Contains(f, want) {
			t.Errorf("status lacks %q:\n%s", want, f)
		}
	}
}

// A /kvdtype switch that grows the pool withdraws an offer to drop turns
// made for the old pool: the message that did not fit is then sent whole.
func TestKVDTypeForgetsTheDropOffer(t *testing.T) {
	d := newModelsDriver(t, newFakeModels(), 80, 24) // a conversation of 13 words
	d.eng.fitTokens = 14
	d.submit("one two three")
	if d.m.drop == nil {
		t.Fatal("no drop offer for a message over the pool")
	}
	d.m.input.Reset()
	d.submit("/kvdtype fp8_e4m3")
	d.settle()
	if d.m.drop != nil {
		t.Error("the drop offer for the old pool survived the switch")
	}
}

func TestKVDTypeRefused(t *testing.T) {
	d := newDriver(t, nil)
	d.eng.reconfErr = errors.New("the conversation needs 70,000 tokens, a fp16 pool holds 65,536")
	before := d.eng.Stats()
	d.submit("/kvdtype fp16")
	d.settle()
	e := d.lastEntry()
	if e.kind != entryError || e.text != "/kvdtype fp16 refused: the conversation needs 70,000 tokens, a fp16 pool holds 65,536; nothing changed" {
		t.Fatalf("entry = %+v", e)
	}
	if d.m.stats != before {
		t.Error("stats changed after a refusal")
	}
	// The engine's own message already names the command and says so.
	d.eng.reconfErr = errors.New("/kvdtype fp16: the conversation holds 9 tokens; nothing changed — /clear first")
	d.submit("/kvdtype fp16")
	d.settle()
	if e := d.lastEntry(); e.text != "/kvdtype fp16: the conversation holds 9 tokens; nothing changed — /clear first" {
		t.Errorf("entry = %q", e.text)
	}
}

func TestKVDTypeProgressShown(t *testing.T) {
	d := newDriver(t, nil)
	d.m.reconf = &reconfState{dtype: "fp8_e4m3"}
	d.send(reconfProgMsg{done: 500, total: 1000})
	if f := d.frame(); !strings.Contains(f, "500 / 1,000 tokens · esc cancels") {
		t.Fatalf("progress not shown:\n%s", f)
	}
	if pb := d.m.View().ProgressBar; pb == nil || pb.Value != 50 {
		t.Errorf("terminal progress bar = %+v, want 50%%", pb)
	}
}

// Issue 15 item 4: a message typed during a /kvdtype switch is queued and
// sent after it (it was cleared and lost); the progress counts the
// conversation's tokens from the start (it read 0 / 0).
func TestKVDTypeQueuesTypedMessage(t *testing.T) {
	d := newDriver(t, nil)
	d.eng.reconfHold = make(chan struct{})
	d.sess.push(text("hi there"), done(engine.StopEOS))
	d.submit("/kvdtype fp8_e4m3")
	if d.m.reconf == nil || d.m.reconf.total != 16000 {
		t.Fatalf("reconf = %+v, want the pool's 16,000 tokens as the total from the start", d.m.reconf)
	}
	if f := d.frame(); !strings.Contains(f, "/ 16,000 tokens") {
		t.Errorf("progress lacks the total:\n%s", f)
	}
	d.submit("hello during the switch")
	if len(d.sess.reqs) != 0 {
		t.Fatal("sent a message during the switch")
	}
	if d.m.input.Value() != "" || d.m.queued != "hello during the switch" {
		t.Fatalf("input %q, queued %q", d.m.input.Value(), d.m.queued)
	}
	if f := d.frame(); !strings.Contains(f, "queued") {
		t.Errorf("the frame does not say the message is queued:\n%s", f)
	}
	close(d.eng.reconfHold)
	d.settle()
	if len(d.sess.reqs) != 1 {
		t.Fatalf("the queued message was not sent after the switch (%d requests)", len(d.sess.reqs))
	}
	msgs := d.sess.lastReq().Messages
	if got := msgs[len(msgs)-1].Content; got != "hello during the switch" {
		t.Fatalf("sent %q", got)
	}
	if d.eng.Stats().KVDType != "fp8_e4m3" || d.m.queued != "" {
		t.Fatalf("after: dtype %s, queued %q", d.eng.Stats().KVDType, d.m.queued)
	}
}

// Issue 15 item 4: Esc cancels the switch; the engine keeps the old
// cache, and the chat says so.
func TestKVDTypeEscCancels(t *testing.T) {
	d := newDriver(t, nil)
	d.eng.reconfHold = make(chan struct{})
	d.submit("/kvdtype fp8_e4m3")
	d.key(keyEsc)
	if f := d.frame(); !strings.Contains(f, "cancelling, keeping the old cache") {
		t.Errorf("no cancelling notice:\n%s", f)
	}
	d.settle()
	if d.m.reconf != nil {
		t.Fatal("still switching after Esc")
	}
	e := d.lastEntry()
	if e.kind != entryInfo || e.text != "/kvdtype fp8_e4m3 cancelled; the KV cache is bf16 as before (16,000 tokens kept)" {
		t.Fatalf("entry = %+v", e)
	}
	if d.m.stats.KVDType != "bf16" {
		t.Errorf("stats dtype %s", d.m.stats.KVDType)
	}
}

func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	st := &Store{Dir: dir}
	for _, n := range []string{"alpha", "beta"} {
		if err := st.Save(&SessionFile{Name: n}, 0); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		in, want, notice string
	}{
		{"/kv", "/kvdtype ", ""},
		{"/s", "/system ", ""}, // the menu's first match
		{"/set te", "/set temperature", ""},
		{"/sy", "/system ", ""},
		{"/kvdtype fp8", "/kvdtype fp8_e", "fp8_e4m3  fp8_e5m2"},
		{"/kvdtype fp8_e4", "/kvdtype fp8_e4m3", ""},
		{"/load al", "/load alpha", ""},
		{"/zz", "/zz", "no completion for /zz"},
	}
	for _, tc := range tests {
		d := newDriver(t, func(c *Config) { c.SessionDir = dir })
		d.typeText(tc.in)
		d.key(keyTab)
		if got := d.m.input.Value(); got != tc.want {
			t.Errorf("%q + Tab = %q, want %q", tc.in, got, tc.want)
		}
		if tc.notice != "" && d.m.notice != tc.notice {
			t.Errorf("%q + Tab notice = %q, want %q", tc.in, d.m.notice, tc.notice)
		}
	}
}

func TestCopy(t *testing.T) {
	d := newDriver(t, nil)
	var copied string
	d.m.clip = func(s string) (string, error) { copied = s; return "xclip", nil }
	d.sess.push(text("the answer"), done(engine.StopEOS))
	d.submit("q")
	d.settle()
	d.submit("/copy")
	d.settle()
	if copied != "the answer" {
		t.Fatalf("native clipboard got %q", copied)
	}
	osc := false
	for _, m := range d.other {
		if fmt.Sprintf("%T", m) == "tea.setClipboardMsg" && fmt.Sprint(m) == "the answer" {
			osc = true
		}
	}
	if !osc {
		t.Errorf("no OSC 52 clipboard message; got %v", d.other)
	}
	if !strings.Contains(d.m.notice, "OSC 52 + xclip") {
		t.Errorf("notice = %q", d.m.notice)
	}
}

func TestScrolling(t *testing.T) {
	d := newDriver(t, nil)
	for i := 0; i < 40; i++ {
		d.m.addInfo(fmt.Sprintf("message number %02d", i))
	}
	if f := d.frame(); !strings.Contains(f, "message number 39") || strings.Contains(f, "message number 00") {
		t.Fatalf("should follow the bottom:\n%s", f)
	}
	d.key(keyPgUp)
	f := d.frame()
	if strings.Contains(f, "message number 39") || !d.m.follow == false {
		t.Fatalf("PgUp did not scroll up:\n%s", f)
	}
	if !strings.Contains(f, "scrolled") {
		t.Error("no scroll indicator")
	}
	d.key(keyHome)
	if f := d.frame(); !strings.Contains(f, "message number 00") {
		t.Fatalf("Home did not go to the top:\n%s", f)
	}
	d.m.addInfo("new while scrolled")
	if f := d.frame(); !strings.Contains(f, "new output below") {
		t.Error("no new-output hint while scrolled up")
	}
	d.send(tea.MouseWheelMsg{Button: tea.MouseWheelDown})
	if f := d.frame(); strings.Contains(f, "message number 00") {
		t.Fatalf("wheel down did not scroll:\n%s", f)
	}
	for i := 0; i < 20 && !d.m.follow; i++ {
		d.key(keyPgDn)
	}
	if !d.m.follow || !strings.Contains(d.frame(), "new while scrolled") {
		t.Fatal("PgDn to the end should follow the bottom again")
	}
	d.key(keyHome)
	d.key(keyEnd)
	if !d.m.follow {
		t.Fatal("End did not return to the bottom")
	}
	// With text in the input, Home/End edit it instead of scrolling.
	d.typeText("abc")
	d.key(keyHome)
	if !d.m.follow {
		t.Fatal("Home scrolled while editing")
	}
}

func TestContinueAndCorruptSession(t *testing.T) {
	dir := t.TempDir()
	st := &Store{Dir: dir}
	old := &SessionFile{Name: "old", Messages: []engine.Message{{Role: "user", Content: "earlier question"}, {Role: "assistant", Content: "earlier answer"}}}
	if err := st.Save(old, 0); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, func(c *Config) { c.SessionDir = dir; c.Continue = true })
	if !strings.Contains(d.frame(), "earlier answer") {
		t.Fatalf("--continue did not resume:\n%s", d.frame())
	}
	d.key(keyUp)
	if d.m.input.Value() != "earlier question" {
		t.Errorf("the resumed prompts are not in the input history: %q", d.m.input.Value())
	}
	d.m.input.Reset()
	d.sess.push(text("later answer"), done(engine.StopEOS))
	d.submit("later question")
	d.settle()
	if r := d.sess.lastReq(); len(r.Messages) != 3 || r.Messages[0].Content != "earlier question" {
		t.Fatalf("resumed request = %+v", r.Messages)
	}
	got, err := st.Load("old")
	if err != nil || len(got.Messages) != 4 {
		t.Fatalf("continued session not saved under its name: %+v %v", got, err)
	}

	bad := filepath.Join(dir, "broken.json")
	garbage := []byte(`{"version":1,"messages":[{"role":"us`)
	if err := os.WriteFile(bad, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	// Make it the newest regardless of the file system's time granularity.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(bad, future, future); err != nil {
		t.Fatal(err)
	}
	before := len(d.m.msgs)
	d.submit("/load broken")
	e := d.lastEntry()
	if e.kind != entryError || !strings.Contains(e.text, "broken.json is corrupt") || !strings.Contains(e.text, "left as it is") {
		t.Fatalf("corrupt load: %+v", e)
	}
	if data, err := os.ReadFile(bad); err != nil || string(data) != string(garbage) {
		t.Fatal("the corrupt file was changed or removed")
	}
	if len(d.m.msgs) != before {
		t.Fatal("a failed /load changed the conversation")
	}

	// --continue with the newest file corrupt: one message, fresh session.
	d2 := newDriver(t, func(c *Config) { c.SessionDir = dir; c.Continue = true })
	if e := d2.lastEntry(); e.kind != entryError || !strings.Contains(e.text, "--continue: session file") {
		t.Fatalf("corrupt --continue: %+v", e)
	}
	if d2.m.sessName == "broken" {
		t.Fatal("a new session would overwrite the corrupt file")
	}
}

func TestInitialPrompt(t *testing.T) {
	eng, sess := newFakeEngine(), &fakeSession{}
	sess.push(text("hi"), done(engine.StopEOS))
	d := &driver{t: t, eng: eng, sess: sess}
	d.m = newModel(t.Context(), Config{Engine: eng, Session: sess, SessionDir: t.TempDir(), InitialPrompt: "review this", Width: 80, Height: 24})
	d.m.tick = func() tea.Cmd { return nil }
	d.run(d.m.Init())
	d.settle()
	if len(sess.reqs) != 1 || sess.reqs[0].Messages[0].Content != "review this" {
		t.Fatalf("initial prompt not sent: %+v", sess.reqs)
	}
}

// The first frame is drawn before the terminal reports its size; with
// entries already present (piped input, --continue) it must render.
func TestFirstFrameBeforeSize(t *testing.T) {
	eng, sess := newFakeEngine(), &fakeSession{}
	m := newModel(t.Context(), Config{Engine: eng, Session: sess, SessionDir: t.TempDir(), Piped: "some context"})
	if f := stripFrame(m.View().Content); !strings.Contains(f, "stdin: 1 line (2 tokens)") || strings.Count(f, "\n") != 23 {
		t.Fatalf("first frame (80x24 by default):\n%s", f)
	}
}

func TestSmallAndLargeTerminals(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {5, 2}, {10, 3}, {15, 6}, {20, 8}, {300, 100}} {
		d := goldenConversation(t, sz[0], sz[1])
		d.key(keyCtrlT)
		d.key(keyPgUp)
		f := d.frame()
		if n := strings.Count(f, "\n") + 1; n > max(sz[1], 2) {
			t.Errorf("%dx%d: frame has %d lines", sz[0], sz[1], n)
		}
	}
}

// Random input never panics and leaves the model consistent.
func TestRandomInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	d := newDriver(t, nil)
	keys := []tea.KeyPressMsg{keyUp, keyDown, keyPgUp, keyPgDn, keyHome, keyEnd, keyTab, keyCtrlT, keyEsc,
		{Code: tea.KeyBackspace}, {Code: 'j', Mod: tea.ModCtrl}, {Code: tea.KeyLeft}, {Code: 'x', Text: "x"}, {Code: '/', Text: "/"}}
	lines := []string{"/kvdtype fp8_e4m3", "/kvdtype", "/clear", "/help", "/stats", "/load x", "/system s", "hello", "/copy", "/save n"}
	for i := 0; i < 400; i++ {
		switch r := rng.IntN(10); {
		case r < 6:
			d.key(keys[rng.IntN(len(keys))])
		case r < 8:
			d.m.input.Reset()
			if rng.IntN(2) == 0 {
				d.sess.push(think("t"), text("a\n\n```\nb"), text("\n```\n"), done(engine.StopEOS))
			}
			d.submit(lines[rng.IntN(len(lines))])
		case r < 9:
			d.send(tea.WindowSizeMsg{Width: 1 + rng.IntN(150), Height: 1 + rng.IntN(50)})
		default:
			d.send(tickMsg{})
		}
		d.frame()
		if d.m.gen != nil && rng.IntN(3) == 0 {
			d.key(keyEsc)
			d.settle()
		}
	}
	d.key(keyEsc)
	d.settle()
	for i, m := range d.m.msgs {
		if want := []string{"user", "assistant"}[i%2]; m.Role != want {
			t.Fatalf("conversation order broken at %d: %+v", i, d.m.msgs)
		}
	}
}

// Quitting during an answer keeps the conversation valid for --continue.
func TestQuitDuringAnswer(t *testing.T) {
	for _, partial := range []bool{true, false} {
		d := newDriver(t, nil)
		if partial {
			d.sess.push(text("half an"), engine.Event{Kind: waitCancel})
		} else {
			d.sess.push(engine.Event{Kind: waitCancel})
		}
		d.submit("question")
		d.send(tickMsg{})
		d.key(keyCtrlD)
		if !d.quit || d.m.gen != nil {
			t.Fatal("ctrl+d during an answer did not quit and stop")
		}
		want := 0
		if partial {
			want = 2
		}
		if len(d.m.msgs) != want {
			t.Errorf("partial=%v: conversation = %+v", partial, d.m.msgs)
		}
		d.settle()
	}
}

// A failed autosave keeps the session dirty (so exit retries it) and says
// so; a later successful save makes it clean again.
func TestFailedAutosaveKeepsSessionUnsaved(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "file"), nil, 0o600)
	d := newDriver(t, func(c *Config) { c.SessionDir = filepath.Join(base, "file", "sessions") })
	d.sess.push(text("answer"), done(engine.StopEOS))
	d.submit("question")
	d.settle()
	if !d.m.needsSave() {
		t.Fatal("a failed autosave left the session marked saved")
	}
	if !d.m.noticeErr || !strings.Contains(d.m.notice, "unsaved") || !strings.Contains(d.m.notice, "not a directory") {
		t.Fatalf("notice = %q", d.m.notice)
	}
	d.m.store.Dir = filepath.Join(base, "sessions")
	d.submit("/save")
	if d.m.needsSave() {
		t.Fatal("still unsaved after a successful /save")
	}
	if _, err := os.Stat(filepath.Join(base, "sessions", d.m.sessName+".json")); err != nil {
		t.Fatal(err)
	}
}

// Esc during a prefill: the status pane shows what the engine holds once
// the stream closed, even when the final event still counted the
// cancelled prompt as cached.
func TestStatusPaneAfterCancelledPrefillIsNotCached(t *testing.T) {
	d := newDriver(t, nil)
	held := d.eng.Stats()
	stale := held
	stale.TokensUsed += 800
	stale.BytesUsed += 800 * int64(stale.BytesPerToken)
	stale.LastPrefillTokens = 800
	d.sess.push(engine.Event{Kind: engine.EventProgress, Done: 16, Total: 800}, engine.Event{Kind: waitCancel, Stats: stale})
	d.submit("a long prompt")
	d.key(keyEsc)
	d.settle()
	if d.m.gen != nil {
		t.Fatal("still generating after Esc")
	}
	if d.m.stats != held {
		t.Errorf("status stats: %d tokens used, %d last prefilled; the engine holds %d", d.m.stats.TokensUsed, d.m.stats.LastPrefillTokens, held.TokensUsed)
	}
	if f := d.frame(); !strings.Contains(f, "16,000 / 65,536 tok") {
		t.Errorf("status pane does not show the engine's 16,000 held tokens:\n%s", f)
	}
}

// TestInputGrowsWithWrappedLines guards issue 15 item 3: the input's height
// counted hard newlines only, so a long single line showed one row.
func TestInputGrowsWithWrappedLines(t *testing.T) {
	tests := []struct {
		name  string
		h     int
		paste string
		want  int
	}{
		{"empty", 24, "", 1},
		{"short", 24, "hello", 1},
		{"two rows", 24, strings.Repeat("word ", 20), 2},
		{"hard newlines", 24, "a\nb\nc", 3},
		{"capped at 8", 40, strings.Repeat("word ", 400), 8},
		{"capped at a third of the screen", 12, strings.Repeat("word ", 400), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t, func(c *Config) { c.Width, c.Height = 80, tt.h })
			if tt.paste != "" {
				d.send(tea.PasteMsg{Content: tt.paste})
			}
			if got := d.m.inputHeight(); got != tt.want {
				t.Errorf("input height %d, want %d", got, tt.want)
			}
		})
	}
}
