//go:build unix

package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	isLinux = runtimeGOOS == "linux"
	sigterm = syscall.SIGTERM
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// usageLine checks that stderr is one usage error line: "redislock: ",
// what is wrong, and where the usage is; no usage text, no stack trace.
func usageLine(t *testing.T, stderr string, what ...any) {
	t.Helper()
	if !strings.HasPrefix(stderr, "redislock: ") || !strings.HasSuffix(stderr, "; run 'redislock help' for usage\n") ||
		strings.Count(stderr, "\n") != 1 {
		t.Errorf("%swant one usage error line, got %q", label(what), stderr)
	}
}

// Bad command lines exit with status 2 and print one line on stderr: what
// is wrong, and "run 'redislock help' for usage" (not the usage itself);
// nothing reaches Redis (its database stays empty). Bad URLs are among
// them: a port out of 1..65535, a database below 0, a pool_size out of
// range (go-redis panics on a negative one), and so are flags in conflict
// with each other (-n, -w and -wait; -s, -x and -permits; -holder and
// -holder-command; -c and -- COMMAND), and sets of KEYs that cannot be
// one: a KEY given twice, more than 64, permits for several.
func TestUsage_BadInputExits2WithOneLine(t *testing.T) {
	t.Parallel()
	needRedis(t)
	const db = 15 // only these tests use it
	url := testRedisURL(db)
	c := redis.NewClient(&redis.Options{Addr: redisAddr, DB: db})
	defer c.Close()
	for _, tc := range []struct {
		args []string
		want string // in the message
	}{
		{nil, "no subcommand"},
		{[]string{"lock"}, `unknown subcommand "lock"`},
		{[]string{"run"}, "no KEY"},
		{[]string{"run", "-redis", url}, "no KEY"},
		{[]string{"run", "-redis", url, "--", "true"}, "no KEY"},
		{[]string{"run", "-redis", url, "k"}, "no -- between KEY and the command (or -c 'command line')"},
		{[]string{"run", "-redis", url, "", "--", "true"}, "empty KEY"},
		{[]string{"run", "-redis", url, "k", "true"}, "no -- between KEY and the command"},
		{[]string{"run", "-redis", url, "k", "--"}, "no command after --"},
		{[]string{"run", "-redis", url, "-ttl", "3x", "k", "--", "true"}, `invalid value "3x" for flag -ttl`},
		{[]string{"run", "-redis", url, "-ttl", "0", "k", "--", "true"}, "-ttl 0s: must be at least 1ms"},
		{[]string{"run", "-redis", url, "-wait", "soon", "k", "--", "true"}, `invalid value "soon" for flag -wait`},
		{[]string{"run", "-redis", url, "-wait", "-1s", "k", "--", "true"}, "-wait -1s: must not be negative"},
		{[]string{"run", "-redis", url, "-w", "-0.5", "k", "--", "true"}, "-w -500ms: must not be negative"},
		{[]string{"run", "-redis", url, "-w", "NaN", "k", "--", "true"}, `invalid value "NaN" for flag -w`},
		{[]string{"run", "-redis", url, "-w", "soon", "k", "--", "true"}, `redislock: run: invalid value "soon" for flag -w: want seconds (2.5) or a duration (1m30s); run 'redislock help' for usage`},
		{[]string{"run", "-redis", url, "-n", "-wait", "1s", "k", "--", "true"}, "-n and -wait: give one of them"},
		{[]string{"run", "-redis", url, "-w", "1", "-n", "k", "--", "true"}, "-n and -w: give one of them"},
		{[]string{"run", "-redis", url, "-w", "1", "-wait", "1s", "k", "--", "true"}, "-w and -wait: give one of them"},
		{[]string{"run", "-redis", url, "-grace", "-1s", "k", "--", "true"}, "-grace -1s"},
		{[]string{"run", "-redis", url, "-E", "256", "k", "--", "true"}, "-E 256"},
		{[]string{"run", "-redis", url, "-E", "x", "k", "--", "true"}, `invalid value "x" for flag -E`},
		{[]string{"run", "-redis", url, "-s", "-permits", "2", "k", "--", "true"}, "-s and -permits: give one of them"},
		{[]string{"run", "-redis", url, "-x", "-s", "k", "--", "true"}, "-s and -x: give one of them"},
		{[]string{"run", "-redis", url, "-permits", "0", "k", "--", "true"}, "-permits 0: must be at least 1"},
		{[]string{"run", "-redis", url, "-permits", "-3", "k", "--", "true"}, "-permits -3: must be at least 1"},
		{[]string{"run", "-redis", url, "-holder", "a\nb", "k", "--", "true"}, `-holder "a\nb": must be printable`},
		{[]string{"run", "-redis", url, "-holder", strings.Repeat("x", 201), "k", "--", "true"}, "at most 200 bytes"},
		{[]string{"run", "-redis", url, "-holder", "x", "-holder-command", "k", "--", "true"}, "-holder and -holder-command: give one of them"},
		{[]string{"run", "-redis", url, "-c", "true", "k", "--", "true"}, "-c and -- COMMAND: give one of them"},
		{[]string{"run", "-redis", url, "-c", "", "k"}, "-c: empty command line"},
		{[]string{"run", "-redis", url, "-fence-env", "A=B", "k", "--", "true"}, "not an environment variable name"},
		{[]string{"run", "-redis", url, "-token-env", "REDISLOCK_FENCE", "k", "--", "true"}, "both REDISLOCK_FENCE"},
		{[]string{"run", "-redis", url, "-bogus", "k", "--", "true"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "-redis", "http://" + redisAddr, "k", "--", "true"}, `unknown scheme "http"`},
		{[]string{"run", "-redis", url + "?bogus=1", "k", "--", "true"}, "bogus"},
		{[]string{"run", "-redis", "redis+sentinel://" + redisAddr, "k", "--", "true"}, "master_name"},
		{[]string{"run", "-redis", redisAddr, "k", "--", "true"}, "-redis"},
		{[]string{"run", "-redis", "", "k", "--", "true"}, "-redis: empty URL"},
		{[]string{"status", "-redis=", "k"}, "-redis: empty URL"},
		// Ports out of 1..65535, of the host or of an addr parameter, in
		// every kind of URL.
		{[]string{"run", "-redis", "redis://127.0.0.1:0", "k", "--", "true"}, `-redis "redis://127.0.0.1:0": 127.0.0.1:0: port "0"`},
		{[]string{"run", "-redis", "redis://127.0.0.1:65536/15", "k", "--", "true"}, `port "65536"`},
		{[]string{"run", "-redis", "redis://127.0.0.1:x", "k", "--", "true"}, "invalid port"},
		{[]string{"run", "-redis", "redis+sentinel://127.0.0.1:99999?master_name=m", "k", "--", "true"}, `port "99999"`},
		{[]string{"run", "-redis", "redis+sentinel://" + redisAddr + "?master_name=m&addr=127.0.0.1:0", "k", "--", "true"}, `port "0"`},
		{[]string{"run", "-redis", "redis+cluster://127.0.0.1:65536", "k", "--", "true"}, `port "65536"`},
		{[]string{"run", "-redis", "redis+cluster://" + redisAddr + "?addr=127.0.0.1:-1", "k", "--", "true"}, `port "-1"`},
		{[]string{"run", "-redis", url + "?addr=127.0.0.1:http", "k", "--", "true"}, `port "http"`},
		{[]string{"status", "-redis", "redis://127.0.0.1:99999", "k"}, `port "99999"`},
		{[]string{"status", "-redis", "redis+cluster://" + redisAddr + "?addr=127.0.0.1:0", "k"}, `port "0"`},
		// A database below 0 (go-redis took it as 0) and pool options
		// out of range (go-redis panics on a negative pool_size).
		{[]string{"run", "-redis", "redis://" + redisAddr + "/-1", "k", "--", "true"}, "database -1: want 0 or more"},
		{[]string{"status", "-redis", "redis://" + redisAddr + "/-1", "k"}, "database -1: want 0 or more"},
		{[]string{"run", "-redis", url + "?pool_size=-5", "k", "--", "true"}, "pool_size=-5: want a number in 0..10000"},
		{[]string{"status", "-redis", url + "?pool_size=-5", "k"}, "pool_size=-5"},
		{[]string{"run", "-redis", "redis+sentinel://" + redisAddr + "?master_name=m&pool_size=-1", "k", "--", "true"}, "pool_size=-1"},
		{[]string{"run", "-redis", "redis+cluster://" + redisAddr + "?pool_size=-5", "k", "--", "true"}, "pool_size=-5"},
		{[]string{"run", "-redis", url + "?min_idle_conns=-1", "k", "--", "true"}, "min_idle_conns=-1"},
		// Each KEY is given once, and so is every flag (no "last one
		// wins"): there is no -key flag. Several KEYs are a set: 1 to 64
		// of them, without a newline in any (one KEY too), none the
		// library's own (with "}:rl1:"), and not for a semaphore.
		{[]string{"run", "-redis", url, "-key", "k", "--", "true"}, "flag provided but not defined: -key"},
		{[]string{"run", "-redis", url, "k", "k", "--", "true"}, `KEY "k" given twice`},
		{[]string{"run", "-redis", url, "a", "b", "-c", "true", "a"}, `KEY "a" given twice`},
		{[]string{"run", "-redis", url, "a", "", "--", "true"}, "empty KEY"},
		{[]string{"run", "-redis", url, "-permits", "2", "a", "b", "--", "true"}, "-permits: a semaphore is one KEY, got 2"},
		{[]string{"run", "-redis", url, "a", "-permits", "2", "b", "-c", "true"}, "-permits: a semaphore is one KEY, got 2"},
		{append(append([]string{"run", "-redis", url}, manyKeys(65)...), "--", "true"), "65 KEYs: at most 64"},
		{[]string{"run", "-redis", url, "a", "b\nc", "--", "true"}, `KEY "b\nc": a KEY must not hold a newline`},
		{[]string{"run", "-redis", url, "b\nc", "--", "true"}, `KEY "b\nc": a KEY must not hold a newline`},
		{[]string{"run", "-redis", url, "a}:rl1:x", "--", "true"}, `KEY "a}:rl1:x": keys with "}:rl1:" in them are the library's own`},
		{[]string{"run", "-redis", url, "-permits", "2", "a}:rl1:x", "--", "true"}, `keys with "}:rl1:" in them`},
		{[]string{"status", "-redis", url, "a}:rl1:x"}, `keys with "}:rl1:" in them`},
		{[]string{"run", "-redis", url, "a", "b", "true"}, "no -- between KEY and the command"},
		{[]string{"run", "-redis", url, "-token-env", "REDISLOCK_FENCES", "a", "b", "--", "true"}, "-token-env REDISLOCK_FENCES: the variable of the fences"},
		{[]string{"run", "-redis", url, "-fence-env", "REDISLOCK_KEYS", "k", "--", "true"}, "REDISLOCK_KEYS is the keys'"},
		{[]string{"run", "-redis", url, "-ttl", "1s", "k", "-ttl", "2s", "--", "true"}, "-ttl given twice"},
		{[]string{"run", "-redis", url, "-n", "-n", "k", "--", "true"}, "-n given twice"},
		{[]string{"run", "-redis", url, "-w", "60", "k", "-w", "600", "--", "true"}, "-w given twice"},
		{[]string{"run", "-redis", url, "-E", "3", "-E=3", "k", "--", "true"}, "-E given twice"},
		{[]string{"run", "-redis", url, "-redis", url, "k", "--", "true"}, "-redis given twice"},
		{[]string{"run", "-redis", url, "-fence-env", "", "--fence-env", "", "k", "--", "true"}, "-fence-env given twice"},
		{[]string{"run", "-redis", url, "-c", "true", "-c", "true", "k"}, "-c given twice"},
		{[]string{"status", "-redis", url, "-json", "k", "-json"}, "-json given twice"},
		{[]string{"status", "-redis", url, "-redis", url, "k"}, "-redis given twice"},
		{[]string{"status"}, "no KEY"},
		{[]string{"status", "-redis", url, ""}, "empty KEY"},
		{[]string{"status", "-redis", url, "a", ""}, "empty KEY"},
		{[]string{"status", "-redis", url, "-ttl", "1s", "k"}, "flag provided but not defined: -ttl"},
		{[]string{"status", "-redis", "redis://", "k"}, "no host"},
		// release: a -token that is a token of the library, KEYs as run's
		// (a newline aside); nothing sent, Redis down or not.
		{[]string{"release", "-redis", url, "k"}, "release: no -token TOKEN"},
		{[]string{"release", "-redis", url, "-token", "", "k"}, "release: -token: empty TOKEN"},
		{[]string{"release", "-redis", url, "-token", "theirs", "k"}, `release: -token "theirs": not a token of redislock`},
		{[]string{"release", "-redis", "redis://127.0.0.1:1", "-token", "theirs", "k"}, "not a token of redislock"},
		{[]string{"release", "-redis", url, "-token", aToken}, "release: no KEY"},
		{[]string{"release", "-redis", url, "-token", aToken, ""}, "release: empty KEY"},
		{[]string{"release", "-redis", url, "-token", aToken, "k", "k"}, `release: KEY "k" given twice`},
		{[]string{"release", "-redis", url, "-token", aToken, "a}:rl1:x"}, `keys with "}:rl1:" in them`},
		{append([]string{"release", "-redis", url, "-token", aToken}, manyKeys(65)...), "65 KEYs: at most 64"},
		{[]string{"release", "-redis", url, "-token", aToken, "-token", aToken, "k"}, "-token given twice"},
		{[]string{"release", "-redis", url, "-token", aToken, "-ttl", "1s", "k"}, "flag provided but not defined: -ttl"},
		{[]string{"release", "-redis", "redis://127.0.0.1:0", "-token", aToken, "k"}, `port "0"`},
		{[]string{"release", "-redis", url, "-namespace", "a b", "-token", aToken, "k"}, `-namespace "a b": must be printable`},
		// A namespace that WithNamespace would refuse.
		{[]string{"run", "-redis", url, "-namespace", "a b", "k", "--", "true"}, `-namespace "a b": must be printable`},
		{[]string{"status", "-redis", url, "-namespace", "a\tb", "k"}, `-namespace "a\tb"`},
	} {
		code, out, stderr := runCLI(t, tc.args...)
		equal(t, code, exitUsage, "%q: %s", tc.args, stderr)
		equal(t, out, "", "%q: stdout", tc.args)
		usageLine(t, stderr, "%q", tc.args)
		contains(t, stderr, tc.want, "%q", tc.args)
	}
	// A bad REDIS_URL is a usage error too.
	p := startEnv(t, []string{"REDIS_URL=redis//" + redisAddr}, "run", "k", "--", "true")
	equal(t, p.wait(10*time.Second), exitUsage, p.errors())
	usageLine(t, p.errors())
	contains(t, p.errors(), "REDIS_URL")

	n, err := c.DBSize(context.Background()).Result()
	must(t, err)
	equal(t, n, 0, "keys written to Redis by bad command lines")
}

