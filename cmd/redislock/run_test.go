//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// script runs a sh script as COMMAND; $1 in it is the file marks.
func script(marks, sh string) []string { return []string{"sh", "-c", sh, "sh", marks} }

// runArgs is "run" with flags, the key and "--" COMMAND.
func runArgs(key string, flags []string, command []string) []string {
	args := append([]string{"run"}, flags...)
	args = append(args, key, "--")
	return append(args, command...)
}

// marksFile returns a file name for the marks of t's commands.
func marksFile(t *testing.T) string { return filepath.Join(t.TempDir(), "marks") }

// killGroupAtEnd kills the process group pgid at the end of t: processes a
// test's command left behind.
func killGroupAtEnd(t *testing.T, pgid int) {
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
}

// pidOf returns the number after prefix on the line of file that starts
// with prefix.
func pidOf(t *testing.T, file, prefix string) int {
	t.Helper()
	for _, l := range lines(t, file) {
		if s, ok := strings.CutPrefix(l, prefix); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(s))
			must(t, err)
			return pid
		}
	}
	t.Fatalf("no %q line in %s", prefix, file)
	return 0
}

// Three runs on one key, started together, run their commands one at a
// time: the start and end marks their commands append to one file never
// interleave, although each command outlives its 1 s lease (the lease is
// renewed while it runs), and every command sees a fence larger than the
// previous one's.
func TestRun_SerializesRunsOnOneKey(t *testing.T) {
	t.Parallel()
	needRedis(t)
	marks := marksFile(t)
	cmd := script(marks, `echo "start $REDISLOCK_FENCE" >> "$1"; sleep 1.2; echo "end $REDISLOCK_FENCE" >> "$1"`)
	var ps []*proc
	for range 3 {
		ps = append(ps, start(t, runArgs(testKey(t), []string{"-ttl", "1s"}, cmd)...))
	}
	for _, p := range ps {
		equal(t, p.wait(20*time.Second), 0, "%s", p.errors())
	}
	ls := lines(t, marks)
	if len(ls) != 6 {
		t.Fatalf("marks: %q", ls)
	}
	last := 0
	for i := 0; i < len(ls); i += 2 {
		fence, ok := strings.CutPrefix(ls[i], "start ")
		check(t, ok, "marks: %q", ls)
		equal(t, ls[i+1], "end "+fence, "an interval overlaps another: %q", ls)
		f, err := strconv.Atoi(fence)
		must(t, err)
		check(t, f > last, "fences: %q", ls)
		last = f
	}
}

// COMMAND finds the key, the fence and the token in its environment: the
// fence grows from run to run, each run has a token of its own, and
// -fence-env and -token-env rename them ("" leaves one out).
func TestRun_CommandSeesKeyFenceAndToken(t *testing.T) {
	t.Parallel()
	needRedis(t)
	marks := marksFile(t)
	key := testKey(t)
	cmd := script(marks, `echo "$REDISLOCK_KEY|$REDISLOCK_FENCE|$REDISLOCK_TOKEN" >> "$1"`)
	for range 3 {
		code, _, stderr := runCLI(t, runArgs(key, nil, cmd)...)
		equal(t, code, 0, "%s", stderr)
	}
	ls := lines(t, marks)
	if len(ls) != 3 {
		t.Fatalf("marks: %q", ls)
	}
	last := 0
	tokens := map[string]bool{}
	for _, l := range ls {
		f := strings.Split(l, "|")
		if len(f) != 3 {
			t.Fatalf("marks: %q", l)
		}
		equal(t, f[0], key)
		fence, err := strconv.Atoi(f[1])
		must(t, err, "%s", l)
		check(t, fence > last, "fences: %q", ls)
		last = fence
		check(t, len(f[2]) >= 22, "token: %q", l) // 128 random bits at least
		tokens[f[2]] = true
	}
	equal(t, len(tokens), 3, "tokens: %q", ls)

	renamed := marksFile(t)
	cmd = script(renamed, `echo "${MY_FENCE-unset}|${REDISLOCK_FENCE-unset}|${REDISLOCK_TOKEN-unset}" >> "$1"`)
	code, _, stderr := runCLI(t, runArgs(key, []string{"-fence-env", "MY_FENCE", "-token-env", ""}, cmd)...)
	equal(t, code, 0, "%s", stderr)
	equal(t, strings.Join(lines(t, renamed), "\n"), strconv.Itoa(last+1)+"|unset|unset")
}

