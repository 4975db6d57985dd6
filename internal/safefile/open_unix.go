//go:build unix

package safefile

import "syscall"

// O_NONBLOCK makes opening a named pipe return at once instead of waiting
// for a writer; it has no effect on regular files.
const openFlags = syscall.O_NONBLOCK
