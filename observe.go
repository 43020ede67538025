package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Hooks are called when something happens to the locks of a Locker, for
// logs and metrics (SlogHooks writes them to a log/slog Logger; the
// otelredislock module records OpenTelemetry metrics and spans). Set them
// with WithHooks on New. Every field is optional.
//
// A hook is called synchronously, by the goroutine where the event
// happened, once the library's work for the event is done and with none of
// its locks held: a slow hook delays the call it reports on (Obtain returns
// later) and nothing else, but a hook that blocks blocks that call. Hooks
// are called from many goroutines at once: they must be safe for
// concurrent use, and must not panic (a hook called in the background, for
// a renewal or a release that goes on, would crash the process). ctx is
// the context of the call (Obtain's, Release's, Refresh's), or for Renew
// and Lost found by lease keeping the context KeepAlive returned.
type Hooks struct {
	// Obtain is called when Obtain, TryObtain or WithLock has acquired the
	// lock or given up (not for calls rejected as bad input).
	Obtain func(ctx context.Context, e ObtainEvent)
	// HandOff is called when a release handed the key over directly: to
	// another Obtain of this Locker (Local), or to the next place in the
	// key's line in Redis. Releases that go on in the background report
	// theirs when they run.
	HandOff func(ctx context.Context, e HandOffEvent)
	// Renew is called for each renewal of a kept lease (KeepAlive,
	// WithLock) when its outcome is known; not for one that found the key
	// gone because the lock was released while it was on its way.
	Renew func(ctx context.Context, e RenewEvent)
	// Lost is called once per acquisition that a call returned and that is
	// then found lost: its kept context ended with ErrLockLost (by the
	// goroutine of the lost-lock timer, when the lease ran out), or a
	// Refresh, TTL or renewal found the key gone or held by another owner.
	// It is not called for a loss found once a Release of the lock has
	// begun (a renewal that reaches Redis after the release finds the key
	// gone by the release's doing: the Release reports its outcome); a loss
	// found before it may be reported after that Release has returned. Nor
	// is it called for a lock whose kept context ended only because its
	// parent did (an outer lock's loss), nor for a lease that ran out
	// before its acquisition could return it (the acquisition fails, or
	// waits on).
	Lost func(ctx context.Context, e LostEvent)
	// Release is called when the release of an acquisition returns (the
	// Release of its last handle: see Lock.Context). Outcomes released,
	// not_held and background end the acquisition; error leaves it held
	// (Release may be called again), except in WithLock, whose failed
	// release goes on in the background (outcome background).
	Release func(ctx context.Context, e ReleaseEvent)
}

// An Outcome is how an Obtain, a renewal or a Release ended. Its string is
// fit for a metric attribute.
type Outcome string

// The outcomes of the events.
const (
	OutcomeAcquired    Outcome = "acquired"     // Obtain: the lock is held
	OutcomeNotObtained Outcome = "not_obtained" // Obtain: another owner kept the key (ErrNotObtained)
	OutcomeRenewed     Outcome = "renewed"      // Renew: the lease was set anew
	OutcomeSuperseded  Outcome = "superseded"   // Renew: held, but a later command (a Refresh) had set the lease
	OutcomeLost        Outcome = "lost"         // Renew: the key was gone or another owner's
	OutcomeReleased    Outcome = "released"     // Release: the lock was released (or passed on)
	OutcomeNotHeld     Outcome = "not_held"     // Release: the lock was no longer held (ErrNotHeld)
	OutcomeBackground  Outcome = "background"   // Release: ctx ended; the release goes on in the background
	OutcomeError       Outcome = "error"        // any: Redis or the network failed, or Redis refused the call (a semaphore of another n); Err says how
)

// An ObtainEvent reports an acquisition attempt (Obtain, TryObtain,
// WithLock).
type ObtainEvent struct {
	Key      string
	Keys     []string      // a set's keys (ObtainMulti), Key the first; nil for one key
	Outcome  Outcome       // OutcomeAcquired, OutcomeNotObtained or OutcomeError
	Start    time.Time     // when the call began
	Wait     time.Duration // from the call to its outcome
	Attempts int           // acquire commands this call sent (0: joined, passed or handed the lock)
	Joined   bool          // it joined a lock its ctx carries (see Lock.Context)
	Token    string        // the lock's token, when acquired
	Fence    int64         // the lock's fence, when acquired WithFencing
	Err      error         // the call's error, when not acquired
}

// A HandOffEvent reports a Release that handed the key to a waiter.
type HandOffEvent struct {
	Key   string
	Local bool // passed to another Obtain of this Locker, with no round trip
	To    int  // how many waiters got the key (several readers or permits at once)
}

// A RenewEvent reports one renewal of a kept lease.
type RenewEvent struct {
	Key     string
	Token   string
	Outcome Outcome       // OutcomeRenewed, OutcomeSuperseded, OutcomeLost or OutcomeError
	Latency time.Duration // from sending to the outcome
	Hedge   bool          // sent while an earlier renewal of the lease was still unanswered
	Err     error         // the error, for OutcomeError
}

