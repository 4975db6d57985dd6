package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ftchat/ftchat/engine/gguf"
)

// TestPoolSizeBeyondMemoryRefusedAtLoad guards the CPU pool plan against
// --kv-tokens / --ctx-size values the machine cannot hold (a makeslice
// panic or an out-of-memory abort before): Load fails quickly, with what
// the pool needs and what the machine has, and normal sizes still load.
func TestPoolSizeBeyondMemoryRefusedAtLoad(t *testing.T) {
	path := synthModel(t, "qwen3-tiny", gguf.F32) // 2 KiB of bf16 KV per token
	cases := []struct {
		name string
		o    Options
		want string // "" = loads
	}{
		{"kv-tokens 1e12", Options{KVTokens: 1e12}, "needs"},
		{"kv-tokens 2^62", Options{KVTokens: 1 << 62}, "needs more than 8 EiB"},
		{"ctx-size 1e9", Options{ContextLen: 1e9}, "needs"},
		{"ctx-size 1e9 fp8", Options{ContextLen: 1e9, KVDType: "fp8_e4m3"}, "needs"},
		{"kv-tokens 4096", Options{KVTokens: 4096}, ""},
		{"ctx-size 1e9, kv-tokens 4096", Options{ContextLen: 1e9, KVTokens: 4096}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.Model, o.Device = path, "cpu"
			start := time.Now()
			e, err := Load(context.Background(), o, nil)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				e.Close()
				return
			}
			if err == nil {
				e.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--kv-tokens/--ctx-size") {
				t.Errorf("error %v, want one containing %q and naming the options", err, c.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("refusal took %v", d)
			}
		})
	}
}

// TestThreadCountBeyondLimitRefused guards --threads: each thread is a
// goroutine and a queue slot, so --threads 1000000000 exhausted memory
// starting the CPU backend.
func TestThreadCountBeyondLimitRefused(t *testing.T) {
	for _, c := range []struct {
		threads int
		ok      bool
	}{{1e9, false}, {MaxThreads + 1, false}, {MaxThreads, true}, {4, true}, {0, true}} {
		err := Options{Threads: c.threads}.Validate(Hardware{})
		if c.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "--threads") {
			t.Errorf("--threads %d: %v", c.threads, err)
		}
	}
}

// TestUbatchSizeBounds guards --ubatch-size (Options.PrefillChunk): the
// GPU workspace is planned for it, so a huge step must be refused before
// anything is sized from it.
func TestUbatchSizeBounds(t *testing.T) {
	for _, c := range []struct {
		chunk int
		ok    bool
	}{{-1, false}, {MaxPrefillChunk + 1, false}, {1 << 30, false}, {MaxPrefillChunk, true}, {2048, true}, {1, true}, {0, true}} {
		err := Options{PrefillChunk: c.chunk}.Validate(Hardware{})
		if c.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "--ubatch-size") {
			t.Errorf("--ubatch-size %d: %v", c.chunk, err)
		}
	}
}

// TestTinyKVTokensSaysTheMinimum: a --kv-tokens (or --ctx-size) too small
// for one page names the setting and the smallest value that works, and
// that value loads.
func TestTinyKVTokensSaysTheMinimum(t *testing.T) {
	path := synthModel(t, "qwen3-tiny", gguf.F32)
	cases := []struct {
		name  string
		o, ok Options // ok: the advertised minimum
		want  string
	}{
		{"kv-tokens", Options{KVTokens: 16, PageSize: 64}, Options{KVTokens: 64, PageSize: 64},
			"--kv-tokens 16 is too small for the KV pool: the smallest holds one page of 64 tokens, so use --kv-tokens 64 or more"},
		{"ctx-size", Options{ContextLen: 16, PageSize: 64}, Options{ContextLen: 64, PageSize: 64},
			"--ctx-size 16 is too small for the KV pool: the smallest holds one page of 64 tokens, so use --ctx-size 64 or more"},
	}
	load := func(o Options) error {
		o.Model, o.Device = path, "cpu"
		e, err := Load(context.Background(), o, nil)
		if err == nil {
			e.Close()
		}
		return err
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := load(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if err := load(c.ok); err != nil {
				t.Fatalf("the advertised minimum is refused: %v", err)
			}
		})
	}
}
