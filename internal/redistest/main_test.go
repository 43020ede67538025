package redistest

import "testing"

// TestMain fails the run if any goroutine outlives the tests, as in the root
// package: process reapers, failover and cluster clients and their pubsub
// listeners must all have ended.
func TestMain(m *testing.M) { Main(m) }
