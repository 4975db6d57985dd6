package ui

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// Issue 15 item 17: /set changes sampling mid-chat; the next request
// carries it.
func TestSetCommand(t *testing.T) {
	tests := []struct {
		in    string
		entry string // the chat's answer to the command
		check func(r engine.Request) bool
	}{
		{"/set temperature 0.2", "temperature: 0.7 → 0.2 (from the next answer)", func(r engine.Request) bool { return r.Sampling.Temperature == 0.2 }},
		{"/set top-p 0.5", "top_p: 0.95 → 0.5 (from the next answer)", func(r engine.Request) bool { return r.Sampling.TopP == 0.5 }},
		{"/set max_tokens 12", "max_tokens: 0 → 12 (from the next answer)", func(r engine.Request) bool { return r.MaxTokens == 12 }},
		{"/set seed 42", "seed: 7 → 42 (from the next answer)", func(r engine.Request) bool { return r.Sampling.Seed == 42 }},
		{"/set system be terse", `system: (none) → "be terse" (from the next answer)`, func(r engine.Request) bool {
			return r.Messages[0].Role == "system" && r.Messages[0].Content == "be terse"
		}},
		{"/set temperature hot", `/set temperature: "hot" is not a number from 0 to 100; temperature stays 0.7`, func(r engine.Request) bool { return r.Sampling.Temperature == 0.7 }},
		{"/set top_p 2", `/set top_p: "2" is not a number from 0 to 1; top_p stays 0.95`, nil},
		{"/set warmth 1", `/set: unknown setting "warmth"; settings: max_tokens, min_p, repeat_last_n, repeat_penalty, seed, system, temperature, top_k, top_p`, nil},
		{"/set temperature", "temperature is 0.7 (sampling temperature (0 = greedy)); /set temperature VALUE changes it", nil},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			d := newDriver(t, func(c *Config) {
				c.Sampling = engine.Sampling{Temperature: 0.7, TopP: 0.95, TopK: 40, MinP: 0.05, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 7}
			})
			d.submit(tc.in)
			if got := d.lastEntry().text; got != tc.entry {
				t.Errorf("entry %q\nwant  %q", got, tc.entry)
			}
			if tc.check == nil {
				return
			}
			d.sess.push(text("ok"), done(engine.StopEOS))
			d.submit("hello")
			d.settle()
			if !tc.check(d.sess.lastReq()) {
				t.Errorf("request %+v", d.sess.lastReq())
			}
		})
	}
}

// Issue 15 item 17 (small): /stats ends with the sampling settings,
// the seed among them.
func TestStatsShowsSeed(t *testing.T) {
	d := newDriver(t, func(c *Config) { c.Sampling.Seed = 1234567 })
	d.submit("/stats")
	if e := d.lastEntry().text; !strings.Contains(e, "seed            1234567") {
		t.Fatalf("/stats lacks the seed:\n%s", e)
	}
}