// holdKey holds key with a lock of the test process (holder "test
// holder"), released at the end of t.
func holdKey(t *testing.T, key string) *redislock.Lock {
	t.Helper()
	locker := redislock.New(client(t), redislock.WithHolder("test holder"))
	lk, err := locker.Obtain(context.Background(), key, 30*time.Second)
	must(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return lk
}

// On a held key, run -n exits at once with flock's conflict status, 1, and
// says who holds the key; -E sets another status; -w and -wait give up
// after their time with the same status: seconds, fractions allowed, as
// flock's -w (0 as -n), or a duration. A reader (-s) waits for the
// exclusive holder as a writer does. COMMAND never runs.
func TestRun_HeldKeyExitsWithConflictStatus(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	holdKey(t, key)
	marks := marksFile(t)
	cmd := script(marks, `echo ran >> "$1"`)
	for _, tc := range []struct {
		flags    []string
		want     int
		min, max time.Duration
	}{
		{[]string{"-n"}, 1, 0, 2 * time.Second},
		{[]string{"-n", "-E", "42"}, 42, 0, 2 * time.Second},
		{[]string{"-wait", "0"}, 1, 0, 2 * time.Second},
		{[]string{"-wait", "400ms"}, 1, 400 * time.Millisecond, 3 * time.Second},
		{[]string{"-wait", "400ms", "-E", "0"}, 0, 400 * time.Millisecond, 3 * time.Second},
		{[]string{"-w", "0"}, 1, 0, 2 * time.Second},
		{[]string{"-w", "0.4"}, 1, 400 * time.Millisecond, 3 * time.Second},
		{[]string{"-wait", "0.4"}, 1, 400 * time.Millisecond, 3 * time.Second},
		{[]string{"-s", "-n"}, 1, 0, 2 * time.Second},
		{[]string{"-s", "-w", "0.4", "-E", "7"}, 7, 400 * time.Millisecond, 3 * time.Second},
	} {
		p := start(t, runArgs(key, tc.flags, cmd)...)
		code := p.wait(10 * time.Second)
		took := p.ended.Sub(p.started)
		equal(t, code, tc.want, "%q: %s", tc.flags, p.errors())
		check(t, took >= tc.min && took < tc.max, "%q: took %v", tc.flags, took)
		contains(t, p.errors(), "held by test holder", "%q", tc.flags)
	}
	equal(t, len(lines(t, marks)), 0, "COMMAND ran")
}

// When the key is deleted under a running command (the lock is lost),
// COMMAND's process group gets SIGTERM within the 1 s lease, and redislock
// exits with status 75 whatever COMMAND's status (here 0), saying so on
// stderr, -q or not; the command's background child is gone too.
func TestRun_LostLockTerminatesCommand(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "1s", "-q"},
		script(marks, `trap 'echo "TERM $(date +%s.%N)" >> "$1"; exit 0' TERM; echo "started $$" >> "$1"; sleep 30 & wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	pgid := pidOf(t, marks, "started ")
	killGroupAtEnd(t, pgid)

	must(t, c.Del(context.Background(), key).Err())
	deleted := time.Now()
	code := p.wait(5 * time.Second)
	equal(t, code, exitLost, "%s", p.errors())
	contains(t, p.errors(), fmt.Sprintf("redislock: lock on %q lost", key))
	var term float64
	for _, l := range lines(t, marks) {
		if s, ok := strings.CutPrefix(l, "TERM "); ok {
			term, _ = strconv.ParseFloat(s, 64)
		}
	}
	if term == 0 {
		t.Fatalf("COMMAND got no SIGTERM: %q", lines(t, marks))
	}
	after := time.Duration((term - float64(deleted.UnixNano())/1e9) * 1e9)
	check(t, after < time.Second, "SIGTERM %v after the key was deleted", after)
	check(t, p.ended.Sub(deleted) < 2*time.Second, "redislock exited %v after the key was deleted", p.ended.Sub(deleted))
	check(t, syscall.Kill(-pgid, 0) == syscall.ESRCH, "COMMAND's process group outlived redislock")
}

// A command that ignores SIGTERM gets SIGKILL -grace after the lock was
// lost; redislock exits with status 75.
func TestRun_LostLockKillsCommandAfterGrace(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "1s", "-grace", "300ms"},
		script(marks, `trap '' TERM; echo "started $$" >> "$1"; sleep 30`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))

	must(t, c.Del(context.Background(), key).Err())
	deleted := time.Now()
	code := p.wait(5 * time.Second)
	equal(t, code, exitLost, "%s", p.errors())
	took := p.ended.Sub(deleted)
	check(t, took > 300*time.Millisecond, "SIGKILL came %v after the loss, before -grace", took)
	check(t, took < 1500*time.Millisecond, "SIGKILL came %v after the loss", took)
}

// When redislock itself is killed with SIGKILL, nothing releases the lock:
// another run obtains it once the lease left at the kill has run out (not
// before, and not much after the 1 s ttl). On Linux the orphaned command
// gets SIGTERM as redislock dies.
func TestRun_KilledRedislockFreesLockAfterTTL(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	a := start(t, runArgs(key, []string{"-ttl", "1s"},
		script(marks, `trap 'echo TERM >> "$1"; kill $!; exit 0' TERM; echo "started $$" >> "$1"; sleep 30 & wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))

	must(t, a.cmd.Process.Kill())
	a.wait(5 * time.Second)
	killed := time.Now()
	left, err := c.PTTL(context.Background(), key).Result()
	must(t, err)
	if left <= 0 {
		t.Fatalf("the key is gone at once (PTTL %v)", left)
	}

	b := start(t, runArgs(key, []string{"-ttl", "1s"}, script(marks, `echo B >> "$1"`))...)
	obtained := waitLine(t, marks, "B", 5*time.Second)
	equal(t, b.wait(5*time.Second), 0, "%s", b.errors())
	after := obtained.Sub(killed)
	check(t, after >= left-20*time.Millisecond, "obtained %v after the kill, with %v of the lease left", after, left)
	check(t, after < time.Second+700*time.Millisecond, "obtained %v after the kill", after)
	if isLinux {
		hasLine(t, marks, "TERM", "the orphaned command got no SIGTERM")
	}
}

// run exits with COMMAND's exit status, 128+N when signal N killed it,
// 127 when COMMAND is not found and 126 when it cannot be executed; after
// each, the lock is free.
func TestRun_PassesCommandExitStatus(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	must(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	for _, tc := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "exit 255"}, 255},
		{[]string{"sh", "-c", "kill -9 $$"}, 128 + 9},
		{[]string{"redislock-test-no-such-command"}, 127},
		{[]string{filepath.Join(t.TempDir(), "missing")}, 127},
		{[]string{notExec}, 126},
	} {
		code, _, stderr := runCLI(t, runArgs(key, nil, tc.cmd)...)
		equal(t, code, tc.want, "%q: %s", tc.cmd, stderr)
		check(t, !exists(t, c, key), "%q: the key is still held", tc.cmd)
	}
}

