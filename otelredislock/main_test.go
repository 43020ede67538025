package otelredislock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: the Lockers'
// keepers and subscriptions, the redis-server watchers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
