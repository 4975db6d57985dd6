//go:build !unix

package agent

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

// killGroup kills the command (no process groups here: its children may
// outlive it).
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		cmd.Process.Kill()
	}
}