// The signals redislock gets while COMMAND runs go to COMMAND; redislock
// then exits with COMMAND's status (7 from its trap, or 128+N when the
// signal killed it) and has released the lock.
func TestRun_ForwardsSignals(t *testing.T) {
	t.Parallel()
	needRedis(t)
	for _, tc := range []struct {
		sig     syscall.Signal
		trapped bool
	}{
		{syscall.SIGTERM, true}, {syscall.SIGINT, true}, {syscall.SIGHUP, true}, {syscall.SIGQUIT, true},
		{syscall.SIGTERM, false},
	} {
		name := tc.sig.String()
		if !tc.trapped {
			name += " untrapped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := client(t)
			key := testKey(t)
			marks := marksFile(t)
			sh := `h() { echo "GOT $1" >> "$0"; kill $!; exit 7; }; trap 'h INT' INT; trap 'h TERM' TERM; trap 'h HUP' HUP; trap 'h QUIT' QUIT; `
			if !tc.trapped {
				sh = ""
			}
			// $0 is the marks file here: $1 is taken by h's argument.
			cmd := []string{"sh", "-c", sh + `echo "started $$" >> "$0"; sleep 30 & wait`, marks}
			p := start(t, runArgs(key, nil, cmd)...)
			waitLine(t, marks, "started", 5*time.Second)
			killGroupAtEnd(t, pidOf(t, marks, "started "))
			must(t, p.cmd.Process.Signal(tc.sig))
			code := p.wait(5 * time.Second)
			if tc.trapped {
				equal(t, code, 7, "%s", p.errors())
				hasLine(t, marks, "GOT "+strings.TrimPrefix(signalName(tc.sig), "SIG"))
			} else {
				equal(t, code, 128+int(tc.sig), "%s", p.errors())
			}
			check(t, !exists(t, c, key), "the lock was not released")
		})
	}
}

// signalName returns "SIGTERM" for syscall.SIGTERM, and so on.
func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return s.String()
}

// A signal while run waits for the lock ends the wait: redislock exits
// with 128+N, COMMAND never runs, and nothing of the wait is left in Redis
// (redislock waits for the Locker's clean-up, Shutdown, before it exits):
// a release right after hands the key to nobody. redislock says so on
// stderr, -q or not.
func TestRun_SignalWhileWaitingExits(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	held := holdKey(t, key)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "1s", "-q"}, script(marks, `echo ran >> "$1"`))...)
	locker := redislock.New(c)
	waitFor(t, 5*time.Second, "run waits in line", func() bool {
		info, err := locker.Inspect(context.Background(), key)
		must(t, err)
		return info.Waiting > 0
	})
	must(t, p.cmd.Process.Signal(syscall.SIGINT))
	equal(t, p.wait(5*time.Second), 128+int(syscall.SIGINT), "%s", p.errors())
	contains(t, p.errors(), "interrupt (signal 2) while waiting for the lock")

	info, err := locker.Inspect(context.Background(), key)
	must(t, err)
	equal(t, info.Waiting, 0, "places in line left when run exited")
	must(t, held.Release(context.Background()))
	check(t, !exists(t, c, key), "the key was handed to nobody")
	equal(t, len(lines(t, marks)), 0, "COMMAND ran")
}

// A Redis that cannot be reached makes run exit with status 69 at once
// (whatever -wait), without running COMMAND.
func TestRun_RedisDownExits69(t *testing.T) {
	t.Parallel()
	marks := marksFile(t)
	code, _, stderr := runCLI(t, "run", "-redis", "redis://127.0.0.1:1", "k", "--", "sh", "-c", `echo ran >> "$0"`, marks)
	equal(t, code, exitRedis, "%s", stderr)
	contains(t, stderr, "127.0.0.1:1")
	equal(t, len(lines(t, marks)), 0, "COMMAND ran")
}

// A key held in another mode than run asks for, or that holds data of
// another kind than a lock, is held: run exits with the conflict status
// (1, or -E's) and says on stderr what holds the key; COMMAND never runs.
// Where the library fails at once (Redis's WRONGTYPE: permits for a
// lock's key or for another owner's string, a lock or a reader for a
// semaphore's; a semaphore of another number of permits), which is not a Redis failure (69), run does not
// wait, whatever -w, and says so. The readers of a read-write lock hold it
// for a writer as any holder does. status shows such keys: their mode,
// holders and permits, and exits 1.
func TestRun_KeyOfAnotherKindIsAConflict(t *testing.T) {
	t.Parallel()
	c := client(t)
	marks := marksFile(t)
	cmd := script(marks, `echo ran >> "$1"`)
	semaphore, shared, exclusive, list := testKey(t)+":semaphore", testKey(t)+":shared", testKey(t)+":exclusive", testKey(t)+":list"
	locker := redislock.New(c, redislock.WithHolder("test holder"))
	for key, opts := range map[string][]redislock.Option{semaphore: {redislock.WithPermits(3)}, shared: {redislock.WithShared()}, exclusive: nil} {
		lk, err := locker.Obtain(context.Background(), key, 30*time.Second, opts...)
		must(t, err)
		t.Cleanup(func() { _ = lk.Release(context.Background()) })
	}
	must(t, c.RPush(context.Background(), list, "a").Err())
	t.Cleanup(func() { c.Del(context.Background(), list) })
	foreign := testKey(t) + ":foreign" // another owner's lock, as a semaphore meets it
	must(t, c.Set(context.Background(), foreign, "theirs", 30*time.Second).Err())
	t.Cleanup(func() { c.Del(context.Background(), foreign) })
	const atOnce = "; run does not wait for it\n"
	for _, tc := range []struct {
		key   string
		flags []string
		want  int
		says  string
	}{
		{semaphore, []string{"-n"}, 1, "the key holds a semaphore of 3 permits, not a lock, held by test holder (lease "},
		{semaphore, []string{"-n", "-E", "42"}, 42, "semaphore of 3 permits, not a lock" + ", held by test holder"},
		{semaphore, []string{"-w", "5"}, 1, "semaphore of 3 permits, not a lock"},
		{semaphore, nil, 1, atOnce},
		{semaphore, []string{"-s"}, 1, "semaphore of 3 permits, not a lock"},
		{semaphore, []string{"-permits", "5", "-w", "5"}, 1, "the key holds a semaphore of 3 permits, not 5, held by test holder"},
		{shared, []string{"-n"}, 1, "held by test holder (lease "},
		{shared, []string{"-n"}, 1, ", readers of a read-write lock\n"},
		{shared, []string{"-wait", "200ms", "-E", "42"}, 42, "held by test holder"},
		{shared, []string{"-permits", "2", "-w", "5"}, 1, "the key holds a lock, not a semaphore, held by test holder"},
		{exclusive, []string{"-permits", "2"}, 1, "the key holds a lock, not a semaphore, held by test holder (lease "},
		{list, []string{"-n"}, 1, "the key holds data of another kind than a lock\n"},
		{list, nil, 1, "data of another kind"},
		{list, []string{"-s", "-n"}, 1, "data of another kind"},
		{list, []string{"-permits", "2"}, 1, "data of another kind"},
		{foreign, []string{"-permits", "2", "-w", "5"}, 1, "the key holds a value redislock did not write (another owner's lock), not a semaphore" + atOnce},
	} {
		p := start(t, runArgs(tc.key, tc.flags, cmd)...)
		code := p.wait(10 * time.Second)
		equal(t, code, tc.want, "%s %q: %s", tc.key, tc.flags, p.errors())
		check(t, p.ended.Sub(p.started) < 3*time.Second, "%s %q: took %v", tc.key, tc.flags, p.ended.Sub(p.started))
		contains(t, p.errors(), tc.says, "%s %q", tc.key, tc.flags)
		lacks(t, p.errors(), "WRONGTYPE", "%s %q", tc.key, tc.flags)
	}
	equal(t, len(lines(t, marks)), 0, "COMMAND ran")

	for key, want := range map[string][]string{
		semaphore: {"mode:     semaphore\n", "permits:  3\n", "holder:   test holder\n"},
		shared:    {"mode:     shared\n", "holder:   test holder\n"},
	} {
		code, out, stderr := runCLI(t, "status", key)
		equal(t, code, exitConflict, "%s", stderr)
		for _, w := range want {
			contains(t, out, w, "%s", key)
		}
	}
}

