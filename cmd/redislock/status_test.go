//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock"
)

// parseStatusJSON parses the output of status -json.
func parseStatusJSON(t *testing.T, out string) statusJSON {
	t.Helper()
	var s statusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	return s
}

// status shows the holder of a key held by a run: its description (by
// default "redislock run", the program without its arguments, the host
// and redislock's pid), lease, token and fence, in text and as JSON
// (-json) that parses; the token is the one COMMAND got.
func TestStatus_ShowsHolder(t *testing.T) {
	t.Parallel()
	needRedis(t)
	key := testKey(t)
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-ttl", "10s"},
		script(marks, `echo "token $REDISLOCK_TOKEN" >> "$1"; echo "fence $REDISLOCK_FENCE" >> "$1"; sleep 30 & echo "started $$" >> "$1"; wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))
	var token, fence string
	for _, l := range lines(t, marks) {
		if s, ok := strings.CutPrefix(l, "token "); ok {
			token = s
		}
		if s, ok := strings.CutPrefix(l, "fence "); ok {
			fence = s
		}
	}
	host, err := os.Hostname()
	must(t, err)
	holder := fmt.Sprintf("redislock run sh on %s pid %d", host, p.cmd.Process.Pid)

	code, out, stderr := runCLI(t, "status", key)
	equal(t, code, exitConflict, stderr)
	for _, want := range []string{"key:      " + key + "\n", "mode:     exclusive\n", "holder:   " + holder + "\n",
		"  token:  " + token + "\n", "fence:    " + fence + "\n", "waiting:  0\n"} {
		contains(t, out, want)
	}

	code, out, stderr = runCLI(t, "status", "-json", key)
	equal(t, code, exitConflict, stderr)
	s := parseStatusJSON(t, out)
	equal(t, s.Key, key)
	check(t, s.Held, "held")
	equal(t, s.Mode, "exclusive")
	if len(s.Holders) != 1 {
		t.Fatalf("holders: %+v", s.Holders)
	}
	equal(t, s.Holders[0].Description, holder)
	equal(t, s.Holders[0].Token, token)
	check(t, s.Holders[0].TTLMillis > 5000 && s.Holders[0].TTLMillis <= 10000, "ttl_ms %d", s.Holders[0].TTLMillis)
	equal(t, itoa(s.Fence), fence)

	must(t, p.cmd.Process.Signal(sigterm))
	p.wait(5 * time.Second)
}

// status exits 0 when nobody holds the key ("free"; held: false in JSON,
// with an empty list of holders), and 1 when it is held, in any mode, or
// holds data of another kind than a lock ("other": not free, though
// nobody holds it), with or without -json.
func TestStatus_ExitStatusTellsHeldFromFree(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()
	locker := redislock.New(c, redislock.WithHolder("test holder"))
	exclusive, shared, semaphore, other := testKey(t)+":exclusive", testKey(t)+":shared", testKey(t)+":semaphore", testKey(t)+":other"
	for key, opts := range map[string][]redislock.Option{exclusive: nil, shared: {redislock.WithShared()}, semaphore: {redislock.WithPermits(2)}} {
		lk, err := locker.Obtain(ctx, key, 30*time.Second, opts...)
		must(t, err)
		t.Cleanup(func() { _ = lk.Release(context.Background()) })
	}
	must(t, c.RPush(ctx, other, "a").Err())
	t.Cleanup(func() { c.Del(context.Background(), other) })

	for _, tc := range []struct {
		key, mode string
		held      bool
		code      int
	}{
		{testKey(t) + ":free", "free", false, exitFree},
		{exclusive, "exclusive", true, exitConflict},
		{shared, "shared", true, exitConflict},
		{semaphore, "semaphore", true, exitConflict},
		{other, "other", false, exitConflict},
	} {
		code, out, stderr := runCLI(t, "status", tc.key)
		equal(t, code, tc.code, "%s: %s", tc.key, stderr)
		contains(t, out, fmt.Sprintf("mode:     %s\n", tc.mode), tc.key)

		code, out, stderr = runCLI(t, "status", "-json", tc.key)
		equal(t, code, tc.code, "%s -json: %s", tc.key, stderr)
		s := parseStatusJSON(t, out)
		equal(t, s.Mode, tc.mode, tc.key)
		equal(t, s.Held, tc.held, tc.key)
		if !tc.held {
			contains(t, out, `"holders": []`, tc.key)
		}
	}
}

// -namespace puts the lock under its prefix: a run with -namespace holds
// the Redis key PREFIX+KEY, status with the same -namespace sees it held,
// status without sees KEY free, and a second run with the same -namespace
// finds it held.
func TestStatus_Namespace(t *testing.T) {
	t.Parallel()
	c := client(t)
	key, ns := testKey(t), "redislock-cmd-ns:"
	marks := marksFile(t)
	p := start(t, runArgs(key, []string{"-namespace", ns}, script(marks, `sleep 30 & echo "started $$" >> "$1"; wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))

	n, err := c.Exists(context.Background(), ns+key).Result()
	must(t, err)
	equal(t, n, 1, "the Redis key %s%s", ns, key)
	code, out, stderr := runCLI(t, "status", "-namespace", ns, key)
	equal(t, code, exitConflict, stderr)
	contains(t, out, "mode:     exclusive\n")
	code, out, stderr = runCLI(t, "status", key)
	equal(t, code, exitFree, stderr)
	contains(t, out, "mode:     free\n")
	code, _, stderr = runCLI(t, "run", "-n", "-namespace", ns, key, "--", "true")
	equal(t, code, exitConflict, stderr)

	must(t, p.cmd.Process.Signal(sigterm))
	p.wait(5 * time.Second)
}

