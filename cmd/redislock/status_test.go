//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// status shows the holder of a key held by a run: its description (with
// "redislock run" and the command), lease, token and fence, in text and as
// JSON (-json) that parses; the token is the one COMMAND got.
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

	code, out, stderr := runCLI(t, "status", key)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"key:      " + key + "\n", "mode:     exclusive\n", "holder:   redislock run sh -c", "  token:  " + token + "\n", "fence:    " + fence + "\n", "waiting:  0\n"} {
		assert.Contains(t, out, want)
	}

	code, out, stderr = runCLI(t, "status", "-json", key)
	require.Equal(t, 0, code, stderr)
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	assert.Equal(t, key, s.Key)
	assert.True(t, s.Held)
	assert.Equal(t, "exclusive", s.Mode)
	require.Len(t, s.Holders, 1)
	assert.Contains(t, s.Holders[0].Description, "redislock run sh -c")
	assert.Equal(t, token, s.Holders[0].Token)
	assert.Greater(t, s.Holders[0].TTLMillis, int64(5000))
	assert.LessOrEqual(t, s.Holders[0].TTLMillis, int64(10000))
	assert.Equal(t, fence, itoa(s.Fence))

	require.NoError(t, p.cmd.Process.Signal(sigterm))
	p.wait(5 * time.Second)
}

// status of a key nobody holds exits 0 and says "free" (held: false in
// JSON, with an empty list of holders).
func TestStatus_FreeKey(t *testing.T) {
	t.Parallel()
	needRedis(t)
	code, out, stderr := runCLI(t, "status", testKey(t))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "mode:     free\n")

	code, out, stderr = runCLI(t, "status", "-json", testKey(t))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, `"holders": []`)
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	assert.False(t, s.Held)
	assert.Equal(t, "free", s.Mode)
}

// A key that holds data of another kind than a lock (a list) is not free:
// status says "other", and nobody holds it.
func TestStatus_OtherKindIsNotFree(t *testing.T) {
	t.Parallel()
	key := testKey(t)
	rdb := client(t)
	require.NoError(t, rdb.RPush(context.Background(), key, "a").Err())
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	code, out, stderr := runCLI(t, "status", "-json", key)
	require.Equal(t, 0, code, stderr)
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(out), &s), out)
	assert.False(t, s.Held)
	assert.Equal(t, "other", s.Mode)
}

// status exits 69 when Redis cannot be reached, printing nothing on stdout.
func TestStatus_RedisDownExits69(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "status", "-redis", "redis://127.0.0.1:1", "k")
	assert.Equal(t, exitRedis, code, stderr)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "127.0.0.1:1")
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
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	require.NoError(t, c.HSet(ctx, "{"+key+"}:redislock:holders:"+key, lk.Token(), desc).Err())

	// A token and description that someone else wrote; the side key is the
	// library's documented holders hash ({key}:redislock:holders:key).
	raw := testKey(t) + ":raw"
	token, rawDesc := "tok\nwaiting:  7", "bad \xff utf-8\n  token:  x"
	require.NoError(t, c.Set(ctx, raw, token, 30*time.Second).Err())
	holders := "{" + raw + "}:redislock:holders:" + raw
	require.NoError(t, c.HSet(ctx, holders, token, rawDesc).Err())
	t.Cleanup(func() { c.Del(context.Background(), raw, holders) })

	for _, tc := range []struct{ key, keyLine, token, desc string }{
		{key, strconv.Quote(key), lk.Token(), desc},
		{raw, raw, token, rawDesc}, // a plain key is printed as it is
	} {
		code, out, stderr := runCLI(t, "status", tc.key)
		require.Equal(t, 0, code, stderr)
		ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		require.Len(t, ls, 7, "%q", out) // key, mode, holder, ttl, token, fence, waiting
		for i, label := range []string{"key:", "mode:", "holder:", "  ttl:", "  token:", "fence:", "waiting:"} {
			assert.True(t, strings.HasPrefix(ls[i], label), "line %d: %q", i, ls[i])
		}
		for _, r := range out {
			assert.True(t, r == '\n' || strconv.IsPrint(r), "unprintable %U in %q", r, out)
		}
		assert.Equal(t, "key:      "+tc.keyLine, ls[0])
		assert.Equal(t, "holder:   "+strconv.Quote(tc.desc), ls[2])
		if tc.token != lk.Token() {
			assert.Equal(t, "  token:  "+strconv.Quote(tc.token), ls[4])
		} else {
			assert.Equal(t, "  token:  "+tc.token, ls[4], "a plain token is printed as it is")
		}

		code, out, stderr = runCLI(t, "status", "-json", tc.key)
		require.Equal(t, 0, code, stderr)
		var s statusJSON
		require.NoError(t, json.Unmarshal([]byte(out), &s), out)
		require.Len(t, s.Holders, 1)
		assert.Equal(t, tc.key, s.Key)
		assert.Equal(t, tc.token, s.Holders[0].Token)
		assert.Equal(t, strings.ToValidUTF8(tc.desc, "\uFFFD"), s.Holders[0].Description)
		assert.NotContains(t, out, "\x1b", "JSON output carries a raw escape")
	}
}

// plain leaves plain printable text as it is and quotes the rest: empty
// text, control and format characters, invalid UTF-8, spaces other than '
// ' or at either end, and text that starts like a quoted one or like
// "(no description)".
func TestPlain(t *testing.T) {
	for _, s := range []string{"web-3 pid 4711", "é ü 漢字", `a "b" c`, "a(b)"} {
		assert.Equal(t, s, plain(s))
	}
	for _, s := range []string{"", "a\nb", "a\rb", "\x1b[2J", "a\u202eb", "a\u00a0b", "\xff", " a", "a ", `"a"`, "(no description)", "a\tb"} {
		assert.Equal(t, strconv.Quote(s), plain(s))
	}
}

// status exits 74 when its output cannot be written: to a full device, or
// to a pipe whose reader is gone (a broken pipe is reported, not a death by
// SIGPIPE).
func TestStatus_UnwritableOutputExits74(t *testing.T) {
	t.Parallel()
	needRedis(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
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
		assert.Equal(t, exitCannotSay, exitStatus(cmd.ProcessState), "%s: %s", name, stderr.String())
		assert.Contains(t, stderr.String(), "redislock: ", name)
	}
	if full != nil {
		full.Close()
	}
}
