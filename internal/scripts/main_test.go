package scripts

import (
	"fmt"
	"os"
	"testing"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// TestMain fails the run if any goroutine outlives the tests: attempts,
// withdrawals, releases and subscriptions must all have ended.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := redistest.LeakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}
