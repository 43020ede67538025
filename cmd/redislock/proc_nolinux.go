//go:build unix && !linux

package main

import "syscall"

// deathSignal does nothing: only Linux signals a child when its parent dies.
func deathSignal(*syscall.SysProcAttr) {}
