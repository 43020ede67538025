package main

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const runtimeGOOS = runtime.GOOS

// parseRun takes flags before and after KEY, the defaults, -n as a wait
// of 0, the Redis URL from -redis, else REDIS_URL, else the default; the
// command keeps its own flags and "--".
func TestParseRun(t *testing.T) {
	env := func(url string) func(string) string {
		return func(k string) string {
			if k == "REDIS_URL" {
				return url
			}
			return ""
		}
	}
	c, err := parseRun([]string{"k", "--", "ls", "-l", "--", "x"}, env(""))
	require.NoError(t, err)
	assert.Equal(t, runConfig{
		key: "k", argv: []string{"ls", "-l", "--", "x"}, ttl: 30 * time.Second, wait: -1, conflict: 1,
		grace: 10 * time.Second, fenceEnv: "REDISLOCK_FENCE", tokenEnv: "REDISLOCK_TOKEN", redisURL: "redis://127.0.0.1:6379",
	}, c)

	c, err = parseRun([]string{"-ttl", "2s", "k", "-n", "-E", "9", "-grace=1s", "-redis", "redis://h:1", "--", "true"}, env("redis://env:2"))
	require.NoError(t, err)
	assert.Equal(t, runConfig{
		key: "k", argv: []string{"true"}, ttl: 2 * time.Second, wait: 0, conflict: 9,
		grace: time.Second, fenceEnv: "REDISLOCK_FENCE", tokenEnv: "REDISLOCK_TOKEN", redisURL: "redis://h:1",
	}, c)

	c, err = parseRun([]string{"-wait", "5s", "k", "--", "true"}, env("redis+cluster://env:2"))
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, c.wait)
	assert.Equal(t, "redis+cluster://env:2", c.redisURL)
}

// The holder description names the command, the host and the pid, and
// stays within the library's 200 bytes of printable UTF-8 (WithHolder's
// rule) for long commands and commands with newlines, tabs or escapes in
// their arguments (each such character becomes '?').
func TestHolderDescription(t *testing.T) {
	d := holderDescription([]string{"sh", "-c", "a\nb\tc\x1b[0m"}, "web\n3", 4711)
	assert.Equal(t, "redislock run sh -c a?b?c?[0m on web?3 pid 4711", d)
	assert.False(t, strings.ContainsFunc(d, func(r rune) bool { return !unicode.IsPrint(r) }), d)
	assert.Equal(t, "redislock run ./migrate up on web-3 pid 4711", holderDescription([]string{"./migrate", "up"}, "web-3", 4711))
	long := holderDescription([]string{"echo", strings.Repeat("é", 300)}, "web-3", 4711)
	assert.LessOrEqual(t, len(long), maxHolder)
	assert.True(t, utf8.ValidString(long))
	assert.True(t, strings.HasSuffix(long, "... on web-3 pid 4711"), long)
	assert.True(t, utf8.ValidString(holderDescription([]string{"\xff"}, "h", 1)))
}

// COMMAND's environment has the key, the fence and the token under their
// names (a later entry of a name wins, as exec does); a name "" gives none,
// and removes an inherited variable of the default name (an outer run's),
// so that COMMAND never takes another lock's fence or token for this one's.
func TestCommandEnv(t *testing.T) {
	outer := []string{"PATH=/bin", "REDISLOCK_FENCE=999", "REDISLOCK_TOKEN=outer"}
	env := commandEnv(slices.Clone(outer), runConfig{key: "k", fenceEnv: defaultFenceEnv, tokenEnv: defaultTokenEnv}, 7, "tok")
	assert.Equal(t, append(slices.Clone(outer), "REDISLOCK_KEY=k", "REDISLOCK_FENCE=7", "REDISLOCK_TOKEN=tok"), env)
	env = commandEnv(slices.Clone(outer), runConfig{key: "k", fenceEnv: "", tokenEnv: ""}, 7, "tok")
	assert.Equal(t, []string{"PATH=/bin", "REDISLOCK_KEY=k"}, env)
	env = commandEnv(slices.Clone(outer), runConfig{key: "k", fenceEnv: "MY_FENCE", tokenEnv: ""}, 7, "tok")
	assert.Equal(t, []string{"PATH=/bin", "REDISLOCK_FENCE=999", "REDISLOCK_KEY=k", "MY_FENCE=7"}, env)
}
