package tests

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// A script is one of the library's Lua scripts, as a test recognises a run
// of it in what a client sends: by the shape of the call (EVALSHA, or the
// EVAL go-redis sends after NOSCRIPT; how many KEYS, what the second key
// is, how many ARGV), which the KEYS and ARGV tables in plain.go and
// scripts.go fix. The package exports neither the scripts nor their
// hashes. TestScripts_RecognisedByShape checks the shapes against what the
// library sends.
type script string

const (
	takeScript          script = "take"           // plain.go: KEYS lock, places; ARGV token, ttl
	dropScript          script = "drop"           // plain.go: KEYS lock, places; ARGV token
	renewScript         script = "renew"          // plain.go: KEYS lock, gens[, fence][, holders]; 5 ARGV
	acquireScript       script = "acquire"        // scripts.go: familyKeys with the spent mark (7 KEYS); 9 ARGV
	releaseScript       script = "release"        // scripts.go: 7 KEYS; 5 ARGV
	holderRefreshScript script = "holder refresh" // scripts.go: familyKeys (6 KEYS); 5 ARGV
	inspectScript       script = "inspect"        // scripts.go: familyKeys (6 KEYS); no ARGV
)

// knownScripts are the scripts scriptOf knows.
var knownScripts = []script{takeScript, dropScript, renewScript, acquireScript, releaseScript, holderRefreshScript, inspectScript}

// scriptOf returns the script a call runs, from its shape: the command's
// name, its number of KEYS, its second key ("" with fewer than 2) and its
// number of ARGV. It returns "" for anything else (other commands, and the
// scripts no test needs to pick out).
func scriptOf(name string, keys int, second string, args int) script {
	if n := strings.ToLower(name); n != "evalsha" && n != "eval" {
		return ""
	}
	switch {
	case keys == 2 && isSide(second, "places") && args == 2:
		return takeScript
	case keys == 2 && isSide(second, "places") && args == 1:
		return dropScript
	case keys >= 2 && keys <= 4 && isSide(second, "gens") && args == 5:
		return renewScript
	case keys == 7 && args == 9:
		return acquireScript
	case keys == 7 && args == 5:
		return releaseScript
	case keys == 6 && args == 5:
		return holderRefreshScript
	case keys == 6 && args == 0:
		return inspectScript
	}
	return ""
}

// isSide reports whether name is a side key of kind (see sideKey).
func isSide(name, kind string) bool { return strings.Contains(name, "}:rl1:"+kind+":") }

// isScript reports whether cmd, a command as a go-redis hook sees it, runs
// s (EVALSHA or EVAL: [name, sha or body, numkeys, keys..., args...]).
func isScript(cmd redis.Cmder, s script) bool {
	args := cmd.Args()
	if len(args) < 3 {
		return false
	}
	name, _ := args[0].(string)
	keys, ok := args[2].(int)
	if !ok || keys < 0 || 3+keys > len(args) {
		return false
	}
	second := ""
	if keys >= 2 {
		second, _ = args[4].(string)
	}
	return scriptOf(name, keys, second, len(args)-3-keys) == s
}

// releases reports whether cmd runs a release script (of a plain lock, or
// of the line and the family); acquires, an acquire script.
func releases(cmd redis.Cmder) bool {
	return isScript(cmd, dropScript) || isScript(cmd, releaseScript)
}

func acquires(cmd redis.Cmder) bool {
	return isScript(cmd, takeScript) || isScript(cmd, acquireScript)
}

// sentScript matches the bytes a client writes (RESP: one or more
// commands, as go-redis writes them, or as a proxy reads them) when they
// hold a run of s with arg among its KEYS and ARGV ("" for any). The ARGV
// of a run cut short (a chunk that ends inside it) are those it holds.
func sentScript(s script, arg string) func([]byte) bool {
	return func(b []byte) bool {
		for len(b) > 0 {
			cmd, n, total := parseCommand(b)
			if len(cmd) >= 3 {
				keys, err := strconv.Atoi(cmd[2])
				if err == nil && keys >= 0 && len(cmd) >= 3+keys {
					second := ""
					if keys >= 2 {
						second = cmd[4]
					}
					if scriptOf(cmd[0], keys, second, total-3-keys) == s && (arg == "" || slices.Contains(cmd[3:], arg)) {
						return true
					}
				}
			}
			if n == 0 {
				return false
			}
			b = b[n:]
		}
		return false
	}
}

// parseCommand reads the RESP array of bulk strings at the start of b: its
// elements as far as b holds them, the bytes of the whole command (0 when
// b ends inside it), and its number of elements.
func parseCommand(b []byte) (elems []string, n, total int) {
	line := func(at int) (string, int, bool) {
		i := bytes.Index(b[at:], []byte("\r\n"))
		if i < 0 {
			return "", 0, false
		}
		return string(b[at : at+i]), at + i + 2, true
	}
	head, at, ok := line(0)
	if !ok || !strings.HasPrefix(head, "*") {
		return nil, 0, 0
	}
	total, err := strconv.Atoi(head[1:])
	if err != nil {
		return nil, 0, 0
	}
	for range total {
		size, next, ok := line(at)
		if !ok || !strings.HasPrefix(size, "$") {
			return elems, 0, total
		}
		l, err := strconv.Atoi(size[1:])
		if err != nil || next+l+2 > len(b) {
			return elems, 0, total
		}
		elems = append(elems, string(b[next:next+l]))
		at = next + l + 2
	}
	return elems, at, total
}

