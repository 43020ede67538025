//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			require.NoError(t, err)
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
		require.Equal(t, 0, p.wait(20*time.Second), p.errors())
	}
	ls := lines(t, marks)
	require.Len(t, ls, 6, "marks: %q", ls)
	last := 0
	for i := 0; i < len(ls); i += 2 {
		fence, ok := strings.CutPrefix(ls[i], "start ")
		require.True(t, ok, "marks: %q", ls)
		require.Equal(t, "end "+fence, ls[i+1], "an interval overlaps another: %q", ls)
		f, err := strconv.Atoi(fence)
		require.NoError(t, err)
		assert.Greater(t, f, last, "fences: %q", ls)
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
		require.Equal(t, 0, code, stderr)
	}
	ls := lines(t, marks)
	require.Len(t, ls, 3)
	last := 0
	tokens := map[string]bool{}
	for _, l := range ls {
		f := strings.Split(l, "|")
		require.Len(t, f, 3, l)
		assert.Equal(t, key, f[0])
		fence, err := strconv.Atoi(f[1])
		require.NoError(t, err, l)
		assert.Greater(t, fence, last, "fences: %q", ls)
		last = fence
		assert.GreaterOrEqual(t, len(f[2]), 22, "token: %q", l) // 128 random bits at least
		tokens[f[2]] = true
	}
	assert.Len(t, tokens, 3, "tokens: %q", ls)

	renamed := marksFile(t)
	cmd = script(renamed, `echo "${MY_FENCE-unset}|${REDISLOCK_FENCE-unset}|${REDISLOCK_TOKEN-unset}" >> "$1"`)
	code, _, stderr := runCLI(t, runArgs(key, []string{"-fence-env", "MY_FENCE", "-token-env", ""}, cmd)...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, []string{strconv.Itoa(last+1) + "|unset|unset"}, lines(t, renamed))
}

// holdKey holds key with a lock of the test process (holder "test
// holder"), released at the end of t.
func holdKey(t *testing.T, key string) *redislock.Lock {
	t.Helper()
	locker := redislock.New(client(t), redislock.WithHolder("test holder"))
	lk, err := locker.Obtain(context.Background(), key, 30*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return lk
}

// On a held key, run -n exits at once with flock's conflict status, 1, and
// says who holds the key; -E sets another status; -wait gives up after its
// duration with the same status. COMMAND never runs.
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
	} {
		p := start(t, runArgs(key, tc.flags, cmd)...)
		code := p.wait(10 * time.Second)
		took := p.ended.Sub(p.started)
		assert.Equal(t, tc.want, code, "%q: %s", tc.flags, p.errors())
		assert.GreaterOrEqual(t, took, tc.min, "%q", tc.flags)
		assert.Less(t, took, tc.max, "%q", tc.flags)
		assert.Contains(t, p.errors(), "held by test holder", "%q", tc.flags)
	}
	assert.Empty(t, lines(t, marks), "COMMAND ran")
}

