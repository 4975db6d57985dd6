package sample

import "strings"

// Stopper decides when generation ends: on an end-of-generation token id,
// or when the decoded text contains a stop string, even one split across
// several tokens.
type Stopper struct {
	eog   map[int32]bool
	stops []string
}

// NewStopper builds a Stopper; empty stop strings are ignored.
func NewStopper(eog []int32, stops []string) *Stopper {
	s := &Stopper{eog: map[int32]bool{}}
	for _, id := range eog {
		s.eog[id] = true
	}
	for _, t := range stops {
		if t != "" {
			s.stops = append(s.stops, t)
		}
	}
	return s
}

// IsEOG reports whether id ends generation.
func (s *Stopper) IsEOG(id int32) bool { return s.eog[id] }

// Check looks at all text generated so far. If a stop string occurs, it
// returns the length of the text before the earliest one and stop=true:
// the caller trims there. Otherwise it returns how much of text is safe to
// show: everything except a tail that could still grow into a stop string.
func (s *Stopper) Check(text string) (keep int, stop bool) {
	first := -1
	for _, t := range s.stops {
		if i := strings.Index(text, t); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		return first, true
	}
	hold := 0
	for _, t := range s.stops {
		// Longest suffix of text that is a proper prefix of t.
		for n := min(len(t)-1, len(text)); n > hold; n-- {
			if strings.HasSuffix(text, t[:n]) {
				hold = n
				break
			}
		}
	}
	return len(text) - hold, false
}