// loadScripts has the library run its scripts on the Redis of rdb (on a
// client of its own, in database 15, which it empties), so that from then
// on they run by EVALSHA: one command each, as the tests that hold back,
// drop or count a script's run expect (a script Redis does not have costs
// an EVALSHA that fails with NOSCRIPT, and an EVAL that holds its text).
// It fails t if the library did not run each script a test looks for.
func loadScripts(t testing.TB, rdb *redis.Client) {
	t.Helper()
	o := rdb.Options()
	c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: 15})
	defer func() { _ = c.Close() }()
	ran := map[script]bool{}
	var mu sync.Mutex
	c.AddHook(hook{before: func(cmd redis.Cmder) {
		for _, s := range knownScripts {
			if isScript(cmd, s) {
				mu.Lock()
				ran[s] = true
				mu.Unlock()
			}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runScripts(t, ctx, c, "rl-test:load-scripts")
	require.NoError(t, c.FlushDB(ctx).Err())
	mu.Lock()
	defer mu.Unlock()
	for _, s := range knownScripts {
		require.True(t, ran[s], "the library ran no %s script: the shapes in scripts_test.go are out of date", s)
	}
}

// runScripts uses the library on key so that it runs each of its scripts
// but the quorum's: a plain lock (take, TTL, drop), a described and
// fenced one (acquire, renew, release; a Refresh makes a lock not plain),
// a reader (acquire, holder refresh, TTL, release), Inspect and SetFenced.
func runScripts(t testing.TB, ctx context.Context, c *redis.Client, key string) {
	t.Helper()
	locker := redislock.New(c, redislock.WithHolder("loadScripts"))
	lk, err := redislock.New(c).Obtain(ctx, key, time.Minute)
	require.NoError(t, err)
	_, err = lk.TTL(ctx)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	lk, err = locker.Obtain(ctx, key, time.Minute, redislock.WithFencing())
	require.NoError(t, err)
	require.NoError(t, lk.Refresh(ctx, time.Minute))
	_, err = locker.Inspect(ctx, key)
	require.NoError(t, err)
	require.NoError(t, redislock.SetFenced(ctx, c, key+":resource", "v", lk.Fence()))
	require.NoError(t, lk.Release(ctx))
	lk, err = locker.Obtain(ctx, key, time.Minute, redislock.WithShared())
	require.NoError(t, err)
	require.NoError(t, lk.Refresh(ctx, time.Minute))
	_, err = lk.TTL(ctx)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))
}

// The shapes scriptOf knows are those of the calls the library makes: each
// operation runs the script expected of it, whether by EVALSHA or by the
// EVAL that follows NOSCRIPT (Redis emptied its script cache), as a
// go-redis hook sees it and as the bytes on the connection hold it.
func TestScripts_RecognisedByShape(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	var mu sync.Mutex
	var hooked []script
	var writes [][]byte
	rdb, _ := b.client(t, func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			return writeRecorder{c, func(p []byte) {
				mu.Lock()
				writes = append(writes, append([]byte(nil), p...))
				mu.Unlock()
			}}, err
		}
	})
	rdb.AddHook(hook{before: func(cmd redis.Cmder) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range knownScripts {
			if isScript(cmd, s) {
				hooked = append(hooked, s)
			}
		}
	}})
	byBytes := func() []script {
		var seen []script
		for _, w := range writes {
			for _, s := range knownScripts {
				if sentScript(s, "")(w) {
					seen = append(seen, s)
				}
			}
		}
		return seen
	}
	for _, loaded := range []bool{false, true} {
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		if loaded {
			runScripts(t, ctx, rdb, "warm-up")
		}
		mu.Lock()
		hooked, writes = nil, nil
		mu.Unlock()
		runScripts(t, ctx, rdb, "k")
		want := []script{takeScript, dropScript, acquireScript, renewScript, inspectScript, releaseScript, acquireScript, holderRefreshScript, releaseScript}
		if !loaded { // a script's first run is an EVALSHA that finds NOSCRIPT, then an EVAL
			var runs []script
			for _, s := range want {
				if !slices.Contains(runs, s) {
					runs = append(runs, s)
				}
				runs = append(runs, s)
			}
			want = runs
		}
		mu.Lock()
		assert.Equal(t, want, hooked, "seen by a hook, scripts loaded: %v", loaded)
		assert.Equal(t, want, byBytes(), "seen in the bytes written, scripts loaded: %v", loaded)
		mu.Unlock()
	}

	// A run's arguments, and a chunk that ends inside a run.
	run := resp("evalsha", "abc", "2", "k", "{k}:rl1:places:k", "300")
	assert.True(t, sentScript(dropScript, "300")(run))
	assert.True(t, sentScript(dropScript, "k")(run))
	assert.False(t, sentScript(dropScript, "30")(run))
	assert.False(t, sentScript(takeScript, "")(run))
	assert.True(t, sentScript(dropScript, "")(append(resp("ping"), run...)), "the second command of a pipeline")
	assert.True(t, sentScript(dropScript, "")(run[:len(run)-5]), "a run cut short")
	assert.False(t, sentScript(dropScript, "300")(run[:len(run)-5]), "an argument not yet written")
}

// resp returns args as a client sends them: a RESP array of bulk strings.
func resp(args ...string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// writeRecorder is a connection that shows each write to record.
type writeRecorder struct {
	net.Conn
	record func([]byte)
}

func (w writeRecorder) Write(p []byte) (int, error) {
	w.record(p)
	return w.Conn.Write(p)
}
