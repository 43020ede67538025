package scripts

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
)

// goid returns the calling goroutine's number, from its stack trace.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return string(bytes.Fields(buf)[1])
}

// Every function given to spawn runs, also when many are given at once.
func TestSpawn_RunsEveryCall(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 100 {
		wg.Add(1)
		spawn(func() { <-release; wg.Done() }) // all 100 run at once
	}
	close(release)
	wg.Wait()
}

// A call that comes while a goroutine that ran an earlier one waits runs on
// that goroutine; an idle goroutine ends after workerIdle.
func TestSpawn_KeepsAGoroutineForTheNextCall(t *testing.T) {
	waitNoWorker(t) // those of other tests
	run := func() string {
		id := make(chan string)
		spawn(func() { id <- goid() })
		return <-id
	}
	seen := map[string]bool{run(): true}
	reused := false
	for i := 0; i < 10 && !reused; i++ { // it must be parked first
		time.Sleep(time.Millisecond)
		id := run()
		reused, seen[id] = seen[id], true
	}
	if !reused {
		t.Errorf("no call ran on a goroutine that waited for the next (goroutines %v)", seen)
	}
	waitNoWorker(t)
}

// waitNoWorker waits until no goroutine waits in work, for a second at
// most.
func waitNoWorker(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		if !bytes.Contains(buf, []byte("scripts.work(")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine waits for a call a second after the last (workerIdle %v):\n%s", workerIdle, buf)
		}
		time.Sleep(workerIdle / 4)
	}
}
