package hfmodel

// SetReleaseSources makes Open's tensors give back the shard pages their
// builds read (on, the default) or keep every page (off: the load tests
// compare with); the returned func restores the previous setting.
func SetReleaseSources(on bool) (restore func()) {
	old := releaseSources
	releaseSources = on
	return func() { releaseSources = old }
}

// ReleasedBytes is the total of shard bytes given back so far.
func ReleasedBytes() int64 { return releasedBytes.Load() }
