//go:build !unix

package agent

import "os/exec"

const oNonblock = 0

func setProcessGroup(*exec.Cmd) {}

// killTree kills the command (no process groups or sessions here: its
// children may outlive it).
func killTree(cmd *exec.Cmd, _ string) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}
