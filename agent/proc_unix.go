//go:build unix

package agent

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// oNonblock opens a FIFO without waiting for a writer (see openChecked).
const oNonblock = syscall.O_NONBLOCK

// setProcessGroup starts the shell in a session of its own (so also its
// own process group, and no controlling terminal to read keys from).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// killTree kills everything the command started: its process group, and,
// where /proc exists, every process still in its session or carrying its
// environment marker. The marker finds children that called setsid (new
// session and group) and were re-parented to init, which neither the
// group nor the parent chain reaches. Rounds repeat because a process may
// fork between the scan and the kill.
func killTree(cmd *exec.Cmd, marker string) {
	if cmd.Process == nil {
		return
	}
	sid := cmd.Process.Pid
	syscall.Kill(-sid, syscall.SIGKILL)
	for range 20 {
		if killMarked(sid, marker) == 0 {
			return
		}
	}
}

// killMarked kills the processes of session sid or whose environment holds
// marker ("NAME=value"), and says how many it found.
func killMarked(sid int, marker string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	needle := []byte(marker + "\x00")
	self := os.Getpid()
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after "(comm)": state ppid pgrp session ...
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		mine := f[3] == strconv.Itoa(sid)
		if !mine {
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			mine = err == nil && (bytes.HasPrefix(env, needle) || bytes.Contains(env, append([]byte{0}, needle...)))
		}
		if mine && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
