package kvcache

import "fmt"

// RecurrentState is the fixed per-sequence state of a hybrid model
// (Qwen3.5/3.6 Gated DeltaNet layers), which lives beside the pool: Slots
// sequences (live ones plus snapshots) of PerSlot bytes each, whatever
// their length and whatever the KV dtype (it is float32).
type RecurrentState struct {
	Slots   int
	PerSlot int64
}

// Bytes is the whole state storage.
func (s RecurrentState) Bytes() int64 { return int64(s.Slots) * s.PerSlot }

// String names the state for messages: "4 slots × 62.81 MiB = 251.25 MiB".
func (s RecurrentState) String() string {
	unit := "slots"
	if s.Slots == 1 {
		unit = "slot"
	}
	return fmt.Sprintf("%d %s × %s = %s", s.Slots, unit, FormatBytes(s.PerSlot), FormatBytes(s.Bytes()))
}

// PlanHybridPool is PlanPool for a hybrid model: the recurrent state comes
// off the budget first, then the pool takes what is left in whole pages.
// A budget that cannot hold the state, or the state and one page, fails
// with the numbers. Without a state it is PlanPool.
func PlanHybridPool(budget, weights, workspace int64, st RecurrentState, l Layout) (pages int, err error) {
	if st.Slots <= 0 || st.PerSlot <= 0 {
		return PlanPool(budget, weights, workspace, l)
	}
	left := budget - weights - workspace
	if left <= 0 {
		return 0, fmt.Errorf("memory budget %s: weights %s + workspace %s exceed it by %s, before the recurrent state of the hybrid model (%s) and any KV page; raise --gpu-memory or use a smaller model",
			FormatBytes(budget), FormatBytes(weights), FormatBytes(workspace), FormatBytes(-left), st)
	}
	if left < st.Bytes() {
		return 0, fmt.Errorf("memory budget %s: weights %s + workspace %s leave %s, less than the recurrent state of the hybrid model (%s, float32 whatever the KV dtype); raise --gpu-memory or use a smaller model",
			FormatBytes(budget), FormatBytes(weights), FormatBytes(workspace), FormatBytes(max(0, left)), st)
	}
	pages, err = PlanPool(budget, weights+st.Bytes(), workspace, l)
	if err != nil {
		l.Pages = 1
		return 0, fmt.Errorf("memory budget %s: weights %s + workspace %s + recurrent state %s leave %s, less than one KV page (%d tokens of %s = %s); raise --gpu-memory, use a smaller model, or a smaller prefill chunk",
			FormatBytes(budget), FormatBytes(weights), FormatBytes(workspace), st, FormatBytes(max(0, left-st.Bytes())),
			l.PageSize, l.DTypeName(), FormatBytes(l.BytesPerPage()))
	}
	return pages, nil
}
