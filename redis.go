package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// bounded runs f, a call to Redis, and returns when f returns or when ctx is
// done, whichever comes first.
//
// It exists because go-redis does not stop a socket read when ctx's deadline
// passes unless the client was created with ContextTimeoutEnabled: against a
// frozen Redis or a black-holed network a call would otherwise block for the
// client's ReadTimeout and retries, far past the caller's deadline. Every
// Redis call of this package goes through bounded so that its deadlines hold
// whatever the client's options.
//
// f is always called, also when ctx has ended already (go-redis then sends
// nothing and returns ctx's error), so that what f finishes is finished.
//
// To do so, f runs in another goroutine (see spawn). When ctx ends first,
// bounded returns ctx's error at once, marked as abandoned (see
// isAbandoned), and f goes on until go-redis gives up on its own
// (ReadTimeout, retries); then late, if not nil, is called with f's
// outcome, so that the caller can undo what the abandoned call may have
// done (an acquire that succeeded after all). An abandoned call is dealt
// with by late alone: its caller must not act on its outcome, which it
// does not know. The goroutine is idle once f returned, and ends after workerIdle
// unless another call comes.
//
// The tempting version, a select on a buffered channel that f's goroutine
// sends its result to, loses a late success: once the caller has returned,
// nobody reads the channel, and a lock that the abandoned call took stays
// taken for its whole lease. The state word decides, once, who owns the
// outcome: the caller (delivered) or late (abandoned).
//
// direct says that the client stops its own reads and writes at ctx's
// deadline (see timing): f's error at the deadline is then an i/o timeout,
// which gets ctx's error added (withDeadline). Such a client still needs
// the goroutine: go-redis sets ctx's deadline on the socket, but does not
// watch ctx.Done, so a ctx cancelled before its deadline would not stop
// the call.
func bounded[T any](ctx context.Context, direct bool, f func(context.Context) (T, error), late func(T, error)) (T, error) {
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

// call is bounded for a call of l: when ctx ends first, the call goes on
// until go-redis gives up on it, counted as background work of l, which Shutdown
// waits for.
func call[T any](ctx context.Context, l *Locker, f func(context.Context) (T, error)) (T, error) {
	l.background.begin()
	return bounded(ctx, l.direct, func(ctx context.Context) (T, error) {
		defer l.background.end()
		return f(ctx)
	}, nil)
}

// detached is bounded for a call that must go on when the caller stops
// waiting for it: a release. f runs with a ctx that is not cancelled with
// the caller's, bounded by d instead, so that a call abandoned at the
// caller's deadline still completes; late, if not nil, then gets its
// outcome (see bounded).
func detached[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error), late func(T, error)) (T, error) {
	return bounded(ctx, false, func(context.Context) (T, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		defer cancel()
		return f(dctx)
	}, late)
}

// withDeadline adds ctx's end to err, the error of a call that go-redis
// stopped at ctx's deadline itself (ContextTimeoutEnabled): it reports an
// i/o timeout, which does not say that the deadline passed.
func withDeadline(ctx context.Context, err error) error {
	if err == nil || isCtxErr(err) || !ended(ctx) {
		return err
	}
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded // its timer has yet to fire
	}
	return fmt.Errorf("%w (%w)", err, cause)
}

