package redistest

import (
	"runtime"
	"strings"
	"time"
)

// LeakedGoroutines returns the stacks of the goroutines other than its
// caller's and the runtime's signal handling that are still there after
// up to 5 s, or "". A TestMain calls it after m.Run to fail a run whose
// goroutines outlive its tests, with the standard library alone.
func LeakedGoroutines() string {
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
