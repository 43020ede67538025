package main

import (
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const runtimeGOOS = runtime.GOOS

// manyKeys returns n distinct keys.
func manyKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	return keys
}

// parseRun takes flags before, between and after the KEYs, several KEYs as
// a set in the order given (up to 64), the defaults, -n as a wait
// of 0, -w and -wait in seconds (fractions allowed, as flock's -w) or as
// a duration, -s, -permits, -q, -holder, -c's command line run by
// /bin/sh -c, -namespace, the Redis URL from -redis, else REDIS_URL, else
// the default; the command keeps its own flags and "--".
func TestParseRun(t *testing.T) {
	env := func(url string) func(string) string {
		return func(k string) string {
			if k == "REDIS_URL" {
				return url
			}
			return ""
		}
	}
	defaults := runConfig{
		keys: []string{"k"}, argv: []string{"true"}, ttl: 30 * time.Second, wait: -1, conflict: 1,
		grace: 10 * time.Second, fenceEnv: "REDISLOCK_FENCE", tokenEnv: "REDISLOCK_TOKEN", redisURL: "redis://127.0.0.1:6379",
	}
	with := func(change func(*runConfig)) runConfig {
		c := defaults
		change(&c)
		return c
	}
	for _, tc := range []struct {
		args []string
		url  string // REDIS_URL
		want runConfig
	}{
		{[]string{"k", "--", "ls", "-l", "--", "x"}, "", with(func(c *runConfig) { c.argv = []string{"ls", "-l", "--", "x"} })},
		{[]string{"-ttl", "2s", "k", "-n", "-E", "9", "-grace=1s", "-redis", "redis://h:1", "--", "true"}, "redis://env:2",
			with(func(c *runConfig) {
				c.ttl, c.wait, c.conflict, c.grace, c.redisURL = 2*time.Second, 0, 9, time.Second, "redis://h:1"
			})},
		{[]string{"-wait", "5s", "k", "--", "true"}, "redis+cluster://env:2",
			with(func(c *runConfig) { c.wait, c.redisURL = 5*time.Second, "redis+cluster://env:2" })},
		{[]string{"-w", "2.5", "k", "--", "true"}, "", with(func(c *runConfig) { c.wait = 2500 * time.Millisecond })},
		{[]string{"-w", "0", "k", "--", "true"}, "", with(func(c *runConfig) { c.wait = 0 })},
		{[]string{"-w", "1m30s", "k", "--", "true"}, "", with(func(c *runConfig) { c.wait = 90 * time.Second })},
		{[]string{"-wait", "10", "k", "--", "true"}, "", with(func(c *runConfig) { c.wait = 10 * time.Second })},
		{[]string{"-s", "-q", "k", "--", "true"}, "", with(func(c *runConfig) { c.shared, c.quiet = true, true })},
		{[]string{"-x", "k", "--", "true"}, "", defaults},
		{[]string{"-permits", "3", "k", "--", "true"}, "", with(func(c *runConfig) { c.permits = 3 })},
		{[]string{"-holder", "nightly report", "k", "--", "true"}, "", with(func(c *runConfig) { c.holder = holder{text: "nightly report", set: true} })},
		{[]string{"-holder=", "k", "--", "true"}, "", with(func(c *runConfig) { c.holder = holder{set: true} })},
		{[]string{"-holder-command", "k", "--", "true"}, "", with(func(c *runConfig) { c.holder.command = true })},
		{[]string{"-namespace", "app:", "k", "--", "true"}, "", with(func(c *runConfig) { c.namespace = "app:" })},
		{[]string{"k", "-c", "echo a; echo b"}, "", with(func(c *runConfig) { c.argv = []string{"/bin/sh", "-c", "echo a; echo b"} })},
		{[]string{"-c", "exit 3", "k"}, "", with(func(c *runConfig) { c.argv = []string{"/bin/sh", "-c", "exit 3"} })},
		// Several KEYs are one set, in the order given, flags between them.
		{[]string{"b", "-n", "a", "c", "--", "true"}, "", with(func(c *runConfig) { c.keys, c.wait = []string{"b", "a", "c"}, 0 })},
		{[]string{"-s", "a", "b", "-c", "true"}, "", with(func(c *runConfig) {
			c.keys, c.shared, c.argv = []string{"a", "b"}, true, []string{"/bin/sh", "-c", "true"}
		})},
		{append(manyKeys(64), "--", "true"), "", with(func(c *runConfig) { c.keys = manyKeys(64) })},
	} {
		c, err := parseRun(tc.args, env(tc.url))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
		} else if !reflect.DeepEqual(c, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.args, c, tc.want)
		}
	}
}

