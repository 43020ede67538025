package tests

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: every lease
// keeper, abandoned call and helper process watcher must have ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
