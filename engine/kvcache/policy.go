package kvcache

import "fmt"

// DropOldestTurns is the opt-in policy for a conversation that no longer
// fits: it picks how many of the oldest turns to drop so that the rest of
// the conversation plus need new tokens fit in capacity tokens.
//
// turns are the token lengths of the conversation's turns in order; the
// first keep turns (the system prompt, usually 1) are never dropped; need
// is the new tokens (the next user turn plus room for the reply). It
// returns the number of turns to drop right after the kept ones, the
// smallest that makes everything fit, or an error when even dropping all
// droppable turns is not enough.
//
// Dropping shifts every later token to a new position, and K is cached
// after RoPE, so the remaining turns must be prefilled again: only the
// kept leading turns stay cached (Sequence.Reuse finds them). The engine
// applies this only when the user enabled it; otherwise it reports the
// PoolFullError.
func DropOldestTurns(turns []int, keep, need, capacity int) (drop int, err error) {
	keep = max(0, min(keep, len(turns)))
	total := need
	for _, n := range turns {
		total += n
	}
	for drop = 0; total > capacity; drop++ {
		if keep+drop == len(turns) {
			return 0, fmt.Errorf("even after dropping all %d older turns, the kept %d turn(s) and %d new tokens need %d tokens; the KV cache holds %d",
				len(turns)-keep, keep, need, total, capacity)
		}
		total -= turns[keep+drop]
	}
	return drop, nil
}