// A LostEvent reports that an acquisition was lost.
type LostEvent struct {
	Key   string
	Keys  []string // a set's keys, Key the first; nil for one key
	Token string
	Held  time.Duration // from the acquisition to the loss
	Err   error         // why: wraps ErrLockLost, and the last renewal's error when there was one
}

// A ReleaseEvent reports the release of an acquisition.
type ReleaseEvent struct {
	Key     string
	Keys    []string // a set's keys, Key the first; nil for one key
	Token   string
	Outcome Outcome       // OutcomeReleased, OutcomeNotHeld, OutcomeBackground or OutcomeError
	Held    time.Duration // from the acquisition to the release
	Err     error         // Release's error (nil when released)
}

// WithHooks adds hooks to those of the Locker (see Hooks): given several
// times, every hook given is called, in order. It applies to a Locker
// (New), not to single calls.
func WithHooks(h Hooks) Option {
	return func(o *options) {
		if !o.lockerOnly("WithHooks") {
			o.hooks = o.hooks.join(h)
		}
	}
}

// join returns hooks that call h's, then o's.
func (h Hooks) join(o Hooks) Hooks {
	return Hooks{
		Obtain:  both(h.Obtain, o.Obtain),
		HandOff: both(h.HandOff, o.HandOff),
		Renew:   both(h.Renew, o.Renew),
		Lost:    both(h.Lost, o.Lost),
		Release: both(h.Release, o.Release),
	}
}

func both[E any](a, b func(context.Context, E)) func(context.Context, E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(ctx context.Context, e E) { a(ctx, e); b(ctx, e) }
}

// obtained reports the outcome of an acquisition of r (Hooks.Obtain).
func (l *Locker) obtained(ctx context.Context, r *lease.Request, start time.Time, attempts int, lk *Lock, err error) {
	h := l.opts.hooks.Obtain
	if h == nil {
		return
	}
	e := ObtainEvent{Key: r.Key(), Start: start, Wait: time.Since(start), Attempts: attempts, Err: err}
	if len(r.Keys) > 1 {
		e.Keys = r.Keys
	}
	switch {
	case err == nil:
		e.Outcome, e.Joined, e.Token, e.Fence = OutcomeAcquired, lk.joined, lk.Token(), lk.FenceOf(r.Key())
	case errors.Is(err, ErrNotObtained):
		e.Outcome = OutcomeNotObtained
	default:
		e.Outcome = OutcomeError
	}
	h(ctx, e)
}

// handedOff reports a hand-off of key to n waiters (Hooks.HandOff): local
// when a Locker passed it between its own Obtains.
func (l *Locker) handedOff(ctx context.Context, key string, local bool, n int) {
	if h := l.opts.hooks.HandOff; h != nil && n > 0 {
		h(ctx, HandOffEvent{Key: key, Local: local, To: n})
	}
}

// released reports the outcome of lk's Release (Hooks.Release).
func (l *Locker) released(ctx context.Context, lk *Lock, err error) {
	h := l.opts.hooks.Release
	if h == nil {
		return
	}
	e := ReleaseEvent{Key: lk.Key(), Keys: keysOfSet(lk.h), Token: lk.h.Token, Held: time.Since(lk.h.Since), Err: err, Outcome: OutcomeReleased}
	switch {
	case errors.Is(err, ErrNotHeld):
		e.Outcome = OutcomeNotHeld
	case scripts.IsBackground(err):
		e.Outcome = OutcomeBackground
	case err != nil:
		e.Outcome = OutcomeError
	}
	h(ctx, e)
}

// keysOfSet is the Keys of an event: a set's keys, nil for one key.
func keysOfSet(h *lease.Hold) []string {
	if len(h.Keys) > 1 {
		return h.Keys
	}
	return nil
}

// events are what the lease layer reports to a Locker's hooks (see
// lease.Events).
type events struct{ l *Locker }

func (e events) Lost(ctx context.Context, h *lease.Hold, why error) {
	if f := e.l.opts.hooks.Lost; f != nil {
		f(ctx, LostEvent{Key: h.Keys[0], Keys: keysOfSet(h), Token: h.Token, Held: time.Since(h.Since), Err: why})
	}
}

func (e events) Renewed(ctx context.Context, h *lease.Hold, sent time.Time, hedge bool, r lease.Reply) {
	f := e.l.opts.hooks.Renew
	if f == nil {
		return
	}
	out := OutcomeLost
	switch {
	case r.Err != nil:
		out = OutcomeError
	case r.Code == scripts.ReplyOK:
		out = OutcomeRenewed
	case r.Code == scripts.ReplySuperseded:
		out = OutcomeSuperseded
	}
	f(ctx, RenewEvent{Key: h.Keys[0], Token: h.Token, Outcome: out, Latency: time.Since(sent), Hedge: hedge, Err: r.Err})
}