// The holder description names the program (the file name of COMMAND,
// without its arguments, which may hold secrets), the host and the pid;
// -holder-command names the whole command line instead, -holder stores
// its text as it is. It stays within the library's 200 bytes of printable
// UTF-8 (WithHolder's rule) for long commands and commands with newlines,
// tabs or escapes in their arguments (each such character becomes '?').
func TestDescription(t *testing.T) {
	argv := []string{"/usr/local/bin/migrate", "up", "--password=S3cr3t"}
	equal(t, description(runConfig{argv: argv}, "web-3", 4711), "redislock run migrate on web-3 pid 4711")
	equal(t, description(runConfig{argv: []string{"./migrate"}}, "web\n3", 4711), "redislock run migrate on web?3 pid 4711")
	equal(t, description(runConfig{argv: argv, holder: holder{command: true}}, "web-3", 4711),
		"redislock run /usr/local/bin/migrate up --password=S3cr3t on web-3 pid 4711")
	equal(t, description(runConfig{argv: argv, holder: holder{text: "nightly", set: true}}, "web-3", 4711), "nightly")
	equal(t, description(runConfig{argv: argv, holder: holder{set: true}}, "web-3", 4711), "")

	escapes := runConfig{argv: []string{"sh", "-c", "a\nb\tc\x1b[0m"}, holder: holder{command: true}}
	d := description(escapes, "web\n3", 4711)
	equal(t, d, "redislock run sh -c a?b?c?[0m on web?3 pid 4711")
	check(t, printableText(d), "printable %q", d)
	long := description(runConfig{argv: []string{"echo", strings.Repeat("é", 300)}, holder: holder{command: true}}, "web-3", 4711)
	check(t, len(long) <= maxHolder, "%d bytes", len(long))
	check(t, utf8.ValidString(long), "valid UTF-8: %q", long)
	check(t, strings.HasSuffix(long, "... on web-3 pid 4711"), "cut: %q", long)
	check(t, utf8.ValidString(description(runConfig{argv: []string{"\xff"}}, "h", 1)), "valid UTF-8")
}

// -w and -wait take a number of seconds, fractions allowed, or a duration
// with its unit; not NaN, infinities, or more seconds than a duration
// holds (a negative value parses; parseRun rejects it).
func TestWaitValue(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"0": 0, "0.5": 500 * time.Millisecond, "2": 2 * time.Second, "1e1": 10 * time.Second,
		"250ms": 250 * time.Millisecond, "1m30s": 90 * time.Second, "-1": -time.Second,
	} {
		var d time.Duration
		if err := (waitValue{&d}).Set(s); err != nil || d != want {
			t.Errorf("Set(%q): %v, %v; want %v", s, d, err, want)
		}
	}
	for _, s := range []string{"", "soon", "NaN", "Inf", "-Inf", "1e300", "10 s"} {
		var d time.Duration
		if err := (waitValue{&d}).Set(s); err == nil {
			t.Errorf("Set(%q) = %v, want an error", s, d)
		}
	}
}

// COMMAND's environment has the key, the fence and the token under their
// names (a later entry of a name wins, as exec does), and every key and
// every key's fence, one a line, in the order of the KEYs: REDISLOCK_KEYS,
// and the fence's name with an S (REDISLOCK_FENCES); for one key, the key
// and its fence. A name "" gives none, and removes an inherited variable of
// the default name (an outer run's), so that COMMAND never takes another
// lock's fence or token for this one's.
func TestCommandEnv(t *testing.T) {
	outer := []string{"PATH=/bin", "REDISLOCK_FENCE=999", "REDISLOCK_FENCES=999\n998", "REDISLOCK_TOKEN=outer"}
	for _, tc := range []struct {
		c      runConfig
		fences []int64
		want   []string
	}{
		{runConfig{keys: []string{"k"}, fenceEnv: defaultFenceEnv, tokenEnv: defaultTokenEnv}, []int64{7},
			append(slices.Clone(outer), "REDISLOCK_KEY=k", "REDISLOCK_KEYS=k", "REDISLOCK_FENCE=7", "REDISLOCK_FENCES=7", "REDISLOCK_TOKEN=tok")},
		{runConfig{keys: []string{"k"}, fenceEnv: "", tokenEnv: ""}, []int64{7}, []string{"PATH=/bin", "REDISLOCK_KEY=k", "REDISLOCK_KEYS=k"}},
		{runConfig{keys: []string{"k"}, fenceEnv: "MY_FENCE", tokenEnv: ""}, []int64{7},
			[]string{"PATH=/bin", "REDISLOCK_FENCE=999", "REDISLOCK_FENCES=999\n998", "REDISLOCK_KEY=k", "REDISLOCK_KEYS=k", "MY_FENCE=7", "MY_FENCES=7"}},
		{runConfig{keys: []string{"b", "a c", "d"}, fenceEnv: defaultFenceEnv, tokenEnv: defaultTokenEnv}, []int64{7, 12, 3},
			append(slices.Clone(outer), "REDISLOCK_KEY=b", "REDISLOCK_KEYS=b\na c\nd", "REDISLOCK_FENCE=7", "REDISLOCK_FENCES=7\n12\n3", "REDISLOCK_TOKEN=tok")},
		{runConfig{keys: []string{"b", "a"}, fenceEnv: "", tokenEnv: defaultTokenEnv}, []int64{7, 12},
			[]string{"PATH=/bin", "REDISLOCK_TOKEN=outer", "REDISLOCK_KEY=b", "REDISLOCK_KEYS=b\na", "REDISLOCK_TOKEN=tok"}},
	} {
		if env := commandEnv(slices.Clone(outer), tc.c, tc.fences, "tok"); !slices.Equal(env, tc.want) {
			t.Errorf("%+v:\n got %q\nwant %q", tc.c, env, tc.want)
		}
	}
}
