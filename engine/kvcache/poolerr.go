package kvcache

import (
	"fmt"
	"strings"
)

// PoolFullError reports that new tokens do not fit in the KV pool. The
// sequence is unchanged. Error() is written for the user.
type PoolFullError struct {
	Asked         int   // new tokens requested
	Fit           int   // how many of them would fit now
	Held          int   // tokens this conversation keeps in the cache
	Capacity      int   // pool size in tokens
	Used          int   // tokens held by all conversations (shared ones once)
	DType         DType // the pool's dtype (of K, and of V unless VDType is set)
	VDType        DType // V's dtype when it differs from DType; Auto otherwise
	BytesPerToken int
	// E4M3Capacity is the pool size in tokens if the same memory held
	// fp8_e4m3 K and V (dynamic scales); 0 when both already are fp8.
	E4M3Capacity int
	// NoChat words the advice for a run without the chat (-p): no slash
	// commands.
	NoChat bool
	// Prompt: Asked counts a whole prompt checked before it is sent
	// (FitCheck), not tokens added to what the conversation holds.
	Prompt bool
}

func (e *PoolFullError) Error() string {
	var b strings.Builder
	if e.Prompt {
		fmt.Fprintf(&b, "KV cache full: the conversation needs %s tokens but only %s fit (the %s pool holds %s tokens, %s in use, %s of them by the conversations it caches). To continue: ",
			group(e.Asked), group(e.Fit), PairName(e.DType, e.VDType), group(e.Capacity), group(e.Used), group(e.Held))
	} else {
		fmt.Fprintf(&b, "KV cache full: %s new tokens do not fit, only %s do (this conversation holds %s tokens; the %s pool holds %s tokens, %s in use). To continue: ",
			group(e.Asked), group(e.Fit), group(e.Held), PairName(e.DType, e.VDType), group(e.Capacity), group(e.Used))
	}
	switch {
	case e.NoChat && e.E4M3Capacity > 0:
		fmt.Fprintf(&b, "shorten the prompt or the piped input, use --kv-cache-dtype fp8_e4m3 (about %s tokens in the same memory)", group(e.E4M3Capacity))
	case e.NoChat:
		b.WriteString("shorten the prompt or the piped input")
	case e.E4M3Capacity > 0:
		fmt.Fprintf(&b, "/drop the oldest turns, /clear to start a new conversation, switch the KV cache to fp8_e4m3 (/kvdtype fp8_e4m3 or --kv-cache-dtype fp8_e4m3: about %s tokens in the same memory)", group(e.E4M3Capacity))
	default:
		b.WriteString("/drop the oldest turns, /clear to start a new conversation")
	}
	b.WriteString(", or give the cache more memory (--gpu-memory on a GPU, --kv-tokens on the CPU).")
	return b.String()
}

// group writes n with thousands separators: 131072 -> "131,072".
func group(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}
