package main

import "syscall"

// deathSignal makes the kernel send COMMAND SIGTERM when redislock dies
// (killed with SIGKILL, by the OOM killer): its lease ends within -ttl, and
// COMMAND had better not outlive it. Strictly, the signal is sent when the
// thread that started COMMAND ends; run keeps that thread (LockOSThread).
func deathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