// When Redis stops answering (frozen with SIGSTOP) just as COMMAND exits,
// everything redislock then does with Redis (the release, the Locker's
// clean-up, Shutdown) is bounded by one 5 s bound in total, not one bound
// per call: redislock exits with COMMAND's status (3) about 5 s after
// COMMAND exited, and says on stderr, -q or not, that the release did not
// complete and that the lease ends by itself within -ttl.
func TestRun_FrozenRedisAtExitBoundsCleanUpTo5s(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	marks := marksFile(t)
	p := startEnv(t, []string{"REDIS_URL=redis://" + srv.Addr()}, runArgs(testKey(t), []string{"-ttl", "30s", "-q"},
		script(marks, `echo "started $$" >> "$1"; while [ ! -e "$1.exit" ]; do sleep 0.01; done; exit 3`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))

	srv.Freeze(t)
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	exited := time.Now()
	code := p.wait(15 * time.Second)
	equal(t, code, 3, "%s", p.errors())
	took := p.ended.Sub(exited)
	check(t, took > endTimeout-time.Second && took < endTimeout+1500*time.Millisecond, "redislock exited %v after COMMAND", took)
	contains(t, p.errors(), "release of the lock")
	contains(t, p.errors(), "did not complete")
	contains(t, p.errors(), "the lease ends by itself within 30s")
}

// When the key stopped being this lock's while COMMAND ran and redislock
// did not notice (the key was deleted, and no renewal was due yet), and
// COMMAND then exits on its own with 0, the release finds the key no
// longer this lock's: redislock exits with 75 and says so on stderr.
func TestRun_KeyGoneAtReleaseExits75(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "30s"},
		script(marks, `echo "started $$" >> "$1"; while [ ! -e "$1.exit" ]; do sleep 0.01; done`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))
	must(t, c.Del(context.Background(), key).Err())
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	equal(t, p.wait(5*time.Second), exitLost, "%s", p.errors())
	contains(t, p.errors(), "was lost before the command exited (status 0)")
}

