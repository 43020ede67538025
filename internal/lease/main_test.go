package lease

import (
	"testing"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// TestMain fails the run if any goroutine outlives the tests: attempts,
// withdrawals, releases and subscriptions must all have ended.
func TestMain(m *testing.M) { redistest.Main(m) }
