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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	isLinux = runtimeGOOS == "linux"
	sigterm = syscall.SIGTERM
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Bad command lines exit with status 2 and print the usage after what was
// wrong, on stderr; nothing reaches Redis (its database stays empty).
func TestUsage_BadInputExits2AndWritesNothing(t *testing.T) {
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
		{[]string{"run", "-redis", url, "k"}, "no -- between KEY and the command"},
		{[]string{"run", "-redis", url, "", "--", "true"}, "empty KEY"},
		{[]string{"run", "-redis", url, "k", "true"}, "one KEY expected"},
		{[]string{"run", "-redis", url, "k", "--"}, "no command after --"},
		{[]string{"run", "-redis", url, "-ttl", "3x", "k", "--", "true"}, `invalid value "3x" for flag -ttl`},
		{[]string{"run", "-redis", url, "-ttl", "0", "k", "--", "true"}, "-ttl 0s: must be at least 1ms"},
		{[]string{"run", "-redis", url, "-wait", "soon", "k", "--", "true"}, `invalid value "soon" for flag -wait`},
		{[]string{"run", "-redis", url, "-wait", "-1s", "k", "--", "true"}, "-wait -1s: must not be negative"},
		{[]string{"run", "-redis", url, "-n", "-wait", "1s", "k", "--", "true"}, "-n and -wait"},
		{[]string{"run", "-redis", url, "-grace", "-1s", "k", "--", "true"}, "-grace -1s"},
		{[]string{"run", "-redis", url, "-E", "256", "k", "--", "true"}, "-E 256"},
		{[]string{"run", "-redis", url, "-E", "x", "k", "--", "true"}, `invalid value "x" for flag -E`},
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
		{[]string{"run", "-redis", "redis://127.0.0.1:0", "k", "--", "true"}, `port "0"`},
		{[]string{"run", "-redis", "redis://127.0.0.1:65536/15", "k", "--", "true"}, `port "65536"`},
		{[]string{"run", "-redis", "redis://127.0.0.1:x", "k", "--", "true"}, "invalid port"},
		{[]string{"run", "-redis", "redis+sentinel://127.0.0.1:99999?master_name=m", "k", "--", "true"}, `port "99999"`},
		{[]string{"run", "-redis", "redis+sentinel://" + redisAddr + "?master_name=m&addr=127.0.0.1:0", "k", "--", "true"}, `port "0"`},
		{[]string{"run", "-redis", "redis+cluster://127.0.0.1:65536", "k", "--", "true"}, `port "65536"`},
		{[]string{"run", "-redis", "redis+cluster://" + redisAddr + "?addr=127.0.0.1:-1", "k", "--", "true"}, `port "-1"`},
		{[]string{"run", "-redis", url + "?addr=127.0.0.1:http", "k", "--", "true"}, `port "http"`},
		{[]string{"status", "-redis", "redis://127.0.0.1:99999", "k"}, `port "99999"`},
		{[]string{"status", "-redis", "redis+cluster://" + redisAddr + "?addr=127.0.0.1:0", "k"}, `port "0"`},
		// KEY is given once, and so is every flag (no "last one wins"):
		// there is no -key flag, and a second KEY is an error.
		{[]string{"run", "-redis", url, "-key", "k", "--", "true"}, "flag provided but not defined: -key"},
		{[]string{"run", "-redis", url, "k", "k2", "--", "true"}, "one KEY expected"},
		{[]string{"run", "-redis", url, "-ttl", "1s", "k", "-ttl", "2s", "--", "true"}, "-ttl given twice"},
		{[]string{"run", "-redis", url, "-n", "-n", "k", "--", "true"}, "-n given twice"},
		{[]string{"run", "-redis", url, "-E", "3", "-E=3", "k", "--", "true"}, "-E given twice"},
		{[]string{"run", "-redis", url, "-redis", url, "k", "--", "true"}, "-redis given twice"},
		{[]string{"run", "-redis", url, "-fence-env", "", "--fence-env", "", "k", "--", "true"}, "-fence-env given twice"},
		{[]string{"status", "-redis", url, "-json", "k", "-json"}, "-json given twice"},
		{[]string{"status", "-redis", url, "-redis", url, "k"}, "-redis given twice"},
		{[]string{"status"}, "one KEY expected, got 0"},
		{[]string{"status", "-redis", url, "a", "b"}, "one KEY expected, got 2"},
		{[]string{"status", "-redis", url, ""}, "empty KEY"},
		{[]string{"status", "-redis", url, "-ttl", "1s", "k"}, "flag provided but not defined: -ttl"},
		{[]string{"status", "-redis", "redis://", "k"}, "no host"},
	} {
		code, out, stderr := runCLI(t, tc.args...)
		assert.Equal(t, exitUsage, code, "%q: %s", tc.args, stderr)
		assert.Empty(t, out, "%q", tc.args)
		assert.True(t, strings.HasPrefix(stderr, "redislock: "), "%q: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%q", tc.args)
		assert.Contains(t, stderr, usage, "%q", tc.args)
	}
	// A bad REDIS_URL is a usage error too.
	p := startEnv(t, []string{"REDIS_URL=redis//" + redisAddr}, "run", "k", "--", "true")
	assert.Equal(t, exitUsage, p.wait(10*time.Second), p.errors())
	assert.Contains(t, p.errors(), "REDIS_URL")

	n, err := c.DBSize(context.Background()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a bad command line wrote to Redis")
}

// help, -h and --help, also after a subcommand, print the usage on stdout
// and exit 0.
func TestUsage_HelpExits0(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"run", "-h"}, {"run", "k", "-h", "--", "true"}, {"status", "-help"}} {
		code, out, stderr := runCLI(t, args...)
		assert.Equal(t, 0, code, "%q", args)
		assert.Equal(t, usage, out, "%q", args)
		assert.Empty(t, stderr, "%q", args)
	}
}

// The package doc shows the usage text, word for word.
func TestUsage_InPackageDoc(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var doc strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(l, "//\t"); ok {
			doc.WriteString(s + "\n")
		} else if l == "//" {
			doc.WriteString("\n")
		}
	}
	assert.Contains(t, doc.String(), usage)
}
