//go:build unix

package main

import (
	"os"
	"syscall"
)

// procAttr returns COMMAND's process attributes: a process group of its
// own (ownGroup), and on Linux a death signal (see deathSignal).
func procAttr(ownGroup bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: ownGroup}
	deathSignal(a)
	return a
}

// signalJob sends s to p, or to the process group p leads (group).
func signalJob(p *os.Process, group bool, s os.Signal) error {
	if !group {
		return p.Signal(s)
	}
	return syscall.Kill(-p.Pid, s.(syscall.Signal))
}

// groupAlive reports whether the process group pgid has a process left
// that has not exited: an orphan that exited stays in its group until the
// init process reaps it, which some (a container's) do a second later; it
// runs nothing any more (see runningIn).
func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return (err == nil || err == syscall.EPERM) && runningIn(pgid)
}

// exitStatus returns a shell's $? for a process that ended as ps says:
// its exit status, or 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalNumber returns s's number.
func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}