// SIGHUP and SIGINT that redislock was started with ignored (nohup, a
// background job of a script: "cmd &") stay ignored, by redislock, which
// neither exits on them nor passes them on, and by COMMAND, which starts
// with them ignored. (Go's runtime takes SIGQUIT and SIGTERM over whatever
// their inherited disposition, so redislock cannot tell that they were
// ignored; the README says so.) A wrapper shell ignores them, whatever
// the tests were started with (see defaultSignals).
func TestRun_IgnoredSignalsStayIgnored(t *testing.T) {
	if !isLinux {
		t.Skip("reads /proc/self/status")
	}
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	p := startVia(t, []string{"REDIS_URL=" + testRedisURL(0)}, []string{"sh", "-c", `trap '' HUP INT; exec "$0" "$@"`},
		runArgs(key, nil, script(marks, `grep SigIgn /proc/self/status >> "$1"; echo "started $$" >> "$1"; while [ ! -e "$1.exit" ]; do sleep 0.01; done; exit 4`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))
	var ignored uint64
	for _, l := range lines(t, marks) {
		if s, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			var err error
			ignored, err = strconv.ParseUint(strings.TrimSpace(s), 16, 64)
			must(t, err, "%s", l)
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		check(t, ignored&(1<<(sig-1)) != 0, "COMMAND does not ignore %v: SigIgn %x", sig, ignored)
		must(t, p.cmd.Process.Signal(sig))
	}
	time.Sleep(100 * time.Millisecond)
	check(t, p.running(), "redislock exited on an ignored signal: %s", p.errors())
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	equal(t, p.wait(5*time.Second), 4, "%s", p.errors())
	check(t, !exists(t, c, key))
}

// With -q, a lock not obtained because the key is held says nothing: no
// line on stderr or stdout, whether run waited (-w) or not (-n), whatever
// the exit status (-E 0: a cron job skipped in silence), and in any mode
// (a reader, permits on a lock's key). What -q leaves is still reported:
// a key that holds data of another kind than a lock (no wait ends that),
// a Redis that cannot be reached (69), a bad command line (2).
func TestRun_QuietSaysNothingOnConflict(t *testing.T) {
	t.Parallel()
	c := client(t)
	key, list := testKey(t), testKey(t)+":list"
	holdKey(t, key)
	must(t, c.RPush(context.Background(), list, "a").Err())
	t.Cleanup(func() { c.Del(context.Background(), list) })
	marks := marksFile(t)
	cmd := script(marks, `echo ran >> "$1"`)
	for _, tc := range []struct {
		key   string
		flags []string
		want  int
		says  string // "": nothing on stderr
	}{
		{key, []string{"-n", "-q", "-E", "0"}, 0, ""},
		{key, []string{"-q", "-w", "0.3"}, 1, ""},
		{key, []string{"-q", "-s", "-n"}, 1, ""},
		{key, []string{"-q", "-permits", "2"}, 1, ""},
		{list, []string{"-q", "-n", "-E", "0"}, 0, "redislock: lock on \"" + list + "\" not obtained: the key holds data of another kind than a lock\n"},
		{key, []string{"-q", "-n", "-redis", "redis://127.0.0.1:1"}, exitRedis, "redis redis://127.0.0.1:1: "},
		{key, []string{"-q", "-n", "-ttl", "0"}, exitUsage, "-ttl 0s: must be at least 1ms"},
	} {
		p := start(t, runArgs(tc.key, tc.flags, cmd)...)
		code := p.wait(10 * time.Second)
		equal(t, code, tc.want, "%q: %s", tc.flags, p.errors())
		equal(t, p.output(), "", "%q: stdout", tc.flags)
		if tc.says == "" {
			equal(t, p.errors(), "", "%q: stderr", tc.flags)
		} else {
			contains(t, p.errors(), tc.says, "%q", tc.flags)
		}
	}
	equal(t, len(lines(t, marks)), 0, "COMMAND ran")
}

// waitInLine waits up to 5 s for status to show one place in key's line.
func waitInLine(t *testing.T, key string) {
	t.Helper()
	waitFor(t, 5*time.Second, "a run waits in line", func() bool {
		_, out, _ := runCLI(t, "status", key)
		return strings.Contains(out, "waiting:  1\n")
	})
}

// waitForExit is a COMMAND that writes "start NAME" to marks, waits for
// the file marks.exit, and writes "end NAME".
func waitForExit(marks, name string) []string {
	return []string{"sh", "-c", `echo "start $0" >> "$1"; while [ ! -e "$1.exit" ]; do sleep 0.01; done; echo "end $0" >> "$1"`, name, marks}
}

// Runs with -s hold the key together, as the readers of a read-write lock:
// a second reader starts while the first still runs; a run without -s (a
// writer) does not get the key while they hold it (-n: the conflict
// status), and waits for both to end before its command starts. status
// shows the readers (mode shared, two holders) and exits 1.
func TestRun_SharedRunsHoldKeyTogether(t *testing.T) {
	t.Parallel()
	needRedis(t)
	key := testKey(t)
	marks := marksFile(t)
	a := start(t, runArgs(key, []string{"-s"}, waitForExit(marks, "A"))...)
	b := start(t, runArgs(key, []string{"-s", "-n"}, waitForExit(marks, "B"))...)
	waitLine(t, marks, "start A", 5*time.Second)
	waitLine(t, marks, "start B", 5*time.Second)

	code, out, stderr := runCLI(t, "status", key)
	equal(t, code, exitConflict, "%s", stderr)
	contains(t, out, "mode:     shared\n")
	equal(t, strings.Count(out, "\nholder:   "), 2, "%s", out)

	code, _, stderr = runCLI(t, runArgs(key, []string{"-n"}, waitForExit(marks, "C"))...)
	equal(t, code, exitConflict, "%s", stderr)
	contains(t, stderr, ", readers of a read-write lock")

	w := start(t, runArgs(key, nil, script(marks, `echo W >> "$1"`))...)
	waitInLine(t, key)
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	for _, p := range []*proc{a, b, w} {
		equal(t, p.wait(5*time.Second), 0, "%s", p.errors())
	}
	ls := lines(t, marks)
	equal(t, ls[len(ls)-1], "W", "the writer ran before the readers ended: %q", ls)
	equal(t, len(ls), 5, "%q", ls) // start A, start B, end A, end B, W
}

// -permits N makes KEY a semaphore: N runs hold it at once, a run more
// does not get it (-n: the conflict status, saying who holds it); status
// shows the semaphore (its permits and holders) and exits 1; once a
// holder ends, a waiting run gets its permit.
func TestRun_PermitsLetNRunsHoldKey(t *testing.T) {
	t.Parallel()
	needRedis(t)
	key := testKey(t)
	marks := marksFile(t)
	a := start(t, runArgs(key, []string{"-permits", "2"}, waitForExit(marks, "A"))...)
	b := start(t, runArgs(key, []string{"-permits", "2"}, waitForExit(marks, "B"))...)
	waitLine(t, marks, "start A", 5*time.Second)
	waitLine(t, marks, "start B", 5*time.Second)

	code, _, stderr := runCLI(t, runArgs(key, []string{"-permits", "2", "-n"}, waitForExit(marks, "C"))...)
	equal(t, code, exitConflict, "%s", stderr)
	contains(t, stderr, " and 1 more")
	code, out, stderr := runCLI(t, "status", key)
	equal(t, code, exitConflict, "%s", stderr)
	contains(t, out, "mode:     semaphore\npermits:  2\n")
	equal(t, strings.Count(out, "\nholder:   "), 2, "%s", out)

	d := start(t, runArgs(key, []string{"-permits", "2"}, script(marks, `echo D >> "$1"`))...)
	waitInLine(t, key)
	check(t, !slices.Contains(lines(t, marks), "D"), "a third run got one of 2 permits")
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	for _, p := range []*proc{a, b, d} {
		equal(t, p.wait(5*time.Second), 0, "%s", p.errors())
	}
	hasLine(t, marks, "D")
}

// -c runs its command line with /bin/sh -c, as flock -c does: shell syntax
// works (a pipe, ;), the environment has the key, and run exits with the
// command line's status.
func TestRun_ShellCommandLine(t *testing.T) {
	t.Parallel()
	needRedis(t)
	key := testKey(t)
	marks := marksFile(t)
	code, _, stderr := runCLI(t, "run", key, "-c", `echo "$REDISLOCK_KEY" | tr a-z A-Z >> '`+marks+`'; exit 3`)
	equal(t, code, 3, "%s", stderr)
	hasLine(t, marks, strings.ToUpper(key))
}

// storedText returns every text that c's Redis holds under keys with key
// in their name (the lock's and those the library keeps beside it):
// strings, hash fields and values, members of sets and sorted sets, list
// items.
func storedText(t *testing.T, c *redis.Client, key string) []string {
	t.Helper()
	ctx := context.Background()
	names, err := c.Keys(ctx, "*"+key+"*").Result()
	must(t, err)
	texts := names
	for _, name := range names {
		var values []string
		switch typ := c.Type(ctx, name).Val(); typ {
		case "string":
			values = []string{c.Get(ctx, name).Val()}
		case "hash":
			for f, v := range c.HGetAll(ctx, name).Val() {
				values = append(values, f, v)
			}
		case "zset":
			values = c.ZRange(ctx, name, 0, -1).Val()
		case "set":
			values = c.SMembers(ctx, name).Val()
		case "list":
			values = c.LRange(ctx, name, 0, -1).Val()
		default:
			t.Fatalf("%s: a %s", name, typ)
		}
		texts = append(texts, values...)
	}
	return texts
}

// The holder description that run stores, readable by every client of the
// Redis, names the program (COMMAND's file name, not its arguments), the
// host and redislock's pid: nothing of the command's arguments is stored
// in Redis. -holder stores a text of the operator's choosing ("" none),
// -holder-command the whole command line; status shows each.
func TestRun_HolderDescription(t *testing.T) {
	t.Parallel()
	c := client(t)
	host, err := os.Hostname()
	must(t, err)
	const secret = "--password=S3cr3tArgument"
	const sh = `echo "started $$" >> "$2"; while [ ! -e "$2.exit" ]; do sleep 0.01; done`
	for i, tc := range []struct {
		flags []string
		want  string // the holder line of status; PID is redislock's pid
	}{
		{nil, "redislock run sh on " + host + " pid PID"},
		{[]string{"-holder", "nightly report, ask ops"}, "nightly report, ask ops"},
		{[]string{"-holder", ""}, "(no description)"},
		// The whole command line, cut to 200 bytes before " on HOST...".
		{[]string{"-holder-command"}, "redislock run sh -c " + sh + " sh " + secret + " "},
	} {
		key := testKey(t) + ":" + strconv.Itoa(i)
		marks := marksFile(t)
		p := start(t, runArgs(key, tc.flags, []string{"sh", "-c", sh, "sh", secret, marks})...)
		waitLine(t, marks, "started", 5*time.Second)
		killGroupAtEnd(t, pidOf(t, marks, "started "))
		want := strings.ReplaceAll(tc.want, "PID", strconv.Itoa(p.cmd.Process.Pid))

		code, out, stderr := runCLI(t, "status", key)
		equal(t, code, exitConflict, "%q: %s", tc.flags, stderr)
		_, holder, _ := strings.Cut(out, "\nholder:   ")
		holder, _, _ = strings.Cut(holder, "\n")
		if tc.flags != nil && tc.flags[0] == "-holder-command" {
			tail := fmt.Sprintf(" on %s pid %d", host, p.cmd.Process.Pid)
			check(t, strings.HasPrefix(holder, want) && strings.HasSuffix(holder, tail), "holder %q, want %q...%q", holder, want, tail)
		} else {
			equal(t, holder, want, "%q", tc.flags)
		}
		if tc.flags == nil {
			for _, s := range storedText(t, c, key) {
				lacks(t, s, "S3cr3t", "stored in Redis")
			}
		}
		must(t, os.WriteFile(marks+".exit", nil, 0o644))
		equal(t, p.wait(5*time.Second), 0, "%q: %s", tc.flags, p.errors())
	}
}

// setArgs is "run" with flags, the keys and "--" COMMAND.
func setArgs(keys []string, flags []string, command []string) []string {
	args := append([]string{"run"}, flags...)
	args = append(args, keys...)
	args = append(args, "--")
	return append(args, command...)
}

// testKeys returns n keys of their own for t: KEY:a, KEY:b, ...
func testKeys(t *testing.T, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = testKey(t) + ":" + string(rune('a'+i))
	}
	return keys
}

