package redislock_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

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
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	return code
}

// leakedGoroutines returns the stacks of the goroutines other than its
// caller's and the runtime's signal handling that are still there after
// up to 5 s, or "".
func leakedGoroutines() string {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
		var others []string
		for _, g := range stacks[1:] { // the first is the caller's
			if !strings.Contains(g, "os/signal.signal_recv") && !strings.Contains(g, "runtime.ensureSigM") {
				others = append(others, g)
			}
		}
		if len(others) == 0 || time.Now().After(deadline) {
			return strings.Join(others, "\n\n")
		}
	}
}