// ended reports whether ctx is done or its deadline has passed: the timer
// that ends ctx may fire after the deadline that go-redis set on a socket
// (or that of a context derived from it, such as straggle's).
func ended(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// abandonedError is the error of a call that bounded abandoned when its ctx
// ended. It unwraps to ctx's error.
type abandonedError struct{ error }

func (e abandonedError) Unwrap() error { return e.error }

// Is makes errors.Is(err, errAbandoned) find it, at no allocation.
func (e abandonedError) Is(target error) bool { return target == errAbandoned }

// errAbandoned stands for every abandonedError in errors.Is.
var errAbandoned = errors.New("redislock: call abandoned")

// isAbandoned reports whether err is that of a call abandoned by bounded:
// its outcome is dealt with by bounded's late callback, not by the caller.
func isAbandoned(err error) bool { return errors.Is(err, errAbandoned) }

// timing is what a client's options say about how long its commands take.
type timing struct {
	direct  bool          // it stops its reads and writes at ctx's deadline (see timingOf)
	read    time.Duration // ReadTimeout; <= 0: none
	backoff time.Duration // MaxRetryBackoff
	retries int           // MaxRetries
}

// timingOf returns client's timing: of a *redis.Client or
// *redis.ClusterClient (a Sentinel's FailoverClient is a *redis.Client);
// go-redis's defaults for clients whose options cannot be read, and for a
// nil client. A client stops at ctx's deadline itself when it was made with
// ContextTimeoutEnabled and sets socket deadlines at all: ReadTimeout and
// WriteTimeout -2 (-1 once go-redis has read its options) set none.
func timingOf(client redis.UniversalClient) timing {
	switch c := client.(type) {
	case interface{ Options() *redis.Options }:
		o := c.Options()
		return timing{o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0, o.ReadTimeout, o.MaxRetryBackoff, o.MaxRetries}
	case interface{ Options() *redis.ClusterOptions }:
		o := c.Options()
		return timing{o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0, o.ReadTimeout, o.MaxRetryBackoff, o.MaxRetries}
	}
	return timing{read: 5 * time.Second, backoff: time.Second, retries: 3}
}

// retryWindow returns how long go-redis may take to give up on a command,
// resending it after timeouts: (ReadTimeout + MaxRetryBackoff) per try,
// MaxRetries + 1 tries. A release runs at least that long in the
// background, so that go-redis can resend it, and leaves its mark as long
// (see Locker.spendFor).
func (t timing) retryWindow() time.Duration {
	return (max(t.read, 0) + max(t.backoff, 0)) * time.Duration(max(t.retries, 0)+1)
}

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

// noteErr asks a ClusterClient to reload its slot map after a command
// failed on the network, or was redirected: go-redis does so by itself
// after MOVED replies to its own routing, not after a master died, nor for
// commands sent to one master's client (WithReplicas), and a failover would
// otherwise go unseen for up to 10 s. (ReloadState only marks the map for a
// reload in the background.)
func (l *Locker) noteErr(err error) {
	if err == nil || (refused(err) && !redirected(err)) || isCtxErr(err) {
		return
	}
	l.failure.Store(&failure{err: err, at: time.Now()})
	if c, ok := l.client.(*redis.ClusterClient); ok {
		c.ReloadState(context.Background())
	}
}

// A failure is the latest error a command of a Locker failed with on the
// network or in go-redis (not a refusal: see noteErr), and when.
type failure struct {
	err error
	at  time.Time
}

// lastFailure adds to noAnswer, the error of a wait whose attempts Redis did
// not answer, the failure of the Locker's latest command that failed within
// the last recentFailure, if any: a wait that ends while its attempt is
// still in flight (go-redis redials) still says why, with go-redis's error
// in the chain (errors.As finds a *net.OpError).
func (l *Locker) lastFailure(noAnswer error) error {
	if f := l.failure.Load(); f != nil && time.Since(f.at) < recentFailure {
		return fmt.Errorf("%w (the latest command failed: %w)", noAnswer, f.err)
	}
	return noAnswer
}

// recentFailure is how recent a failure lastFailure reports is.
const recentFailure = 10 * time.Second

// redirected reports whether err is a Cluster's redirection (MOVED, ASK):
// the node does not serve the key now. go-redis follows it by itself, but
// not for a command sent to one node's client (see Locker.writer).
func redirected(err error) bool {
	return moved(err) || redis.HasErrorPrefix(err, "ASK")
}

// moved reports whether err is MOVED: the key's slot has another master
// (a failover), which the slot map will name once reloaded. (ASK, a slot
// being migrated, changes no map until the migration ends: a write
// WithReplicas then fails; see docs/fault-tolerance.md.)
func moved(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED")
}

// isCtxErr reports whether err is a context's end.
func isCtxErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