// A run on several keys holds every one of them, with its token, while
// COMMAND runs (GET of each, from outside, is the token COMMAND got), and
// none once it exited. COMMAND finds the keys in REDISLOCK_KEYS and their
// fences in REDISLOCK_FENCES, one a line in the order given (not the
// order of the keys' names); REDISLOCK_KEY and REDISLOCK_FENCE are the
// first key's. Each key's fence grows from run to run. A run on one key
// sets the lists too, to its key and fence.
func TestRun_SetHoldsEveryKeyWhileCommandRuns(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	k := testKeys(t, 3)
	keys := []string{k[2], k[0], k[1]}
	env := `printf 'key=%s\nfence=%s\ntoken=%s\n%s\n%s\n' "$REDISLOCK_KEY" "$REDISLOCK_FENCE" "$REDISLOCK_TOKEN" "$REDISLOCK_KEYS" "$REDISLOCK_FENCES" > "$1.env"; `
	hold := `echo "started $$" >> "$1"; while [ ! -e "$1.exit" ]; do sleep 0.01; done`
	var last []int
	for run := range 2 {
		marks := marksFile(t)
		p := start(t, setArgs(keys, nil, script(marks, env+hold))...)
		waitLine(t, marks, "started", 5*time.Second)
		killGroupAtEnd(t, pidOf(t, marks, "started "))
		ls := lines(t, marks+".env")
		if len(ls) != 3+2*len(keys) {
			t.Fatalf("environment: %q", ls)
		}
		token, _ := strings.CutPrefix(ls[2], "token=")
		check(t, strings.HasPrefix(token, "rl1:"), "token: %q", ls[2])
		equal(t, strings.Join(ls[3:3+len(keys)], " "), strings.Join(keys, " "), "REDISLOCK_KEYS")
		var fences []int
		for i, f := range ls[3+len(keys):] {
			n, err := strconv.Atoi(f)
			must(t, err, "REDISLOCK_FENCES: %q", ls)
			if run > 0 {
				check(t, n > last[i], "%s: fence %d after %d", keys[i], n, last[i])
			}
			fences = append(fences, n)
		}
		last = fences
		equal(t, ls[0], "key="+keys[0])
		equal(t, ls[1], "fence="+strconv.Itoa(fences[0]))
		for _, key := range keys {
			got, err := c.Get(ctx, key).Result()
			must(t, err, "GET %s while the command runs", key)
			equal(t, got, token, "GET %s", key)
		}
		must(t, os.WriteFile(marks+".exit", nil, 0o644))
		equal(t, p.wait(5*time.Second), 0, "%s", p.errors())
		for _, key := range keys {
			check(t, !exists(t, c, key), "%s held after the run", key)
		}
	}

	marks := marksFile(t)
	code, _, stderr := runCLI(t, runArgs(keys[1], nil, script(marks, `echo "$REDISLOCK_KEYS|$REDISLOCK_FENCES|$REDISLOCK_FENCE" >> "$1"`))...)
	equal(t, code, 0, "%s", stderr)
	f := strconv.Itoa(last[1] + 1)
	equal(t, strings.Join(lines(t, marks), "\n"), keys[1]+"|"+f+"|"+f, "one key's lists")
}

