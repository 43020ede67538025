//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// status exits 69 when Redis cannot be reached, printing nothing on stdout.
func TestStatus_RedisDownExits69(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "status", "-redis", "redis://127.0.0.1:1", "k")
	assert.Equal(t, exitRedis, code, stderr)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "127.0.0.1:1")
}
