//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// helperEnv names the environment variable that makes the test binary run
// helper instead of the tests.
const helperEnv = "REDISLOCK_TEST_HELPER"

// helper is a COMMAND for the tests, run by redislock as the test binary
// with $REDISLOCK_TEST_HELPER set to its name; args[0] is the marks file.
//
// "terminal" writes "group same" when it is in its parent's (redislock's)
// process group ("group own" otherwise), reads a line from stdin and writes
// "read <line>", writes "ready", then counts the SIGINTs it gets: from the
// first, for 500 ms. It writes "INT <count>" and exits 5.
func helper(name string, args []string) int {
	if name != "terminal" || len(args) != 1 {
		fmt.Fprintln(os.Stderr, "helper: bad invocation", name, args)
		return 100
	}
	f, err := os.OpenFile(args[0], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 100
	}
	defer f.Close()
	ints := make(chan os.Signal, 16)
	signal.Notify(ints, syscall.SIGINT)
	parent, _ := syscall.Getpgid(os.Getppid())
	group := "own"
	if parent == syscall.Getpgrp() {
		group = "same"
	}
	fmt.Fprintln(f, "group", group)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		fmt.Fprintln(f, "read error", err)
		return 100
	}
	fmt.Fprint(f, "read ", line)
	fmt.Fprintln(f, "ready")
	<-ints
	n := 1
	for deadline := time.After(500 * time.Millisecond); ; {
		select {
		case <-ints:
			n++
			continue
		case <-deadline:
		}
		break
	}
	fmt.Fprintln(f, "INT", n)
	return 5
}