// A run on a set that overlaps a running set's: with -n it exits at once
// with the conflict status (-E's), naming the key that is held and its
// holder, and -q makes that silent; with -w it gives up after its time;
// without, it waits in the line of the key that is held, keeping the key
// nobody holds (handed to it in its turn, as the library's waiting sets
// are), and runs once the first set's command exited. A waiting run that a
// signal ends leaves nothing in Redis, the key it kept included. COMMAND
// never runs while it does not hold every key.
func TestRun_OverlappingSetWaitsThenRuns(t *testing.T) {
	t.Parallel()
	c := client(t)
	k := testKeys(t, 3)
	marks := marksFile(t)
	first := start(t, setArgs([]string{k[0], k[1]}, []string{"-holder", "first set"}, waitForExit(marks, "A"))...)
	waitLine(t, marks, "start A", 5*time.Second)
	overlapping := []string{k[2], k[1]}

	for _, tc := range []struct {
		flags    []string
		want     int
		min, max time.Duration
		says     string // "": nothing on stderr
	}{
		{[]string{"-n"}, 1, 0, 2 * time.Second, fmt.Sprintf("redislock: lock on the set %q, %q not obtained: %q: held by first set (lease ", k[2], k[1], k[1])},
		{[]string{"-n", "-E", "42"}, 42, 0, 2 * time.Second, "held by first set"},
		{[]string{"-n", "-q"}, 1, 0, 2 * time.Second, ""},
		{[]string{"-w", "0.4"}, 1, 400 * time.Millisecond, 3 * time.Second, "held by first set"},
		{[]string{"-s", "-n"}, 1, 0, 2 * time.Second, "held by first set"},
	} {
		p := start(t, setArgs(overlapping, tc.flags, script(marks, `echo ran >> "$1"`))...)
		code := p.wait(10 * time.Second)
		took := p.ended.Sub(p.started)
		equal(t, code, tc.want, "%q: %s", tc.flags, p.errors())
		check(t, took >= tc.min && took < tc.max, "%q: took %v", tc.flags, took)
		if tc.says == "" {
			equal(t, p.errors(), "", "%q: stderr", tc.flags)
		} else {
			contains(t, p.errors(), tc.says, "%q", tc.flags)
		}
	}

	interrupted := start(t, setArgs([]string{k[1], k[2]}, nil, script(marks, `echo ran >> "$1"`))...)
	waitInLine(t, k[1])
	must(t, interrupted.cmd.Process.Signal(syscall.SIGTERM))
	equal(t, interrupted.wait(5*time.Second), 128+int(syscall.SIGTERM), "%s", interrupted.errors())

	second := start(t, setArgs(overlapping, nil, waitForExit(marks, "B"))...)
	waitInLine(t, k[1])
	check(t, exists(t, c, k[2]), "the waiting set does not keep %s, a key nobody else holds", k[2])
	check(t, second.running(), "the waiting set exited: %s", second.errors())
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	equal(t, first.wait(5*time.Second), 0, "%s", first.errors())
	equal(t, second.wait(5*time.Second), 0, "%s", second.errors())
	equal(t, strings.Join(lines(t, marks), ","), "start A,end A,start B,end B")
	for _, key := range k {
		code, out, stderr := runCLI(t, "status", key)
		equal(t, code, exitFree, "%s: %s", key, stderr)
		contains(t, out, "waiting:  0\n", "places left in %s's line", key)
	}
}

