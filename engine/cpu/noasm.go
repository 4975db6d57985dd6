//go:build purego || !amd64

package cpu

// hasAVX2 is false where the assembly is not built (purego, other
// architectures): every kernel takes its Go loop, and the tests that
// compare assembly with Go skip.
const hasAVX2 = false
