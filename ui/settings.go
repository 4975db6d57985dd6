package ui

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// setting is one runtime setting of /set: its name, what it means, and
// how to read and change it.
type setting struct {
	name, help string
	get        func(m *model) string
	set        func(m *model, v string) error
}

func parseFloat(v string, lo, hi float64) (float32, error) {
	f, err := strconv.ParseFloat(v, 32)
	if err != nil || math.IsNaN(f) || f < lo || f > hi {
		return 0, fmt.Errorf("%q is not a number from %g to %g", v, lo, hi)
	}
	return float32(f), nil
}

func parseInt(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q is not a whole number from %d to %d", v, lo, hi)
	}
	return n, nil
}

// setFloat and setInt change the setting at p only when the value parses
// and is in range.
func setFloat(p func(*model) *float32, lo, hi float64) func(*model, string) error {
	return func(m *model, v string) error {
		f, err := parseFloat(v, lo, hi)
		if err == nil {
			*p(m) = f
		}
		return err
	}
}

func setInt(p func(*model) *int, lo, hi int) func(*model, string) error {
	return func(m *model, v string) error {
		n, err := parseInt(v, lo, hi)
		if err == nil {
			*p(m) = n
		}
		return err
	}
}

func fmtFloat(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) }

// settings are what /set changes for the next answers; the flags of the
// same names set them at start.
var settings = []setting{
	{"temperature", "sampling temperature (0 = greedy)",
		func(m *model) string { return fmtFloat(m.cfg.Sampling.Temperature) },
		setFloat(func(m *model) *float32 { return &m.cfg.Sampling.Temperature }, 0, 100)},
	{"top_p", "top-p sampling (1 = off)",
		func(m *model) string { return fmtFloat(m.cfg.Sampling.TopP) },
		setFloat(func(m *model) *float32 { return &m.cfg.Sampling.TopP }, 0, 1)},
	{"top_k", "top-k sampling (0 = off)",
		func(m *model) string { return strconv.Itoa(m.cfg.Sampling.TopK) },
		setInt(func(m *model) *int { return &m.cfg.Sampling.TopK }, 0, 1<<20)},
	{"min_p", "min-p sampling (0 = off)",
		func(m *model) string { return fmtFloat(m.cfg.Sampling.MinP) },
		setFloat(func(m *model) *float32 { return &m.cfg.Sampling.MinP }, 0, 1)},
	{"repeat_penalty", "repetition penalty (1 = off)",
		func(m *model) string { return fmtFloat(m.cfg.Sampling.RepeatPenalty) },
		func(m *model, v string) (err error) {
			m.cfg.Sampling.RepeatPenalty, err = parseFloat(v, 0, 100)
			return
		}},
	{"repeat_last_n", "tokens the repetition penalty looks back over",
		func(m *model) string { return strconv.Itoa(m.cfg.Sampling.RepeatLastN) },
		setInt(func(m *model) *int { return &m.cfg.Sampling.RepeatLastN }, 0, 1<<20)},
	{"max_tokens", "tokens per answer (0 = until done or the pool is full)",
		func(m *model) string { return strconv.Itoa(m.cfg.MaxTokens) },
		setInt(func(m *model) *int { return &m.cfg.MaxTokens }, 0, 1<<30)},
	{"seed", "sampling seed (the same seed and settings repeat an answer)",
		func(m *model) string { return strconv.FormatUint(m.cfg.Sampling.Seed, 10) },
		func(m *model, v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not a whole number from 0 to %d", v, uint64(math.MaxUint64))
			}
			m.cfg.Sampling.Seed = n
			return nil
		}},
	{"system", "the system prompt (as /system)",
		func(m *model) string {
			if m.system == "" {
				return "(none)"
			}
			return strconv.Quote(m.system)
		},
		func(m *model, v string) error { m.system, m.unsaved = v, true; return nil }},
}

// settingNames lists the settings in the order /set shows them.
func settingNames() []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.name
	}
	return out
}

func findSetting(name string) *setting {
	name = strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for i := range settings {
		if settings[i].name == name {
			return &settings[i]
		}
	}
	return nil
}

// settingsTable is what /set shows and /stats ends with.
func (m *model) settingsTable() string {
	var b strings.Builder
	for i, s := range settings {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%-14s  %-8s  %s", s.name, s.get(m), s.help)
	}
	return b.String()
}

// setCommand is /set [name value]: change a setting for the next answers.
func (m *model) setCommand(arg string) {
	if arg == "" {
		m.addInfo("settings (/set NAME VALUE changes one for the next answers):\n" + m.settingsTable())
		return
	}
	name, val, _ := strings.Cut(arg, " ")
	val = strings.TrimSpace(val)
	s := findSetting(name)
	if s == nil {
		names := settingNames()
		sort.Strings(names)
		m.addError(fmt.Sprintf("/set: unknown setting %q; settings: %s", name, strings.Join(names, ", ")))
		return
	}
	if val == "" && s.name != "system" {
		m.addInfo(fmt.Sprintf("%s is %s (%s); /set %s VALUE changes it", s.name, s.get(m), s.help, s.name))
		return
	}
	old := s.get(m)
	if err := s.set(m, val); err != nil {
		m.addError(fmt.Sprintf("/set %s: %v; %s stays %s", s.name, err, s.name, old))
		return
	}
	m.addInfo(fmt.Sprintf("%s: %s → %s (from the next answer)", s.name, old, s.get(m)))
}
