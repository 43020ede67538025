package redislock

import (
	"context"
	"sync"
)

// background counts the work a Locker does in the background that Redis must
// see: releases that go on after Release returned, places given up by
// Obtains that ended, locks taken by calls abandoned at their deadline and
// given back when their reply comes. Shutdown waits for them.
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // made by a wait while n > 0, closed when n drops to 0
}

// begin counts a piece of background work; end ends it.
func (c *background) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
}

func (c *background) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// run runs f in a goroutine, as background work.
func (c *background) run(f func()) {
	c.begin()
	go func() {
		defer c.end()
		f()
	}()
}

// wait waits until no background work is left, or ctx ends.
func (c *background) wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return c.wait(ctx) // work begun by the work that ended
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown waits until the clean-up that the Locker does in the background
// has reached Redis, or ctx ends (it then returns ctx's error): releases
// that go on after Release returned (its ctx had ended), places in line
// given up by Obtains that ended, and locks that acquisitions abandoned at
// their deadline took and give back. Without it, a process that exits right
// after an Obtain gave up may leave its place in line for up to a second
// (placeLease: see docs/how-it-works.md), and be handed the key meanwhile
// for that long. It also ends the Locker's pub/sub subscriptions, once no
// Obtain waits (within 100 ms, or once go-redis gives up on a network that
// does not answer), and waits for them, so that no goroutine of the Locker
// is left when it returns nil (but for the idle ones of New's note, which
// end within 20 ms). Call it before the process exits, after the
// last Release, with a deadline: each piece of clean-up goes on until Redis
// answers or go-redis gives up on it, which with a master that does not
// answer takes as long as go-redis may take with a command and its
// retries, and a second (at least 5 s; 15 s with go-redis v9.0's default
// options, more with later releases' longer default timeouts). The Locker
// stays usable; leases kept alive are not touched.
func (l *Locker) Shutdown(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := l.background.wait(ctx); err != nil {
		return err
	}
	return l.lines.subscriptionEnded(ctx)
}