// status exits 69 when Redis cannot be reached, printing nothing on stdout.
func TestStatus_RedisDownExits69(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "status", "-redis", "redis://127.0.0.1:1", "k")
	equal(t, code, exitRedis, stderr)
	equal(t, out, "")
	contains(t, stderr, "127.0.0.1:1")
}

// A holder's description and token are whatever Redis holds, written by
// anyone: status prints one that is not plain printable text quoted, Go
// syntax, so that one holder is always exactly one "holder:" line with its
// "  ttl:" and "  token:" lines, and no text can forge a line (a newline and
// a fake "holder:" line, a carriage return, terminal escapes, invalid
// UTF-8). The key is printed the same way. -json escapes them (encoding/json)
// and gives back the same text for valid UTF-8.
func TestStatus_QuotesUnprintableText(t *testing.T) {
	t.Parallel()
	c := client(t)
	ctx := context.Background()

	// A lock of the library whose description someone overwrote in the
	// holders hash (WithHolder itself takes printable text only).
	key := testKey(t) + "\n"
	desc := "evil\nholder:   forged\rfence:    999\x1b[2J\u202e"
	lk, err := redislock.New(c).Obtain(ctx, key, 30*time.Second)
	must(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	must(t, c.HSet(ctx, "{"+key+"}:rl1:holders:"+key, lk.Token(), desc).Err())

	// A token and description that someone else wrote; the side key is the
	// library's documented holders hash ({key}:rl1:holders:key).
	raw := testKey(t) + ":raw"
	token, rawDesc := "tok\nwaiting:  7", "bad \xff utf-8\n  token:  x"
	must(t, c.Set(ctx, raw, token, 30*time.Second).Err())
	holders := "{" + raw + "}:rl1:holders:" + raw
	must(t, c.HSet(ctx, holders, token, rawDesc).Err())
	t.Cleanup(func() { c.Del(context.Background(), raw, holders) })

	for _, tc := range []struct{ key, keyLine, token, desc string }{
		{key, strconv.Quote(key), lk.Token(), desc},
		{raw, raw, token, rawDesc}, // a plain key is printed as it is
	} {
		code, out, stderr := runCLI(t, "status", tc.key)
		equal(t, code, exitConflict, stderr)
		ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(ls) != 7 { // key, mode, holder, ttl, token, fence, waiting
			t.Fatalf("%d lines: %q", len(ls), out)
		}
		for i, label := range []string{"key:", "mode:", "holder:", "  ttl:", "  token:", "fence:", "waiting:"} {
			check(t, strings.HasPrefix(ls[i], label), "line %d: %q", i, ls[i])
		}
		for _, r := range out {
			check(t, r == '\n' || strconv.IsPrint(r), "unprintable %U in %q", r, out)
		}
		equal(t, ls[0], "key:      "+tc.keyLine)
		equal(t, ls[2], "holder:   "+strconv.Quote(tc.desc))
		if tc.token != lk.Token() {
			equal(t, ls[4], "  token:  "+strconv.Quote(tc.token))
		} else {
			equal(t, ls[4], "  token:  "+tc.token, "a plain token is printed as it is")
		}

		code, out, stderr = runCLI(t, "status", "-json", tc.key)
		equal(t, code, exitConflict, stderr)
		s := parseStatusJSON(t, out)
		if len(s.Holders) != 1 {
			t.Fatalf("holders: %+v", s.Holders)
		}
		equal(t, s.Key, tc.key)
		equal(t, s.Holders[0].Token, tc.token)
		equal(t, s.Holders[0].Description, strings.ToValidUTF8(tc.desc, "\uFFFD"))
		lacks(t, out, "\x1b", "JSON output carries a raw escape")
	}
}

// plain leaves plain printable text as it is and quotes the rest: empty
// text, control and format characters, invalid UTF-8, spaces other than '
// ' or at either end, and text that starts like a quoted one or like
// "(no description)".
func TestPlain(t *testing.T) {
	for _, s := range []string{"web-3 pid 4711", "é ü 漢字", `a "b" c`, "a(b)"} {
		equal(t, plain(s), s)
	}
	for _, s := range []string{"", "a\nb", "a\rb", "\x1b[2J", "a\u202eb", "a\u00a0b", "\xff", " a", "a ", `"a"`, "(no description)", "a\tb"} {
		equal(t, plain(s), strconv.Quote(s))
	}
}

// status exits 74 when its output cannot be written: to a full device, or
// to a pipe whose reader is gone (a broken pipe is reported, not a death by
// SIGPIPE).
func TestStatus_UnwritableOutputExits74(t *testing.T) {
	t.Parallel()
	needRedis(t)
	r, w, err := os.Pipe()
	must(t, err)
	r.Close()
	defer w.Close()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		full = nil // not every system has one
	}
	for name, out := range map[string]*os.File{"broken pipe": w, "/dev/full": full} {
		if out == nil {
			continue
		}
		var stderr strings.Builder
		cmd := exec.Command(binary, "status", "-redis", testRedisURL(0), testKey(t))
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
		cmd.Stdout, cmd.Stderr = out, &stderr
		_ = cmd.Run()
		equal(t, exitStatus(cmd.ProcessState), exitCannotSay, "%s: %s", name, stderr.String())
		contains(t, stderr.String(), "redislock: ", name)
	}
	if full != nil {
		full.Close()
	}
}

