//go:build unix

package main

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// aToken is a string of a token's form (Lock.Token) that holds no lock.
const aToken = "rl1:AAAAAAAAAAAAAAAAAAAAAA"

// tokenInStatus returns the token of the one holder that the text of
// status shows, as an operator copies it.
func tokenInStatus(t *testing.T, out string) string {
	t.Helper()
	var tokens []string
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, "  token:  "); ok {
			tokens = append(tokens, s)
		}
	}
	if len(tokens) != 1 {
		t.Fatalf("want one token line in %q", out)
	}
	return tokens[0]
}

// release with the token that status prints, copied as it is, releases
// the lock of a run whose command still runs, and, as any release, hands
// the key to the next in line at once (the second run's command starts
// long before the 6 s lease would have ended); it prints nothing and exits
// 0. The run that held the lock finds it lost at its next renewal: its
// command gets SIGTERM and it exits 75.
func TestRelease_TokenFromStatusHandsKeyOn(t *testing.T) {
	t.Parallel()
	needRedis(t)
	key := testKey(t)
	marks := marksFile(t)
	first := start(t, runArgs(key, []string{"-ttl", "6s"},
		script(marks, `trap 'echo TERM >> "$1"; exit 0' TERM; echo "started $$" >> "$1"; sleep 30 & wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))
	second := start(t, runArgs(key, nil, script(marks, `echo second >> "$1"`))...)
	waitInLine(t, key)

	code, out, stderr := runCLI(t, "status", key)
	equal(t, code, exitConflict, stderr)
	token := tokenInStatus(t, out)
	code, out, stderr = runCLI(t, "release", "-token", token, key)
	released := time.Now()
	equal(t, code, 0, stderr)
	equal(t, out, "", "stdout")
	equal(t, stderr, "", "stderr")

	equal(t, second.wait(5*time.Second), 0, second.errors())
	waitLine(t, marks, "second", time.Second)
	check(t, second.ended.Sub(released) < 2*time.Second, "the next in line ran %v after the release", second.ended.Sub(released))

	equal(t, first.wait(5*time.Second), exitLost, first.errors())
	contains(t, first.errors(), fmt.Sprintf("redislock: lock on %q lost", key))
	hasLine(t, marks, "TERM", "the first command got SIGTERM")
}

// A set's keys are released together, given in any order, with the token
// of status -json; its keys are then free. The resume behind the release
// issued new fences: each key's latest fence is above the one the run's
// command got, so that the writes it fences are refused from then on.
func TestRelease_SetByTokenFromJSON(t *testing.T) {
	t.Parallel()
	c := client(t)
	k := testKeys(t, 2)
	marks := marksFile(t)
	p := start(t, setArgs(k, []string{"-ttl", "6s"},
		script(marks, `echo "fences $(echo $REDISLOCK_FENCES)" >> "$1"; echo "started $$" >> "$1"; sleep 30 & wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))
	var fences []int64
	for _, l := range lines(t, marks) {
		if s, ok := strings.CutPrefix(l, "fences "); ok {
			for _, f := range strings.Fields(s) {
				n, err := strconv.ParseInt(f, 10, 64)
				must(t, err)
				fences = append(fences, n)
			}
		}
	}

	code, out, stderr := runCLI(t, "status", "-json", k[0])
	equal(t, code, exitConflict, stderr)
	s := parseStatusJSON(t, out)
	if len(s.Holders) != 1 {
		t.Fatalf("holders: %+v", s.Holders)
	}
	code, _, stderr = runCLI(t, "release", k[1], "-token", s.Holders[0].Token, k[0])
	equal(t, code, 0, stderr)
	equal(t, stderr, "", "stderr")
	n, err := c.Exists(context.Background(), k...).Result()
	must(t, err)
	equal(t, n, 0, "keys of the set left")
	for i, key := range k {
		_, out, _ = runCLI(t, "status", "-json", key)
		s := parseStatusJSON(t, out)
		equal(t, s.Mode, modeFree, key)
		check(t, s.Fence > fences[i], "%s: fence %d after the release, %d before", key, s.Fence, fences[i])
	}
	equal(t, p.wait(5*time.Second), exitLost, p.errors())
}

// A lock is released in the mode it is held in: one reader of a
// read-write lock leaves the other reader holding the key, and a permit of
// a semaphore is given back to it.
func TestRelease_ReaderAndPermit(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	locker := redislock.New(c)
	shared, semaphore := testKey(t)+":shared", testKey(t)+":semaphore"
	var readers []*redislock.Lock
	for range 2 {
		lk, err := locker.Obtain(ctx, shared, 30*time.Second, redislock.WithShared())
		must(t, err)
		t.Cleanup(func() { _ = lk.Release(context.Background()) })
		readers = append(readers, lk)
	}
	permit, err := locker.Obtain(ctx, semaphore, 30*time.Second, redislock.WithPermits(2))
	must(t, err)
	t.Cleanup(func() { _ = permit.Release(context.Background()) })

	code, _, stderr := runCLI(t, "release", "-token", readers[0].Token(), shared)
	equal(t, code, 0, stderr)
	info, err := locker.Inspect(ctx, shared)
	must(t, err)
	equal(t, info.Mode, redislock.ModeShared)
	if len(info.Holders) != 1 || info.Holders[0].Token != readers[1].Token() {
		t.Errorf("holders %+v, want the other reader alone", info.Holders)
	}

	code, _, stderr = runCLI(t, "release", "-token", permit.Token(), semaphore)
	equal(t, code, 0, stderr)
	info, err = locker.Inspect(ctx, semaphore)
	must(t, err)
	equal(t, info.Mode, redislock.ModeFree, "the semaphore's mode")
}

// A token that does not hold a KEY (a free key, a key another lock holds,
// one key of a set that it does not hold, a key of another kind) exits 1,
// one line on stderr naming the key, and changes nothing: the holders keep
// their keys with the same token and lease.
func TestRelease_NotHeldExits1ChangesNothing(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	free, held, list := testKey(t)+":free", testKey(t)+":held", testKey(t)+":list"
	mine := holdKey(t, testKey(t)+":mine")
	other := holdKey(t, held)
	must(t, c.RPush(ctx, list, "a").Err())
	t.Cleanup(func() { c.Del(context.Background(), list) })
	for _, tc := range []struct {
		keys []string
		want string // the key named
	}{
		{[]string{free}, free},
		{[]string{held}, held},
		{[]string{mine.Key(), free}, free},
		{[]string{list}, list},
	} {
		code, out, stderr := runCLI(t, append([]string{"release", "-token", mine.Token()}, tc.keys...)...)
		equal(t, code, exitNotHeld, "%q: %s", tc.keys, stderr)
		equal(t, out, "", "%q: stdout", tc.keys)
		equal(t, stderr, fmt.Sprintf("redislock: lock on %s not released: %q is not held by this token\n", lockName(tc.keys), tc.want))
	}
	for _, lk := range []*redislock.Lock{mine, other} {
		equal(t, c.Get(ctx, lk.Key()).Val(), lk.Token(), "%s's token", lk.Key())
		left, err := lk.TTL(ctx)
		must(t, err)
		check(t, left > 25*time.Second, "%s: lease %v left", lk.Key(), left)
	}
	check(t, !exists(t, c, free), "the free key was written")
}

// -namespace finds the lock under its prefix, as run and status do:
// without it, the key is not held by the token.
func TestRelease_Namespace(t *testing.T) {
	t.Parallel()
	c := client(t)
	key, ns := testKey(t), "redislock-cmd-ns:"
	lk, err := redislock.New(c, redislock.WithNamespace(ns)).Obtain(context.Background(), key, 30*time.Second)
	must(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	code, _, stderr := runCLI(t, "release", "-token", lk.Token(), key)
	equal(t, code, exitNotHeld, stderr)
	code, _, stderr = runCLI(t, "release", "-token", lk.Token(), "-namespace", ns, key)
	equal(t, code, 0, stderr)
	check(t, !exists(t, c, ns+key), "the key is still held")
}

// A Redis that cannot be reached makes release exit 69, printing nothing
// on stdout, and naming the Redis.
func TestRelease_RedisDownExits69(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "release", "-redis", "redis://127.0.0.1:1", "-token", aToken, "k")
	equal(t, code, exitRedis, stderr)
	equal(t, out, "")
	contains(t, stderr, "redislock: redis redis://127.0.0.1:1: ")
}

// A Redis that does not answer (frozen with SIGSTOP) holds release for
// resumeTimeout, 5 s, not more: it exits 69. A signal ends that wait at
// once: release exits 128+N and says the lock was not released.
func TestRelease_FrozenRedisBoundedAndInterruptible(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	lk, err := redislock.New(srv.Client(t)).Obtain(context.Background(), "k", time.Minute)
	must(t, err)
	env := []string{"REDIS_URL=redis://" + srv.Addr()}
	srv.Freeze(t)

	p := startEnv(t, env, "release", "-token", lk.Token(), "k")
	code := p.wait(15 * time.Second)
	equal(t, code, exitRedis, p.errors())
	took := p.ended.Sub(p.started)
	check(t, took > resumeTimeout-time.Second && took < resumeTimeout+time.Second, "release exited after %v", took)
	equal(t, p.errors(), fmt.Sprintf("redislock: redis redis://%s did not answer within 5s: lock on \"k\" not released (if Redis ran the resume, the lock is no longer its holder's, and ends by itself within 10s)\n", srv.Addr()))

	p = startEnv(t, env, "release", "-token", lk.Token(), "k")
	time.Sleep(500 * time.Millisecond) // within the resume
	must(t, p.cmd.Process.Signal(syscall.SIGINT))
	sent := time.Now()
	equal(t, p.wait(10*time.Second), exitSignalBase+int(syscall.SIGINT), p.errors())
	check(t, p.ended.Sub(sent) < time.Second, "release exited %v after SIGINT", p.ended.Sub(sent))
	contains(t, p.errors(), `redislock: interrupt (signal 2) while releasing the lock on "k": not released`)
	srv.Thaw(t)
}

// parseRelease takes -token, -redis and -namespace before, between and
// after the KEYs, several KEYs as a set in the order given, and the Redis
// URL from -redis, else REDIS_URL, else the default; a KEY with a newline
// in it is taken (release sets no variable of the KEYs). It refuses a
// string that is not a token, without Redis.
func TestParseRelease(t *testing.T) {
	env := func(k string) string {
		if k == "REDIS_URL" {
			return "redis://env:2"
		}
		return ""
	}
	for _, tc := range []struct {
		args []string
		want releaseConfig
	}{
		{[]string{"-token", aToken, "k"}, releaseConfig{keys: []string{"k"}, token: aToken, redisURL: "redis://env:2"}},
		{[]string{"b", "-redis", "redis://h:1", "a\nc", "-token=" + aToken, "-namespace", "app:"},
			releaseConfig{keys: []string{"b", "a\nc"}, token: aToken, redisURL: "redis://h:1", namespace: "app:"}},
	} {
		c, err := parseRelease(tc.args, env)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
		} else if !reflect.DeepEqual(c, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, c, tc.want)
		}
	}
	for token, want := range map[string]string{
		"theirs":                `-token "theirs": not a token of redislock`,
		aToken + "A":            "not a token of redislock",
		"rl1:A A":               "not a token of redislock",
		"":                      "-token: empty TOKEN",
		strings.ToLower(aToken): "", // a token's characters are base64url
	} {
		_, err := parseRelease([]string{"-token", token, "k"}, env)
		if want == "" {
			must(t, err, "%q", token)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-token %q: got %v, want %q", token, err, want)
		}
	}
}
