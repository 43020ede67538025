package redislock_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// TestMain starts the redis-servers the examples run on (see
// exampleClient), and fails the run if any goroutine outlives the tests:
// every lease keeper, abandoned call and process reaper must have ended.
// Without redis-server the examples are skipped, unless $CI is "true".
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	stop, err := startExampleServers()
	if err != nil {
		if !errors.Is(err, redistest.ErrNotInstalled) || os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "redis-server for the examples:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, err, "(the examples are skipped)")
		skip := flag.Lookup("test.skip")
		if s := skip.Value.String(); s != "" {
			_ = skip.Value.Set(s + "|^Example")
		} else {
			_ = skip.Value.Set("^Example")
		}
	}
	code := m.Run()
	stop()
	if code == 0 {
		if leaked := redistest.LeakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	return code
}