// When the key is deleted under a running command (the lock is lost),
// COMMAND's process group gets SIGTERM within the 1 s lease, and redislock
// exits with status 75 whatever COMMAND's status (here 0); the command's
// background child is gone too.
func TestRun_LostLockTerminatesCommand(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "1s"},
		script(marks, `trap 'echo "TERM $(date +%s.%N)" >> "$1"; exit 0' TERM; echo "started $$" >> "$1"; sleep 30 & wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	pgid := pidOf(t, marks, "started ")
	killGroupAtEnd(t, pgid)

	require.NoError(t, c.Del(context.Background(), key).Err())
	deleted := time.Now()
	code := p.wait(5 * time.Second)
	assert.Equal(t, exitLost, code, p.errors())
	assert.Contains(t, p.errors(), "lost")
	var term float64
	for _, l := range lines(t, marks) {
		if s, ok := strings.CutPrefix(l, "TERM "); ok {
			term, _ = strconv.ParseFloat(s, 64)
		}
	}
	require.NotZero(t, term, "COMMAND got no SIGTERM: %q", lines(t, marks))
	after := time.Duration((term - float64(deleted.UnixNano())/1e9) * 1e9)
	assert.Less(t, after, time.Second, "SIGTERM %v after the key was deleted", after)
	assert.Less(t, p.ended.Sub(deleted), 2*time.Second, "redislock exited %v after the key was deleted", p.ended.Sub(deleted))
	assert.Equal(t, syscall.ESRCH, syscall.Kill(-pgid, 0), "COMMAND's process group outlived redislock")
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

	require.NoError(t, c.Del(context.Background(), key).Err())
	deleted := time.Now()
	code := p.wait(5 * time.Second)
	assert.Equal(t, exitLost, code, p.errors())
	took := p.ended.Sub(deleted)
	assert.Greater(t, took, 300*time.Millisecond, "SIGKILL came before -grace")
	assert.Less(t, took, 1500*time.Millisecond)
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

	require.NoError(t, a.cmd.Process.Kill())
	a.wait(5 * time.Second)
	killed := time.Now()
	left, err := c.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	require.Greater(t, left, time.Duration(0), "the key is gone at once")

	b := start(t, runArgs(key, []string{"-ttl", "1s"}, script(marks, `echo B >> "$1"`))...)
	obtained := waitLine(t, marks, "B", 5*time.Second)
	require.Equal(t, 0, b.wait(5*time.Second), b.errors())
	after := obtained.Sub(killed)
	assert.GreaterOrEqual(t, after, left-20*time.Millisecond, "obtained %v after the kill, with %v of the lease left", after, left)
	assert.Less(t, after, time.Second+700*time.Millisecond, "obtained %v after the kill", after)
	if isLinux {
		assert.Contains(t, lines(t, marks), "TERM", "the orphaned command got no SIGTERM")
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
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
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
		assert.Equal(t, tc.want, code, "%q: %s", tc.cmd, stderr)
		assert.False(t, exists(t, c, key), "%q: the key is still held", tc.cmd)
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
			require.NoError(t, p.cmd.Process.Signal(tc.sig))
			code := p.wait(5 * time.Second)
			if tc.trapped {
				assert.Equal(t, 7, code, p.errors())
				assert.Contains(t, lines(t, marks), "GOT "+strings.TrimPrefix(signalName(tc.sig), "SIG"))
			} else {
				assert.Equal(t, 128+int(tc.sig), code, p.errors())
			}
			assert.False(t, exists(t, c, key), "the lock was not released")
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
// a release right after hands the key to nobody.
func TestRun_SignalWhileWaitingExits(t *testing.T) {
	t.Parallel()
	c := client(t)
	key := testKey(t)
	held := holdKey(t, key)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "1s"}, script(marks, `echo ran >> "$1"`))...)
	locker := redislock.New(c)
	waitFor(t, 5*time.Second, "run waits in line", func() bool {
		info, err := locker.Inspect(context.Background(), key)
		require.NoError(t, err)
		return info.Waiting > 0
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 128+int(syscall.SIGINT), p.wait(5*time.Second), p.errors())
	assert.Contains(t, p.errors(), "interrupt (signal 2) while waiting for the lock")

	info, err := locker.Inspect(context.Background(), key)
	require.NoError(t, err)
	assert.Zero(t, info.Waiting, "the place in line is gone when run exits")
	require.NoError(t, held.Release(context.Background()))
	assert.False(t, exists(t, c, key), "the key was handed to nobody")
	assert.Empty(t, lines(t, marks), "COMMAND ran")
}

// A Redis that cannot be reached makes run exit with status 69 at once
// (whatever -wait), without running COMMAND.
func TestRun_RedisDownExits69(t *testing.T) {
	t.Parallel()
	marks := marksFile(t)
	code, _, stderr := runCLI(t, "run", "-redis", "redis://127.0.0.1:1", "k", "--", "sh", "-c", `echo ran >> "$0"`, marks)
	assert.Equal(t, exitRedis, code, stderr)
	assert.Contains(t, stderr, "127.0.0.1:1")
	assert.Empty(t, lines(t, marks))
}

// A key held as a semaphore (WithPermits) or by the readers of a
// read-write lock (WithShared) is held: run exits with the conflict status
// (1, or -E's) and says on stderr what holds the key, whether it would
// wait (-wait, or by default) or not (-n); COMMAND never runs. On a
// semaphore the library's exclusive Obtain gets Redis's WRONGTYPE, which
// is not a Redis failure (69): the key holds another kind of lock, and
// redislock cannot wait in a semaphore's line, so it gives up at once.
// status shows such keys: their mode, holders and permits.
func TestRun_KeyOfAnotherKindIsAConflict(t *testing.T) {
	t.Parallel()
	c := client(t)
	marks := marksFile(t)
	cmd := script(marks, `echo ran >> "$1"`)
	semaphore, shared := testKey(t)+":semaphore", testKey(t)+":shared"
	locker := redislock.New(c, redislock.WithHolder("test holder"))
	for key, opt := range map[string]redislock.Option{semaphore: redislock.WithPermits(3), shared: redislock.WithShared()} {
		lk, err := locker.Obtain(context.Background(), key, 30*time.Second, opt)
		require.NoError(t, err)
		t.Cleanup(func() { _ = lk.Release(context.Background()) })
	}
	for _, tc := range []struct {
		key   string
		flags []string
		want  int
		says  string
	}{
		{semaphore, []string{"-n"}, 1, "semaphore of 3 permits"},
		{semaphore, []string{"-n", "-E", "42"}, 42, "semaphore of 3 permits"},
		{semaphore, []string{"-wait", "5s"}, 1, "semaphore of 3 permits"},
		{semaphore, nil, 1, "semaphore of 3 permits"},
		{shared, []string{"-n"}, 1, "held by test holder"},
		{shared, []string{"-wait", "200ms", "-E", "42"}, 42, "held by test holder"},
	} {
		p := start(t, runArgs(tc.key, tc.flags, cmd)...)
		code := p.wait(10 * time.Second)
		assert.Equal(t, tc.want, code, "%s %q: %s", tc.key, tc.flags, p.errors())
		assert.Less(t, p.ended.Sub(p.started), 3*time.Second, "%s %q", tc.key, tc.flags)
		assert.Contains(t, p.errors(), tc.says, "%s %q", tc.key, tc.flags)
		assert.NotContains(t, p.errors(), "WRONGTYPE", "%s %q", tc.key, tc.flags)
	}
	assert.Empty(t, lines(t, marks), "COMMAND ran")

	for key, want := range map[string][]string{
		semaphore: {"mode:     semaphore\n", "permits:  3\n", "holder:   test holder\n"},
		shared:    {"mode:     shared\n", "holder:   test holder\n"},
	} {
		code, out, stderr := runCLI(t, "status", key)
		require.Equal(t, 0, code, stderr)
		for _, w := range want {
			assert.Contains(t, out, w, key)
		}
	}
}

// When Redis stops answering (frozen with SIGSTOP) just as COMMAND exits,
// everything redislock then does with Redis (the release, the Locker's
// clean-up, Shutdown) is bounded by one 5 s bound in total, not one bound
// per call: redislock exits with COMMAND's status (3) about 5 s after
// COMMAND exited, and says on stderr that the release did not complete and
// that the lease ends by itself within -ttl.
func TestRun_FrozenRedisAtExitBoundsCleanUpTo5s(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	marks := marksFile(t)
	p := startEnv(t, []string{"REDIS_URL=redis://" + srv.Addr()}, runArgs(testKey(t), []string{"-ttl", "30s"},
		script(marks, `echo "started $$" >> "$1"; while [ ! -e "$1.exit" ]; do sleep 0.01; done; exit 3`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))

	srv.Freeze(t)
	require.NoError(t, os.WriteFile(marks+".exit", nil, 0o644))
	exited := time.Now()
	code := p.wait(15 * time.Second)
	assert.Equal(t, 3, code, p.errors())
	took := p.ended.Sub(exited)
	assert.Less(t, took, endTimeout+1500*time.Millisecond, "redislock exited %v after COMMAND", took)
	assert.Greater(t, took, endTimeout-time.Second, "redislock exited %v after COMMAND", took)
	assert.Contains(t, p.errors(), "release of the lock")
	assert.Contains(t, p.errors(), "did not complete")
	assert.Contains(t, p.errors(), "the lease ends by itself within 30s")
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
	require.NoError(t, c.Del(context.Background(), key).Err())
	require.NoError(t, os.WriteFile(marks+".exit", nil, 0o644))
	assert.Equal(t, exitLost, p.wait(5*time.Second), p.errors())
	assert.Contains(t, p.errors(), "was lost before the command exited (status 0)")
}

// SIGHUP and SIGINT that redislock was started with ignored (nohup, a
// background job of a script: "cmd &") stay ignored, by redislock, which
// neither exits on them nor passes them on, and by COMMAND, which starts
// with them ignored. (Go's runtime takes SIGQUIT and SIGTERM over whatever
// their inherited disposition, so redislock cannot tell that they were
// ignored; the README says so.)
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
			require.NoError(t, err, l)
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		assert.NotZero(t, ignored&(1<<(sig-1)), "COMMAND does not ignore %v: SigIgn %x", sig, ignored)
		require.NoError(t, p.cmd.Process.Signal(sig))
	}
	time.Sleep(100 * time.Millisecond)
	assert.True(t, p.running(), "redislock exited on an ignored signal: %s", p.errors())
	require.NoError(t, os.WriteFile(marks+".exit", nil, 0o644))
	assert.Equal(t, 4, p.wait(5*time.Second), p.errors())
	assert.False(t, exists(t, c, key))
}
