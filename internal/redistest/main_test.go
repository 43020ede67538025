package redistest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if any goroutine outlives the tests, as in the root
// package: process reapers, failover and cluster clients and their pubsub
// listeners must all have ended.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
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
