package cli

import (
	"strings"
	"testing"
)

func TestServeConfigCheck(t *testing.T) {
	ok := ServeConfig{Host: "127.0.0.1", Port: 8080, Parallel: 8, Queue: 16, PrefillChunk: 128, PrefixCache: 16}
	cases := []struct {
		name string
		mod  func(*ServeConfig)
		want string
	}{
		{"defaults", func(*ServeConfig) {}, ""},
		{"any port", func(c *ServeConfig) { c.Port = 0 }, ""},
		{"no queue, no cache", func(c *ServeConfig) { c.Queue, c.PrefixCache = 0, 0 }, ""},
		{"port too big", func(c *ServeConfig) { c.Port = 70000 }, "--port 70000"},
		{"negative port", func(c *ServeConfig) { c.Port = -1 }, "--port -1"},
		{"no parallel", func(c *ServeConfig) { c.Parallel = 0 }, "--parallel 0"},
		{"huge queue", func(c *ServeConfig) { c.Queue = 1 << 20 }, "--queue 1048576"},
		{"no prefill", func(c *ServeConfig) { c.PrefillChunk = 0 }, "--prefill-chunk 0"},
		{"negative cache", func(c *ServeConfig) { c.PrefixCache = -2 }, "--prefix-cache -2"},
	}
	for _, c := range cases {
		sc := ok
		c.mod(&sc)
		err := sc.check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q...", c.name, err, c.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.1.2.3": true, "0.0.0.0": false, "": false, "10.0.0.1": false, "example.com": false} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v", host, got)
		}
	}
}
