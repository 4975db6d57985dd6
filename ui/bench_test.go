package ui

import (
	"fmt"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/ftchat/ftchat/engine"
)

// streamModel returns a model with history earlier messages and a
// generation in progress, fed by hand (no engine goroutine).
func streamModel(tb testing.TB, history int) *model {
	eng, sess := newFakeEngine(), &fakeSession{}
	m := newModel(tb.Context(), Config{Engine: eng, Session: sess, SessionDir: tb.TempDir(), Width: 120, Height: 40, NoSave: true})
	m.tick = func() tea.Cmd { return nil }
	for i := 0; i < history; i++ {
		if i%2 == 0 {
			m.addEntry(&entry{kind: entryUser, text: fmt.Sprintf("question %d: how does the paged KV cache work?", i)})
			m.msgs = append(m.msgs, engine.Message{Role: "user", Content: "q"})
		} else {
			m.addEntry(&entry{kind: entryAssistant, text: fmt.Sprintf("Answer %d. Pages of **16 tokens**:\n\n```go\nfor p := range pages {\n\tuse(p)\n}\n```\n\n- one\n- two\n", i)})
			m.msgs = append(m.msgs, engine.Message{Role: "assistant", Content: "a"})
		}
	}
	m.frame() // renders and caches the visible history, as the first frame does
	ch := make(chan engine.Event)
	m.genSeq++
	g := &generation{id: m.genSeq, cancel: func() {}, ch: ch, entry: &entry{kind: entryAssistant, streaming: true}}
	m.addEntry(g.entry)
	m.gen = g
	return m
}

// streamTokens streams n tokens the way the program does: each token is
// an Update followed by a View; every 4th token a frame tick re-renders
// the streaming tail (30 frames/s against ~120 tok/s decode).
func streamTokens(m *model, n int) {
	id := m.gen.id
	for i := 0; i < n; i++ {
		tok := "word "
		switch i % 40 {
		case 39:
			tok = "end.\n\n"
		case 20:
			tok = "`code` "
		}
		m.Update(eventsMsg{id: id, events: []engine.Event{{Kind: engine.EventText, Text: tok}}})
		if i%4 == 3 {
			m.Update(tickMsg{})
		}
		m.View()
	}
}

// BenchmarkStreamToken measures the time per streamed token (update +
// view, with a tail re-render every 4 tokens). It must not grow with the
// number of earlier messages: only the streaming entry is re-rendered.
func BenchmarkStreamToken(b *testing.B) {
	for _, history := range []int{10, 1000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			m := streamModel(b, history)
			// Start from an answer of a realistic length; restart it every
			// 400 tokens so later iterations do not measure ever longer answers.
			b.ResetTimer()
			for i := 0; i < b.N; i += 400 {
				n := min(400, b.N-i)
				b.StopTimer()
				m.gen.text.Reset()
				m.gen.entry.text, m.gen.entry.stableLen, m.gen.entry.stableLines = "", 0, nil
				b.StartTimer()
				streamTokens(m, n)
			}
		})
	}
}

// The streaming cost must not depend on the history: count the entries
// rendered per frame instead of timing (timing belongs in the benchmark).
func TestStreamingDoesNotRerenderHistory(t *testing.T) {
	m := streamModel(t, 1000)
	cached := 0
	for _, e := range m.entries {
		if e.valid {
			cached++
		}
	}
	if cached > 100 {
		t.Fatalf("the first frame rendered %d of 1000 history entries; only the visible ones should be", cached)
	}
	before := make(map[*entry]*string)
	for _, e := range m.entries[:len(m.entries)-1] {
		if e.valid && len(e.lines) > 0 {
			before[e] = &e.lines[0]
		}
	}
	streamTokens(m, 200)
	for e, p := range before {
		if !e.valid || len(e.lines) == 0 || &e.lines[0] != p {
			t.Fatal("a history entry was re-rendered while streaming")
		}
	}
}
