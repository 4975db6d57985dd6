package engine

import "testing"

// TestDisplayNamePrefersFileName guards issue 15 item 13: the status pane
// showed general.name as a converter wrote it ("Smollm2 135M 8k Lc100K
// Mix1 Ep2") instead of the model the user picked.
func TestDisplayNamePrefersFileName(t *testing.T) {
	tests := []struct{ general, file, want string }{
		{"Smollm2 135M 8k Lc100K Mix1 Ep2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct Q4_1"},
		{"Qwen3 0.6B", "Qwen3-0.6B-Q4_K_M.gguf", "Qwen3-0.6B Q4_K_M"},
		{"", "Llama-3.2-1B-Instruct-IQ4_XS.GGUF", "Llama-3.2-1B-Instruct IQ4_XS"},
		{"", "gemma-3-1b-it-bf16.gguf", "gemma-3-1b-it bf16"},
		{"", "model.gguf", "model"},
		{"Qwen3 8B", "sha256-6e4c38e1172f42fdbff13edf9a7a017679fb82b0fde415a3e8b3c31c6ed4a4e4", "Qwen3 8B"},
		{"", "sha256-6e4c38e1172f42fdbff13edf9a7a017679fb82b0fde415a3e8b3c31c6ed4a4e4", "sha256-6e4c38e1172f42fdbff13edf9a7a017679fb82b0fde415a3e8b3c31c6ed4a4e4"},
		{"", "Q8_0.gguf", "Q8_0"},
	}
	for _, tt := range tests {
		if got := displayName(tt.general, tt.file); got != tt.want {
			t.Errorf("displayName(%q, %q) = %q, want %q", tt.general, tt.file, got, tt.want)
		}
	}
}