// The password of a Redis URL is never printed: not in a usage error about
// the URL (one that parses, one whose password does not, one with a
// password parameter), not when Redis cannot be reached, not when it
// refuses the password; redislock shows the URL with "xxxxx" for it.
func TestUsage_PasswordIsRedacted(t *testing.T) {
	t.Parallel()
	needRedis(t)
	const secret = "S3cr3tPassw0rd"
	for _, tc := range []struct {
		args []string
		code int
		want string // in the message
	}{
		{[]string{"run", "-redis", "redis://u:" + secret + "@127.0.0.1:0", "k", "--", "true"}, exitUsage, `"redis://u:xxxxx@127.0.0.1:0"`},
		{[]string{"status", "-redis", "redis://u:" + secret + "@" + redisAddr + "/-1", "k"}, exitUsage, "redis://u:xxxxx@"},
		{[]string{"run", "-redis", "redis://u:" + secret + "%zz@" + redisAddr, "k", "--", "true"}, exitUsage, "invalid password"},
		{[]string{"run", "-redis", "redis://u:12/" + secret + "@" + redisAddr, "k", "--", "true"}, exitUsage, "redis://u:xxxxx@"},
		{[]string{"run", "-redis", "redis+sentinel://" + redisAddr + "?master_name=m&password=" + secret + "&bogus=1", "k", "--", "true"}, exitUsage, "password=xxxxx"},
		{[]string{"run", "-redis", "redis://u:" + secret + "@127.0.0.1:1", "k", "--", "true"}, exitRedis, "redis redis://u:xxxxx@127.0.0.1:1: "},
		{[]string{"status", "-redis", "redis://u:" + secret + "@127.0.0.1:1", "k"}, exitRedis, "127.0.0.1:1"},
		// A user that does not exist: Redis refuses the password.
		{[]string{"run", "-redis", "redis://nobody:" + secret + "@" + redisAddr, "k", "--", "true"}, exitRedis, "redis://nobody:xxxxx@"},
		{[]string{"status", "-redis", "redis://nobody:" + secret + "@" + redisAddr, "k"}, exitRedis, "WRONGPASS"},
		{[]string{"release", "-redis", "redis://u:" + secret + "@127.0.0.1:1", "-token", aToken, "k"}, exitRedis, "redis://u:xxxxx@127.0.0.1:1"},
		{[]string{"release", "-redis", "redis://nobody:" + secret + "@" + redisAddr, "-token", aToken, "k"}, exitRedis, "WRONGPASS"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		equal(t, code, tc.code, "%q: %s", tc.args, stderr)
		lacks(t, stderr, secret, "%q", tc.args)
		contains(t, stderr, tc.want, "%q", tc.args)
	}
}

// help, -h and --help, also after a subcommand, print the usage on stdout
// and exit 0.
func TestUsage_HelpExits0(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"run", "-h"}, {"run", "k", "-h", "--", "true"}, {"status", "-help"}, {"release", "-h"}} {
		code, out, stderr := runCLI(t, args...)
		equal(t, code, 0, "%q", args)
		equal(t, out, usage, "%q", args)
		equal(t, stderr, "", "%q", args)
	}
}

// The package doc shows the usage text, word for word.
func TestUsage_InPackageDoc(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	must(t, err)
	var doc strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(l, "//\t"); ok {
			doc.WriteString(s + "\n")
		} else if l == "//" {
			doc.WriteString("\n")
		}
	}
	contains(t, doc.String(), usage)
}
