package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill cmd's process when the harness dies,
// even by SIGKILL, so that no child or redis-server outlives it.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
