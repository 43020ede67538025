package scripts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounded runs f, a call to Redis, and returns when f returns or when ctx is
// done, whichever comes first.
//
// It exists because go-redis does not stop a socket read when ctx's deadline
// passes unless the client was created with ContextTimeoutEnabled: against a
// frozen Redis or a black-holed network a call would otherwise block for the
// client's ReadTimeout and retries, far past the caller's deadline. Every
// Redis call of the library whose ctx can end goes through Bounded, so that
// its deadlines hold whatever the client's options.
//
// f is always called, also when ctx has ended already (go-redis then sends
// nothing and returns ctx's error), so that what f finishes is finished.
//
// To do so, f runs in another goroutine (see spawn). When ctx ends first,
// Bounded returns ctx's error at once, marked as abandoned (see
// IsAbandoned), and f goes on until go-redis gives up on its own
// (ReadTimeout, retries); then late, if not nil, is called with f's
// outcome, so that the caller can undo what the abandoned call may have
// done (an acquire that succeeded after all). An abandoned call is dealt
// with by late alone: its caller must not act on its outcome, which it
// does not know. The goroutine is idle once f returned, and ends after
// workerIdle unless another call comes.
//
// The tempting version, a select on a buffered channel that f's goroutine
// sends its result to, loses a late success: once the caller has returned,
// nobody reads the channel, and a lock that the abandoned call took stays
// taken for its whole lease. The state word decides, once, who owns the
// outcome: the caller (delivered) or late (abandoned).
//
// direct says that the client stops its own reads and writes at ctx's
// deadline (see Timing): f's error at the deadline is then an i/o timeout,
// which gets ctx's error added (see withDeadline). Such a client still
// needs the goroutine: go-redis sets ctx's deadline on the socket, but does
// not watch ctx.Done, so a ctx cancelled before its deadline would not stop
// the call.
func Bounded[T any](ctx context.Context, direct bool, f func(context.Context) (T, error), late func(T, error)) (T, error) {
	if ctx.Done() == nil { // cannot be cancelled: nothing to bound
		return f(ctx)
	}
	var zero T
	type result struct {
		v   T
		err error
	}
	const (
		running = iota
		delivered
		abandoned
	)
	var state atomic.Int32
	done := make(chan result, 1)
	spawn(func() {
		v, err := f(ctx)
		if state.CompareAndSwap(running, delivered) {
			done <- result{v, err}
		} else if late != nil {
			late(v, err)
		}
	})
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		if state.CompareAndSwap(running, abandoned) {
			return zero, abandonedError{ctx.Err()}
		}
		r = <-done // f finished as ctx ended: its outcome wins
	}
	if direct {
		r.err = withDeadline(ctx, r.err)
	}
	return r.v, r.err
}

// Detached is Bounded for a call that must go on when the caller stops
// waiting for it (a release): f runs with a ctx that is not cancelled with
// the caller's, bounded by d instead, so that a call abandoned at the
// caller's deadline still completes; late, if not nil, then gets its
// outcome (see Bounded).
func Detached[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error), late func(T, error)) (T, error) {
	return Bounded(ctx, false, func(context.Context) (T, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		defer cancel()
		return f(dctx)
	}, late)
}

// withDeadline adds ctx's end to err, the error of a call that go-redis
// stopped at ctx's deadline itself (ContextTimeoutEnabled): it reports an
// i/o timeout, which does not say that the deadline passed.
func withDeadline(ctx context.Context, err error) error {
	if err == nil || IsCtxErr(err) || !Ended(ctx) {
		return err
	}
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded // its timer has yet to fire
	}
	return fmt.Errorf("%w (%w)", err, cause)
}

