package cpu

import "github.com/ftchat/ftchat/engine/kvcache"

// SetKVStore installs s as the KV pool, replacing the current one: the
// engine builds s beside the live pool (a /kvdtype switch converting the
// stored pages) and swaps it in only once it is complete.
func (b *Backend) SetKVStore(s *kvcache.HostStore) { b.kv, b.layout = s, s.Layout() }
