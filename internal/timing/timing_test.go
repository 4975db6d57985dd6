package timing

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestMark(t *testing.T) {
	var b bytes.Buffer
	mu.Lock()
	saved := out
	out, last = &b, time.Now()
	mu.Unlock()
	defer func() { mu.Lock(); out = saved; mu.Unlock() }()
	Mark("first")
	time.Sleep(2 * time.Millisecond)
	Mark("second phase")
	lines := regexp.MustCompile(`(?m)^ftchat: timing: (\S.*?)\s+([0-9.]+) ms \(\+([0-9.]+)\)$`).FindAllStringSubmatch(b.String(), -1)
	if len(lines) != 2 || lines[0][1] != "first" || lines[1][1] != "second phase" {
		t.Fatalf("output %q", b.String())
	}
	if d, err := strconv.ParseFloat(lines[1][3], 64); err != nil || d < 1.9 {
		t.Errorf("second phase took %s ms, slept 2 (%v)", lines[1][3], err)
	}
}

func TestOffPrintsNothing(t *testing.T) {
	mu.Lock()
	saved := out
	out = nil
	mu.Unlock()
	defer func() { mu.Lock(); out = saved; mu.Unlock() }()
	Mark("x") // must not panic or write anywhere
}
