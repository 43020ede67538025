package redislock

import "time"

// workerIdle is how long a goroutine that ran a bounded call waits for the
// next one before it ends.
const workerIdle = 20 * time.Millisecond

// tasks hands a call to a goroutine waiting in work: a send succeeds only
// when one is waiting.
var tasks = make(chan func())

// spawn runs f in a goroutine of its own: one that has run a call before
// and waits for the next, or a new one. A goroutine kept for the next call
// saves the next its creation and the growth of its stack through
// go-redis's, which under load was an eighth of a call's CPU. A kept one
// ends after workerIdle without a call.
func spawn(f func()) {
	select {
	case tasks <- f:
	default:
		go work(f)
	}
}

// work runs f, then the calls it is handed, until none came for workerIdle.
func work(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(workerIdle)
		select {
		case f = <-tasks:
		case <-idle.C:
			return
		}
	}
}
