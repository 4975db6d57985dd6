package hfmodel

// SetKeepBlockFP8 makes Open keep per-row and block-scaled FP8 weights as
// FP8_E4M3_B32 (on, the default) or dequantize them to F32 (off: the path
// tests compare with); the returned func restores the previous setting.
func SetKeepBlockFP8(on bool) (restore func()) {
	old := keepBlockFP8
	keepBlockFP8 = on
	return func() { keepBlockFP8 = old }
}
