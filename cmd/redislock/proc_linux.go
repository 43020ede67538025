package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// deathSignal makes the kernel send COMMAND SIGTERM when redislock dies
// (killed with SIGKILL, by the OOM killer): its lease ends within -ttl, and
// COMMAND had better not outlive it. Strictly, the signal is sent when the
// thread that started COMMAND ends; run keeps that thread (LockOSThread).
func deathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }

// runningIn reports whether a process of group pgid has not exited, as
// /proc says (state Z or X: exited, not yet reaped); true when /proc cannot
// tell.
func runningIn(pgid int) bool {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return true
	}
	for _, name := range stats {
		stat, err := os.ReadFile(name)
		if err != nil {
			continue // it exited and was reaped meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and ')'.
		end := bytes.LastIndexByte(stat, ')')
		if end < 0 {
			return true
		}
		f := bytes.Fields(stat[end+1:])
		if len(f) < 3 {
			return true
		}
		if g, _ := strconv.Atoi(string(f[2])); g == pgid && string(f[0]) != "Z" && string(f[0]) != "X" {
			return true
		}
	}
	return false
}
