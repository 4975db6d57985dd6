package quality

import "fmt"

// Window is one forward pass of the sliding-window perplexity: the model
// sees tokens [Start, End) from an empty cache and scores the tokens at
// positions [First, End), each predicted from the logits of the position
// before it.
type Window struct {
	Start, First, End int
}

// Windows plans the sliding-window evaluation of n tokens: windows of
// window tokens starting every stride tokens, each scoring only the tokens
// no earlier window scored. Every token 1..n-1 is scored exactly once
// (token 0 has nothing to be predicted from); a token scored by any window
// but the first sees at least window-stride tokens of context.
func Windows(n, window, stride int) ([]Window, error) {
	if window < 2 {
		return nil, fmt.Errorf("--window %d: must be at least 2 tokens", window)
	}
	if stride < 1 || stride > window-1 {
		return nil, fmt.Errorf("--stride %d: must be between 1 and window-1 = %d (tokens advanced per window)", stride, window-1)
	}
	if n < 2 {
		return nil, fmt.Errorf("the text has %d token(s); perplexity needs at least 2", n)
	}
	var ws []Window
	scored := 1 // positions below this are done (token 0 is never scored)
	for start := 0; scored < n; start += stride {
		end := min(start+window, n)
		ws = append(ws, Window{Start: start, First: scored, End: end})
		scored = end
	}
	return ws, nil
}