// status with several keys shows each, in the order given, as status of
// one key does, a blank line between them: a set held by one run shows
// its token at each of its keys. It exits 1 when one of them is held and
// 0 when none is. -json prints one object a key, one after another.
func TestStatus_SeveralKeys(t *testing.T) {
	t.Parallel()
	needRedis(t)
	k := testKeys(t, 4)
	held, free := []string{k[0], k[1]}, []string{k[2], k[3]}
	marks := marksFile(t)
	p := start(t, setArgs(held, []string{"-holder", "the set"},
		script(marks, `echo "token $REDISLOCK_TOKEN" >> "$1"; sleep 30 & echo "started $$" >> "$1"; wait`))...)
	waitLine(t, marks, "started", 5*time.Second)
	killGroupAtEnd(t, pidOf(t, marks, "started "))
	token := strings.TrimPrefix(lines(t, marks)[0], "token ")

	code, out, stderr := runCLI(t, "status", k[1], k[2], k[0])
	equal(t, code, exitConflict, stderr)
	blocks := strings.Split(out, "\n\n")
	if len(blocks) != 3 {
		t.Fatalf("%d blocks: %q", len(blocks), out)
	}
	for i, key := range []string{k[1], k[2], k[0]} {
		check(t, strings.HasPrefix(blocks[i], "key:      "+key+"\n"), "block %d: %q", i, blocks[i])
		if key == k[2] {
			contains(t, blocks[i], "mode:     free\n")
		} else {
			contains(t, blocks[i], "holder:   the set\n", "%s", key)
			contains(t, blocks[i], "  token:  "+token+"\n", "%s", key)
		}
	}
	check(t, strings.HasSuffix(out, "waiting:  0\n"), "%q", out)

	code, out, stderr = runCLI(t, "status", "-json", k[1], k[2], k[0])
	equal(t, code, exitConflict, stderr)
	d := json.NewDecoder(strings.NewReader(out))
	var got []statusJSON
	for d.More() {
		var s statusJSON
		must(t, d.Decode(&s), "%q", out)
		got = append(got, s)
	}
	if len(got) != 3 {
		t.Fatalf("%d objects: %q", len(got), out)
	}
	for i, want := range []struct {
		key  string
		held bool
	}{{k[1], true}, {k[2], false}, {k[0], true}} {
		equal(t, got[i].Key, want.key)
		equal(t, got[i].Held, want.held, "%s", want.key)
	}
	if len(got[0].Holders) != 1 || got[0].Holders[0].Token != token {
		t.Errorf("%s: holders %+v, want one of token %s", k[1], got[0].Holders, token)
	}

	for _, args := range [][]string{{"status", free[0], free[1]}, {"status", "-json", free[0], free[1]}} {
		code, _, stderr = runCLI(t, args...)
		equal(t, code, exitFree, "%q: %s", args, stderr)
	}

	must(t, p.cmd.Process.Signal(sigterm))
	p.wait(5 * time.Second)
}
