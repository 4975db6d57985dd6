package ui

import (
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
)

// dropDriver holds a two-turn conversation under the system prompt "be
// brief" (2 + 6 + 4 = 12 tokens of the fake's words) in a pool that fits 12.
func dropDriver(t *testing.T) *driver {
	d := newDriver(t, func(c *Config) { c.System = "be brief" })
	d.eng.fitTokens = 12
	d.sess.push(text("a b c"), done(engine.StopEOS))
	d.sess.push(text("d e"), done(engine.StopEOS))
	d.submit("one two three")
	d.settle()
	d.submit("four five")
	d.settle()
	return d
}

// Issue 15 item 16: a message that does not fit offers to drop the
// oldest turns (the system prompt stays); Enter again does it and sends.
func TestFullPoolOffersToDropOldestTurns(t *testing.T) {
	d := dropDriver(t)
	d.submit("six seven eight")
	if len(d.sess.reqs) != 2 {
		t.Fatalf("the message was sent although it does not fit (%d requests)", len(d.sess.reqs))
	}
	if got := d.m.inputValue(); got != "six seven eight" {
		t.Fatalf("input %q: the refused message must stay in the input", got)
	}
	f := d.frame()
	for _, want := range []string{"not sent: KV cache full: the conversation needs 15 tokens but only 12 fit",
		"press Enter again to drop the oldest 1 of 2 turns", "Enter: drop the oldest 1 turn and send"} {
		if !strings.Contains(strings.Join(strings.Fields(f), " "), want) {
			t.Errorf("frame lacks %q:\n%s", want, f)
		}
	}
	d.enter()
	d.settle()
	if len(d.sess.reqs) != 3 {
		t.Fatalf("Enter again did not send (%d requests)", len(d.sess.reqs))
	}
	var got []string
	for _, msg := range d.sess.lastReq().Messages {
		got = append(got, msg.Role+":"+msg.Content)
	}
	want := "system:be brief | user:four five | assistant:d e | user:six seven eight"
	if strings.Join(got, " | ") != want {
		t.Fatalf("sent %q\nwant %q", strings.Join(got, " | "), want)
	}
	if !strings.Contains(d.frame(), "dropped the oldest 1 of 2 turns") {
		t.Errorf("no note of the dropped turn:\n%s", d.frame())
	}
}

func TestDropCommand(t *testing.T) {
	tests := []struct {
		name, arg string
		want      string // roles and contents the model sees after /drop
		err       string
	}{
		{"one", "", "system:be brief | user:four five | assistant:d e", ""},
		{"two", "2", "system:be brief", ""},
		{"more than held", "9", "system:be brief", ""},
		{"bad", "x", "system:be brief | user:one two three | assistant:a b c | user:four five | assistant:d e", `/drop: "x" is not a number of turns (1 to 2)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := dropDriver(t)
			d.submit(strings.TrimSpace("/drop " + tc.arg))
			var got []string
			for _, msg := range d.m.conversation() {
				got = append(got, msg.Role+":"+msg.Content)
			}
			if strings.Join(got, " | ") != tc.want {
				t.Errorf("conversation %q, want %q", strings.Join(got, " | "), tc.want)
			}
			if tc.err != "" && d.lastEntry().text != tc.err {
				t.Errorf("entry %q, want %q", d.lastEntry().text, tc.err)
			}
		})
	}
}

// /drop after a refusal drops what the message needs and sends it.
func TestDropSendsTheRefusedMessage(t *testing.T) {
	d := dropDriver(t)
	d.submit("six seven eight")
	d.m.input.Reset()
	d.submit("/drop")
	d.settle()
	if len(d.sess.reqs) != 3 {
		t.Fatalf("/drop did not send the refused message (%d requests)", len(d.sess.reqs))
	}
	msgs := d.sess.lastReq().Messages
	if got := msgs[len(msgs)-1].Content; got != "six seven eight" {
		t.Fatalf("sent %q", got)
	}
}

func TestGoldenPoolFullOffer(t *testing.T) {
	d := dropDriver(t)
	d.submit("six seven eight")
	checkGolden(t, "pool_full_drop_80x24", d.frame())
}

// Issue 15 item 16, the other way on: /compact replaces the oldest turns
// by the model's summary of them, then sends the refused message.
func TestCompactSummarizesOldestTurns(t *testing.T) {
	d := dropDriver(t)
	d.submit("six seven eight")
	if !strings.Contains(d.lastEntry().text, "/compact summarizes them instead") {
		t.Fatalf("the offer does not mention /compact: %q", d.lastEntry().text)
	}
	d.sess.push(text("colours"), done(engine.StopEOS)) // the summary
	d.sess.push(text("ok"), done(engine.StopEOS))      // the refused message's answer
	d.m.input.Reset()
	d.eng.fitTokens = 60 // room for the summary request (the fake counts the instruction's words)
	d.submit("/compact")
	d.settle()
	if len(d.sess.reqs) != 4 {
		t.Fatalf("%d requests, want the summary and the refused message", len(d.sess.reqs))
	}
	sum := d.sess.reqs[2]
	if sum.Messages[0].Role != "system" || !strings.HasPrefix(sum.Messages[0].Content, "Summarize the conversation") ||
		sum.Messages[1].Content != "User: one two three\n\nAssistant: a b c" {
		t.Fatalf("summary request %+v", sum.Messages)
	}
	var got []string
	for _, msg := range d.sess.lastReq().Messages {
		got = append(got, msg.Role+":"+msg.Content)
	}
	want := "system:be brief | user:" + summaryPrefix + "colours | assistant:Understood; I will continue from this summary. | user:four five | assistant:d e | user:six seven eight"
	if strings.Join(got, " | ") != want {
		t.Fatalf("sent %q\nwant %q", strings.Join(got, " | "), want)
	}
}

// A summary stopped with Esc replaces nothing.
func TestCompactStoppedChangesNothing(t *testing.T) {
	d := dropDriver(t)
	before := d.m.conversation()
	d.sess.push(text("partial"), engine.Event{Kind: waitCancel})
	d.eng.fitTokens = 60
	d.submit("/compact 1")
	d.key(keyEsc)
	d.settle()
	if got := d.m.conversation(); len(got) != len(before) || got[1].Content != before[1].Content {
		t.Fatalf("a stopped summary changed the conversation: %+v", got)
	}
	if n := d.m.entries[len(d.m.entries)-1].note; n != "summary stopped; nothing replaced" {
		t.Errorf("note %q", n)
	}
}
