//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

import "os"

// A terminal is never found here: COMMAND always gets a process group of
// its own (see tty.go).
type terminal struct{}

func openTerminal() *terminal { return nil }

func (*terminal) sentByTerminal(os.Signal) bool { return false }

func (*terminal) close() {}
