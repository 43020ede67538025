//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// A terminal is the controlling terminal of redislock, opened while
// redislock is its foreground job (an interactive shell's command).
type terminal struct{ f *os.File }

// openTerminal returns the controlling terminal if redislock's process
// group is its foreground one, else nil (no terminal: cron, systemd, a
// container; or a background job).
func openTerminal() *terminal {
	f, err := os.Open("/dev/tty")
	if err != nil {
		return nil
	}
	t := &terminal{f}
	if !t.foreground() {
		t.close()
		return nil
	}
	return t
}

// foreground reports whether redislock's process group is the terminal's
// foreground one: the one the terminal sends Ctrl-C and Ctrl-\ to.
func (t *terminal) foreground() bool {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, t.f.Fd(), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}

// sentByTerminal reports whether s, received by redislock, was most likely
// sent by the terminal to the whole foreground process group, COMMAND
// included: a SIGINT or SIGQUIT while redislock is in the foreground.
func (t *terminal) sentByTerminal(s os.Signal) bool {
	return (s == syscall.SIGINT || s == syscall.SIGQUIT) && t.foreground()
}

func (t *terminal) close() {
	if t != nil {
		_ = t.f.Close()
	}
}