// Runs on sets in opposite orders (a b, b a) and runs on single keys of
// them, started together, all run to their end without deadlock, and no
// two that share a key run their commands at once.
func TestRun_SetsInAnyOrderDoNotDeadlock(t *testing.T) {
	t.Parallel()
	needRedis(t)
	k := testKeys(t, 2)
	marks := marksFile(t)
	runs := map[string][]string{"AB": {k[0], k[1]}, "BA": {k[1], k[0]}, "A": {k[0]}, "B": {k[1]}, "AB2": {k[0], k[1]}, "BA2": {k[1], k[0]}}
	var ps []*proc
	for name, keys := range runs {
		ps = append(ps, start(t, setArgs(keys, []string{"-ttl", "2s"},
			script(marks, `echo "start `+name+`" >> "$1"; sleep 0.2; echo "end `+name+`" >> "$1"`))...))
	}
	for _, p := range ps {
		equal(t, p.wait(20*time.Second), 0, "%s", p.errors())
	}
	ls := lines(t, marks)
	equal(t, len(ls), 2*len(runs), "marks: %q", ls)
	running := map[string]bool{}
	for _, l := range ls {
		what, name, _ := strings.Cut(l, " ")
		if what == "end" {
			delete(running, name)
			continue
		}
		for other := range running {
			for _, key := range runs[name] {
				check(t, !slices.Contains(runs[other], key), "%s started while %s held %s: %q", name, other, key, ls)
			}
		}
		running[name] = true
	}
}

// Reader sets (-s) hold their keys together with other readers, sets or
// single keys, while a writer on one of their keys does not get it (-n:
// the conflict status, naming the readers).
func TestRun_SharedSetSharesKeysWithReaders(t *testing.T) {
	t.Parallel()
	needRedis(t)
	k := testKeys(t, 2)
	marks := marksFile(t)
	a := start(t, setArgs(k, []string{"-s"}, waitForExit(marks, "A"))...)
	waitLine(t, marks, "start A", 5*time.Second)
	for _, keys := range [][]string{{k[1], k[0]}, {k[1]}} {
		code, _, stderr := runCLI(t, setArgs(keys, []string{"-s", "-n"}, script(marks, `echo reader >> "$1"`))...)
		equal(t, code, 0, "%q: %s", keys, stderr)
	}
	code, _, stderr := runCLI(t, runArgs(k[1], []string{"-n"}, script(marks, `echo writer >> "$1"`))...)
	equal(t, code, exitConflict, "%s", stderr)
	contains(t, stderr, ", readers of a read-write lock")
	must(t, os.WriteFile(marks+".exit", nil, 0o644))
	equal(t, a.wait(5*time.Second), 0, "%s", a.errors())
	equal(t, strings.Join(lines(t, marks), ","), "start A,reader,reader,end A")
}

// A set one of whose keys holds a semaphore's permits or data of another
// kind than a lock is a conflict at once, whatever -w (the library does
// not wait for those): the conflict status, naming that key and what it
// holds, -q or not for data of another kind. The set's other keys are
// left free, with nobody in their lines.
func TestRun_SetWithKeyOfAnotherKindIsAConflict(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	k := testKeys(t, 3)
	free, semaphore, list := k[0], k[1], k[2]
	lk, err := redislock.New(c, redislock.WithHolder("test holder")).Obtain(ctx, semaphore, 30*time.Second, redislock.WithPermits(3))
	must(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	must(t, c.RPush(ctx, list, "a").Err())
	t.Cleanup(func() { c.Del(context.Background(), list) })
	marks := marksFile(t)
	for _, tc := range []struct {
		keys  []string
		flags []string
		want  int
		says  string
	}{
		{[]string{free, semaphore}, []string{"-w", "5"}, 1, fmt.Sprintf("%q: the key holds a semaphore of 3 permits, not a lock, held by test holder (lease ", semaphore)},
		{[]string{free, semaphore}, []string{"-s", "-E", "42"}, 42, "; run does not wait for it\n"},
		{[]string{free, list}, []string{"-w", "5"}, 1, fmt.Sprintf("%q: the key holds data of another kind than a lock\n", list)},
		{[]string{free, list}, []string{"-q", "-n"}, 1, "data of another kind"},
		{[]string{free, semaphore, list}, nil, 1, fmt.Sprintf("%q: the key holds data of another kind", list)},
	} {
		p := start(t, setArgs(tc.keys, tc.flags, script(marks, `echo ran >> "$1"`))...)
		code := p.wait(10 * time.Second)
		equal(t, code, tc.want, "%q %q: %s", tc.keys, tc.flags, p.errors())
		check(t, p.ended.Sub(p.started) < 3*time.Second, "%q %q: took %v", tc.keys, tc.flags, p.ended.Sub(p.started))
		contains(t, p.errors(), tc.says, "%q %q", tc.keys, tc.flags)
	}
	equal(t, len(lines(t, marks)), 0, "COMMAND ran")
	code, out, stderr := runCLI(t, "status", free)
	equal(t, code, exitFree, "%s", stderr)
	contains(t, out, "waiting:  0\n")
}

// Losing any key of a set is losing the lock: when one key of a running
// set is deleted, COMMAND gets SIGTERM within the 1 s lease and redislock
// exits with 75, naming the set; the set's other keys are released.
func TestRun_SetLostKeyTerminatesCommand(t *testing.T) {
	t.Parallel()
	c := client(t)
	k := testKeys(t, 2)
	marks := marksFile(t)
	p := start(t, setArgs(k, []string{"-ttl", "1s"},
		script(marks, `trap 'echo TERM >> "$1"; exit 0' TERM; echo "started $$" >> "$1"; sleep 30 & wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))

	must(t, c.Del(context.Background(), k[1]).Err())
	deleted := time.Now()
	equal(t, p.wait(5*time.Second), exitLost, "%s", p.errors())
	contains(t, p.errors(), fmt.Sprintf("redislock: lock on the set %q, %q lost", k[0], k[1]))
	hasLine(t, marks, "TERM")
	check(t, p.ended.Sub(deleted) < 2*time.Second, "redislock exited %v after the key was deleted", p.ended.Sub(deleted))
	check(t, !exists(t, c, k[0]), "the key not lost is still held")
}
