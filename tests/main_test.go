package tests

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests by 5 s: every
// lease keeper, abandoned call and helper process watcher must have ended.
// (goleak alone gives up after about 0.4 s; a go-redis client closed while
// it redialled a killed server ends its dial loop within a second.)
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		err := goleak.Find()
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); err = goleak.Find() {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitsInParallel marks t as a test that spends its time waiting (for a
// failover, a read timeout, a delayed copy, a lease to run out), not
// computing, and whose timing bounds have room (hundreds of milliseconds or
// more): it runs in parallel with the other such tests, two at a time
// (-parallel is GOMAXPROCS), after all the others. That keeps the suite
// within about 5 minutes on 2 cores. A test that counts goroutines
// (noLibraryGoroutinesLeft, waitGoroutinesGone), uses toxiproxy (its
// clean-up waits for toxiproxy's goroutines), runs several processes or
// tight loops, or bounds a latency to tens of milliseconds must not call
// it.
func waitsInParallel(t *testing.T) { t.Parallel() }
