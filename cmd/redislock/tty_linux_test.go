package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// In a terminal, where redislock is the foreground job, COMMAND stays in
// redislock's process group: it reads the terminal, and Ctrl-C reaches it
// once, from the terminal (redislock does not pass it on a second time).
// redislock exits with COMMAND's status and releases the lock.
func TestRun_InteractiveTerminalSharesProcessGroup(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	self, err := os.Executable()
	must(t, err)
	master, tty := openPTY(t)

	p := &proc{t: t, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, runArgs(key, nil, []string{self, marks})...)
	p.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "REDIS_URL="+testRedisURL(0), helperEnv+"=terminal")
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	// A session of its own with the terminal as its controlling one: its
	// process group is the terminal's foreground one, as a shell's job.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	must(t, p.cmd.Start())
	tty.Close()
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	drained := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, master); close(drained) }()
	defer func() { master.Close(); <-drained }()

	waitLine(t, marks, "group", 5*time.Second)
	hasLine(t, marks, "group same")
	_, err = master.Write([]byte("hello\n"))
	must(t, err)
	waitLine(t, marks, "ready", 5*time.Second)
	hasLine(t, marks, "read hello")
	_, err = master.Write([]byte{0x03}) // Ctrl-C
	must(t, err)

	equal(t, p.wait(5*time.Second), 5)
	hasLine(t, marks, "INT 1")
	check(t, !exists(t, c, key), "the lock was not released")
}

// openPTY opens a pseudo-terminal: its master, and its terminal end.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	var n uint32
	raw, err := master.SyscallConn()
	must(t, err)
	var errno syscall.Errno
	must(t, raw.Control(func(fd uintptr) {
		var unlock int32
		if _, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
			return
		}
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n)))
	}))
	if errno != 0 {
		master.Close()
		t.Fatalf("pty: %v", errno)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	return master, tty
}
