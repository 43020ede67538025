package redistest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
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

// Main runs m's tests and exits: with their code, or 1 when they passed
// but goroutines outlive them (see LeakedGoroutines). A package's TestMain
// calls it.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := LeakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}
