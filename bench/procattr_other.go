//go:build !linux

package main

import "os/exec"

// setDeathSignal is a no-op off Linux: children are still killed when the
// harness exits through its normal paths or on SIGINT/SIGTERM.
func setDeathSignal(cmd *exec.Cmd) {}
