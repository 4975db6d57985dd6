package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine/kvcache"
)

// TestPrintModeErrorsSuggestNoSlashCommands: in -p there is no chat to type
// /clear or /kvdtype into, so the pool and context errors give flag advice.
func TestPrintModeErrorsSuggestNoSlashCommands(t *testing.T) {
	pool := func(e4m3 int) error {
		return fmt.Errorf("the piped input (9,000 tokens) does not fit the KV pool: %w",
			&kvcache.PoolFullError{Asked: 9000, Fit: 100, Capacity: 8192, Used: 0, DType: kvcache.BF16, E4M3Capacity: e4m3})
	}
	ctxFull := func() error {
		return &ContextFullError{Need: 9000, ContextLen: 8192, pool: &kvcache.PoolFullError{Asked: 9000, Fit: 8192}}
	}
	cases := []struct {
		name string
		err  error
		want []string
	}{
		{"pool, bf16", pool(15360), []string{"shorten the prompt", "--kv-cache-dtype fp8_e4m3 (about 15,360 tokens", "--kv-tokens on the CPU"}},
		{"pool, fp8", pool(0), []string{"shorten the prompt", "--kv-tokens on the CPU"}},
		{"context", ctxFull(), []string{"shorten the prompt", "--ctx-size"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chat := tc.err.Error()
			if !strings.Contains(chat, "/clear") {
				t.Fatalf("the chat's message lost /clear: %s", chat)
			}
			reworded := ForPrintMode(tc.err)
			if pf := (*kvcache.PoolFullError)(nil); !errors.As(reworded, &pf) {
				t.Error("the reworded error no longer unwraps to a PoolFullError")
			}
			msg := reworded.Error()
			if strings.Contains(msg, "/clear") || strings.Contains(msg, "/kvdtype") {
				t.Errorf("-p message suggests slash commands: %s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("-p message lacks %q: %s", w, msg)
				}
			}
		})
	}
	if ForPrintMode(nil) != nil {
		t.Error("ForPrintMode(nil) != nil")
	}
}
