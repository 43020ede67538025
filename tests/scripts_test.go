package tests

import (
	"bytes"
	"context"
	"crypto/sha1"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
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

// A script is one of the library's Lua scripts, by the name of its file in
// the repository's lua/ directory ("take" is lua/take.lua). A test
// recognises a run of it in what a client sends by the text that runs: the
// SHA1 of that text in an EVALSHA, or the text in the EVAL go-redis sends
// after NOSCRIPT. The text is the script's file joined as scripts.go's load
// joins it: lua/consts.lua, then the parts the script's "-- parts:" line
// names, then the script. The package exports neither the scripts nor their
// hashes; TestScripts_RecognisedByName checks that every script the library
// runs is one of these files.
type script string

const (
	takeScript    script = "take"    // a plain lock's acquisition
	dropScript    script = "drop"    // a plain lock's release
	renewScript   script = "renew"   // a lease's refresh or renewal
	acquireScript script = "acquire" // an attempt of the line and the lock family
	releaseScript script = "release" // a release of the line and the lock family
	inspectScript script = "inspect" // Inspect
)

// scriptTexts maps the text of each of the library's scripts, and the SHA1
// of that text (lower-case hex, as EVALSHA takes it), to its name.
var scriptTexts = sync.OnceValues(func() (map[string]script, error) {
	dir := filepath.Join("..", "internal", "scripts", "lua")
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name+".lua"))
		return string(b), err
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	consts, err := read("consts")
	if err != nil {
		return nil, err
	}
	partsLine := regexp.MustCompile(`(?m)^-- parts: (.*)$`)
	texts := map[string]script{}
	for _, f := range files {
		name := strings.TrimSuffix(f.Name(), ".lua")
		src, err := read(name)
		if err != nil {
			return nil, err
		}
		m := partsLine.FindStringSubmatch(src)
		if m == nil {
			continue // a part, or consts.lua
		}
		text := consts
		for _, p := range strings.Fields(m[1]) {
			if p == "(none)" {
				continue
			}
			part, err := read(p)
			if err != nil {
				return nil, err
			}
			text += part
		}
		text += src
		texts[text] = script(name)
		texts[fmt.Sprintf("%x", sha1.Sum([]byte(text)))] = script(name)
	}
	return texts, nil
})

// scriptOf returns the script that a command named name (EVALSHA or EVAL,
// in any case) whose first argument is shaOrText runs; "" for any other
// command, and "?" for a script that is not one of the library's.
func scriptOf(name, shaOrText string) script {
	if n := strings.ToLower(name); n != "evalsha" && n != "eval" {
		return ""
	}
	texts, err := scriptTexts()
	if err != nil {
		panic(err)
	}
	if s, ok := texts[strings.ToLower(shaOrText)]; ok {
		return s
	}
	if s, ok := texts[shaOrText]; ok {
		return s
	}
	return "?"
}

// isScript reports whether cmd, a command as a go-redis hook sees it, runs
// s (EVALSHA or EVAL: [name, sha or text, numkeys, keys..., args...]).
func isScript(cmd redis.Cmder, s script) bool { return scriptOfCmd(cmd) == s }

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
			cmd, n, _ := parseCommand(b)
			if len(cmd) >= 2 && scriptOf(cmd[0], cmd[1]) == s && (arg == "" || slices.Contains(cmd[3:], arg)) {
				return true
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
// It fails t if the library did not run each script a test looks for: a
// new script must be added to the calls it makes.
func loadScripts(t testing.TB, rdb *redis.Client) {
	t.Helper()
	o := rdb.Options()
	c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: 15})
	defer func() { _ = c.Close() }()
	ran := map[script]bool{}
	var mu sync.Mutex
	c.AddHook(hook{before: func(cmd redis.Cmder) {
		if s := scriptOfCmd(cmd); s != "" {
			mu.Lock()
			ran[s] = true
			mu.Unlock()
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runScripts(t, ctx, c, "rl-test:load-scripts")
	require.NoError(t, c.FlushDB(ctx).Err())
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []script{takeScript, dropScript, renewScript, acquireScript, releaseScript, inspectScript} {
		require.True(t, ran[s], "the library ran no %s script", s)
	}
}

// scriptOfCmd is scriptOf for a command as a go-redis hook sees it.
func scriptOfCmd(cmd redis.Cmder) script {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	name, _ := args[0].(string)
	text, _ := args[1].(string)
	return scriptOf(name, text)
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

// Every script the library runs is one of the files of lua/, joined as
// scripts.go joins them, and each operation runs the script expected of
// it, whether by EVALSHA or by the EVAL that follows NOSCRIPT (Redis
// emptied its script cache), as a go-redis hook sees it and as the bytes
// on the connection hold it.
func TestScripts_RecognisedByName(t *testing.T) {
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
		if s := scriptOfCmd(cmd); s != "" {
			mu.Lock()
			hooked = append(hooked, s)
			mu.Unlock()
		}
	}})
	byBytes := func() []script {
		var seen []script
		for _, w := range writes {
			for len(w) > 0 {
				cmd, n, _ := parseCommand(w)
				if n == 0 {
					break
				}
				if len(cmd) >= 2 {
					if s := scriptOf(cmd[0], cmd[1]); s != "" {
						seen = append(seen, s)
					}
				}
				w = w[n:]
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
		want := []script{takeScript, "pttl", dropScript, acquireScript, renewScript, inspectScript, "fenced_set", releaseScript,
			acquireScript, renewScript, "pttl", releaseScript}
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
	texts, err := scriptTexts()
	require.NoError(t, err)
	var sha string
	for text, s := range texts {
		if s == dropScript && len(text) == 40 {
			sha = text
		}
	}
	run := resp("evalsha", sha, "2", "k", "{k}:rl1:places:k", "300")
	assert.True(t, sentScript(dropScript, "300")(run))
	assert.True(t, sentScript(dropScript, "k")(run))
	assert.False(t, sentScript(dropScript, "30")(run))
	assert.False(t, sentScript(takeScript, "")(run))
	assert.True(t, sentScript(dropScript, "")(append(resp("ping"), run...)), "the second command of a pipeline")
	assert.True(t, sentScript(dropScript, "")(run[:len(run)-5]), "a run cut short")
	assert.Equal(t, script("?"), scriptOf("EVALSHA", "0123456789abcdef0123456789abcdef01234567"), "a script that is not the library's")
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
