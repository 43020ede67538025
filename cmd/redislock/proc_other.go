//go:build !unix

package main

import (
	"os"
	"syscall"
)

// Without Unix process groups and signals, COMMAND is one process: it can
// be killed, not signalled.

func procAttr(bool) *syscall.SysProcAttr { return nil }

func signalJob(p *os.Process, _ bool, s os.Signal) error {
	if s == os.Interrupt {
		return p.Signal(s)
	}
	return p.Kill()
}

func groupAlive(int) bool { return false }

func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
