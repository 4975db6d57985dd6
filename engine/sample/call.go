package sample

import (
	"fmt"
	"slices"
	"strings"
)

// Forced tool calls (OpenAI's tool_choice "required" or a named function,
// Anthropic's "any" or "tool"): the answer must begin with a call in the
// model's own format. A CallChoice is one tool's call as literal text
// around its arguments; the constraint lets the model pick among the
// choices' prefixes (the tool name is part of each), then holds the
// arguments to the tool's schema with the JSON recognizer, then writes the
// suffix and ends. A choice without an Args schema (formats whose
// arguments are not JSON) leaves the model free once its prefix is out.

// CallChoice is one tool's call in the model's format.
type CallChoice struct {
	Prefix string  // the call up to its arguments, the tool's name included
	Args   *Schema // the arguments; nil: free text after Prefix
	Suffix string  // after the arguments (with Args)
}

// thinkEnd closes a thinking block; a prompt that opens one lets the model
// think freely first.
const thinkEnd = "</think>"

type callPhase uint8

const (
	callThink  callPhase = iota // inside the model's thinking
	callPrefix                  // matching choices[lo:hi] at pos
	callArgs                    // the arguments of choices[lo]
	callSuffix                  // matching choices[lo].Suffix at pos
	callEnd                     // the call is complete
	callFree                    // after a prefix without Args: anything
)

// callState is the forced-call recognizer after some bytes; like
// jsonState, a value that is copied, never mutated.
type callState struct {
	choices []CallChoice // sorted by Prefix
	phase   callPhase
	lo, hi  int
	pos     int  // callThink: bytes of </think> matched; callPrefix, callSuffix: bytes matched
	ws      int  // whitespace before the prefix
	lead    bool // whitespace may come before the prefix (after thinking)
	js      jsonState
}

func (st callState) step(c byte) (callState, bool) {
	switch st.phase {
	case callThink:
		switch {
		case c == thinkEnd[st.pos]:
			if st.pos++; st.pos == len(thinkEnd) {
				st.phase, st.pos, st.ws, st.lead = callPrefix, 0, 0, true
				st.lo, st.hi = 0, len(st.choices)
			}
		case c == '<':
			st.pos = 1
		default:
			st.pos = 0
		}
		return st, true
	case callPrefix:
		if st.pos == 0 && st.lead && isWS(c) {
			st.ws++
			return st, st.ws <= maxJSONWhitespace
		}
		lo, hi := st.lo, st.hi
		for lo < hi && st.choices[lo].Prefix[st.pos] < c {
			lo++
		}
		h := lo
		for h < hi && st.choices[h].Prefix[st.pos] == c {
			h++
		}
		if lo == h {
			return st, false
		}
		st.lo, st.hi = lo, h
		st.pos++
		// No prefix is a prefix of another (NewCallConstraint checks), so
		// a complete one is the only candidate left.
		if ch := st.choices[lo]; len(ch.Prefix) == st.pos {
			if ch.Args == nil {
				st.phase = callFree
			} else {
				st.phase, st.js = callArgs, newJSONState(ch.Args)
			}
		}
		return st, true
	case callArgs:
		if js, ok := st.js.step(c, maxJSONWhitespace); ok {
			st.js = js
			return st, true
		}
		if !st.js.complete() {
			return st, false
		}
		st.phase, st.pos = callSuffix, 0
		if st.choices[st.lo].Suffix == "" {
			return st, false
		}
		fallthrough
	case callSuffix:
		suf := st.choices[st.lo].Suffix
		if c != suf[st.pos] {
			return st, false
		}
		if st.pos++; st.pos == len(suf) {
			st.phase = callEnd
		}
		return st, true
	case callFree:
		return st, true
	}
	return st, false
}

// complete reports whether the call is whole (or past the constraint).
func (st callState) complete() bool {
	switch st.phase {
	case callEnd, callFree:
		return true
	case callArgs:
		return st.choices[st.lo].Suffix == "" && st.js.complete()
	}
	return false
}

// CallConstraint masks logits so that the answer begins with a call of
// one of its choices.
type CallConstraint struct {
	v      *Vocab
	st     callState
	states []callState
}

// NewCallConstraint starts a constraint for one answer; thinking says the
// prompt opened the model's thinking, which goes unconstrained up to its
// </think> (then whitespace, then the call).
func NewCallConstraint(v *Vocab, choices []CallChoice, thinking bool) (*CallConstraint, error) {
	if len(choices) == 0 {
		return nil, fmt.Errorf("call constraint: no choices")
	}
	cs := slices.Clone(choices)
	slices.SortFunc(cs, func(a, b CallChoice) int { return strings.Compare(a.Prefix, b.Prefix) })
	for i, c := range cs {
		if c.Prefix == "" {
			return nil, fmt.Errorf("call constraint: an empty prefix")
		}
		if i > 0 && strings.HasPrefix(c.Prefix, cs[i-1].Prefix) {
			return nil, fmt.Errorf("call constraint: prefix %q begins with prefix %q", c.Prefix, cs[i-1].Prefix)
		}
	}
	st := callState{choices: cs, phase: callPrefix, hi: len(cs)}
	if thinking {
		st.phase = callThink
	}
	return &CallConstraint{v: v, st: st, states: make([]callState, v.maxLen+1)}, nil
}

// Free reports whether the constraint no longer restricts the answer.
func (c *CallConstraint) Free() bool { return c.st.phase == callFree }

// Complete reports whether the text so far holds the whole call.
func (c *CallConstraint) Complete() bool { return c.st.complete() }

// Mask sets every token that cannot continue the call to -Inf in lg.
// Once the call is complete only end-of-generation tokens remain (and
// they remain when no token fits); past a free choice's prefix nothing
// is masked.
func (c *CallConstraint) Mask(lg []float32) {
	if c.st.phase == callFree {
		return
	}
	allowed := make([]bool, len(lg))
	fits := false
	if c.st.phase != callEnd {
		st := c.st
		var pass func(int32) bool
		switch {
		case st.phase == callThink && st.pos == 0:
			pass = func(id int32) bool { return c.v.noTag[id] } // thinking text without a tag
		case st.phase == callArgs && st.js.mode == modeString && st.js.aux == 0:
			pass = func(id int32) bool { return c.v.plain[id] }
		default:
			pass = func(int32) bool { return false }
		}
		fits = maskWalk(c.v, allowed, st, c.states, callState.step, pass)
	}
	c.v.finishMask(lg, allowed, c.st.complete() || !fits)
}

// Accept advances the constraint by the sampled token.
func (c *CallConstraint) Accept(id int32) error {
	if c.st.phase == callFree || slices.Contains(c.v.eog, id) {
		return nil
	}
	if id < 0 || int(id) >= len(c.v.bytes) || c.v.bytes[id] == nil {
		return fmt.Errorf("call constraint: token %d is not text", id)
	}
	st := c.st
	for _, b := range c.v.bytes[id] {
		var ok bool
		if st, ok = st.step(b); !ok {
			return fmt.Errorf("call constraint: token %d (%q) breaks the tool call", id, c.v.bytes[id])
		}
	}
	c.st = st
	return nil
}
