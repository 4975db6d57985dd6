package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ftchat/ftchat/engine"
	"github.com/ftchat/ftchat/internal/testmodel"
)

// A prompt larger than the whole pool is a 413 that names the pool's size
// and its dtype; with K and V in different dtypes (--cache-type-k/-v) both
// halves are named, not K's alone.
func TestPromptOverWholePoolIs413NamingTheDTypes(t *testing.T) {
	path := testmodel.Require(t)
	for _, tc := range []struct {
		name string
		opts engine.Options
		want string
	}{
		{"one dtype", engine.Options{KVDType: "fp8_e4m3"}, "(fp8_e4m3)"},
		{"k and v apart", engine.Options{KVDTypeK: "bf16", KVDTypeV: "fp8_e4m3"}, "(k=bf16 v=fp8_e4m3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Model, o.Device, o.KVTokens = path, "cpu", 128
			e, err := engine.Load(context.Background(), o, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			ts, _ := newTestServer(t, e, engine.BatcherOptions{}, nil)
			long := strings.Repeat("tell me more about the sea and the ships ", 60)
			body, _ := json.Marshal(map[string]any{"model": modelID, "max_tokens": 4,
				"messages": []map[string]string{{"role": "user", "content": long}}})
			resp, out := post(t, ts.URL+"/v1/chat/completions", string(body))
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413: %s", resp.StatusCode, out)
			}
			if !strings.Contains(string(out), "whole KV pool holds") || !strings.Contains(string(out), tc.want) {
				t.Errorf("error %s lacks the pool and %q", out, tc.want)
			}
		})
	}
}
