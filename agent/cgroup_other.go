//go:build !linux

package agent

import "os/exec"

// shellCgroup exists on Linux only; elsewhere killTree's scan is all.
type shellCgroup struct{}

func newShellCgroup() *shellCgroup      { return nil }
func (g *shellCgroup) attach(*exec.Cmd) {}
func (g *shellCgroup) kill()            {}
func (g *shellCgroup) release()         {}