// Ended reports whether ctx is done or its deadline has passed: the timer
// that ends ctx may fire after the deadline that go-redis set on a socket.
func Ended(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// abandonedError is the error of a call that Bounded abandoned when its ctx
// ended. It unwraps to ctx's error.
type abandonedError struct{ error }

func (e abandonedError) Unwrap() error { return e.error }

// Is makes errors.Is(err, errAbandoned) find it, at no allocation.
func (e abandonedError) Is(target error) bool { return target == errAbandoned }

// errAbandoned stands for every abandonedError in errors.Is.
var errAbandoned = errors.New("redislock: call abandoned")

// IsAbandoned reports whether err is that of a call abandoned by Bounded:
// its outcome is dealt with by Bounded's late callback, not by the caller.
func IsAbandoned(err error) bool { return errors.Is(err, errAbandoned) }

// Abandoned marks err as the error of calls that go on in the background
// (see IsAbandoned).
func Abandoned(err error) error { return abandonedError{err} }

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

// Timing is what a client's options say about how long its commands take,
// and whether go-redis may send one twice.
type Timing struct {
	Direct      bool          // it stops its reads and writes at ctx's deadline (see TimingOf)
	Read        time.Duration // ReadTimeout; <= 0: none
	backoff     time.Duration // MaxRetryBackoff
	retries     int           // how many times go-redis may send a command again
	resendAfter time.Duration // a try times out after this (see MayResend); <= 0: never
}

// TimingOf returns client's timing: of a *redis.Client,
// *redis.ClusterClient or *redis.Ring (a Sentinel's FailoverClient is a
// *redis.Client), from their Options(), which hold the values go-redis
// resolved (a Ring's timeouts are raw: 0 for the default); go-redis's
// defaults for clients whose options cannot be read, and for a nil client.
// A client stops at ctx's deadline itself when it was made with
// ContextTimeoutEnabled and sets socket deadlines at all: ReadTimeout and
// WriteTimeout -2 (-1 once go-redis has read its options) set none.
func TimingOf(client redis.UniversalClient) Timing {
	switch c := client.(type) {
	case interface{ Options() *redis.Options }:
		o := c.Options()
		return Timing{o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0, o.ReadTimeout, o.MaxRetryBackoff, o.MaxRetries, o.ReadTimeout}
	case interface{ Options() *redis.ClusterOptions }:
		// The Cluster's node clients do not retry: the Cluster client does,
		// MaxRedirects times (and MaxRetries, when set).
		o := c.Options()
		return Timing{o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0, o.ReadTimeout, o.MaxRetryBackoff, o.MaxRedirects + max(o.MaxRetries, 0), o.ReadTimeout}
	case *redis.Ring:
		o := c.Options()
		read := o.ReadTimeout
		if read == 0 {
			read = 3 * time.Second // the default at go.mod's floor (later ones: 5 s)
		}
		return Timing{false, read, o.MaxRetryBackoff, o.MaxRetries, read}
	}
	return Timing{Read: 5 * time.Second, backoff: time.Second, retries: 3, resendAfter: 3 * time.Second}
}

// RetryWindow returns how long go-redis may take to give up on a command,
// resending it after timeouts: (ReadTimeout + MaxRetryBackoff) per try, and
// a try more than it may resend. A release runs at least that long in the
// background, so that go-redis can resend it.
func (t Timing) RetryWindow() time.Duration {
	return (max(t.Read, 0) + max(t.backoff, 0)) * time.Duration(max(t.retries, 0)+1)
}

// MayResend reports whether a command whose reply came elapsed after it was
// sent may have been written twice by go-redis with its first copy still to
// run (a late copy), from what go-redis documents of its options: it sends
// a command again only after a try failed, at most MaxRetries times (a
// Cluster client: MaxRedirects); and a try fails with its command delivered
// but not run yet by Redis when its read timed out, after ReadTimeout.
// Other failures (a connection closed or reset by Redis, a dial or pool
// error, an error reply such as LOADING or MOVED) mean that the try's
// command did not run, or ran before the next try: no late copy. So a reply
// sooner than ReadTimeout comes from the only copy that can still run. A
// client without a read timeout never times a try out. docs/guarantees.md
// lists what this cannot see (a hook that sends a command twice, go-redis
// closing a connection in use on a failover, a proxy in between).
func (t Timing) MayResend(elapsed time.Duration) bool {
	return t.retries > 0 && t.resendAfter > 0 && elapsed >= t.resendAfter
}

// Background counts the work a Locker does in the background that Redis
// must see: releases that go on after Release returned, places given up by
// Obtains that ended, locks taken by calls abandoned at their deadline and
// given back when their reply comes. Shutdown waits for them.
type Background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // made by a wait while n > 0, closed when n drops to 0
}

// Begin counts a piece of background work; End ends it.
func (c *Background) Begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
}

func (c *Background) End() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// Go runs f in a goroutine, as background work.
func (c *Background) Go(f func()) {
	c.Begin()
	go func() {
		defer c.End()
		f()
	}()
}

// Wait waits until no background work is left, or ctx ends.
func (c *Background) Wait(ctx context.Context) error {
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
		return c.Wait(ctx) // work begun by the work that ended
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sleep waits until wake, d (0: no limit) or the end of ctx.
func Sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-timeout:
	}
	return nil
}

// Await waits until done is closed, at most d, and not past the end of ctx;
// it reports whether done was closed.
func Await(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}
