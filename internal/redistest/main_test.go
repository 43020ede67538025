package redistest

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the run if any goroutine outlives the tests, as in the root
// package: process reapers, failover and cluster clients and their pubsub
// listeners must all have ended.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := LeakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}
