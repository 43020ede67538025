package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A Lock is a lock held on one key, or on a set of keys (ObtainMulti). It
// is safe for concurrent use: any method may be called from any goroutine
// at any time. Refresh may run while KeepAlive renews (renewals then follow
// the Refresh's ttl, and none can make Until later than the key's expiry);
// TTL and Until may be called at any time; Release stops the renewals
// first. A Lock is only ever made by a Locker; a nil *Lock, or a zero
// Lock, is not held: Release, Refresh and TTL return ErrNotHeld, KeepAlive
// a context ended with ErrNotHeld, and Key, Token, Fence and Until their
// zero values.
//
// Several Locks may be handles of one acquisition: a call whose ctx carries
// a lock joins it (see Lock.Context). Each handle has its own Key and Keys
// (a nested one-key call on a key of a set has that key), and shares the
// acquisition's token, lease and loss.
type Lock struct {
	locker *Locker
	h      *lease.Hold // the acquisition
	keys   []string    // the handle's keys: the acquisition's, or the one key a nested call joined
	joined bool        // the handle joined an acquisition (see Lock.Context)

	mu    sync.Mutex
	ended bool                    // Release was called on this handle
	kept  context.CancelCauseFunc // ends this handle's latest KeepAlive context
}

// usable reports whether lk was made by a Locker (not nil, not a zero Lock).
func (lk *Lock) usable() bool { return lk != nil && lk.h != nil }

// Key returns the key the lock is held on: of a set (ObtainMulti), the
// first of Keys, which names the set in errors and events; a nested
// one-key call that joined a set has its own key ("" for a nil Lock).
func (lk *Lock) Key() string {
	if !lk.usable() {
		return ""
	}
	return lk.keys[0]
}

// Keys returns the keys the lock is held on: a set's (see ObtainMulti), in
// the order they were given, or the one key (nil for a nil Lock).
func (lk *Lock) Keys() []string {
	if !lk.usable() {
		return nil
	}
	return slices.Clone(lk.keys)
}

// Token returns the random token stored at every key of the lock while it
// is held (a set across Cluster slots too: its slots' keys share it). Pass
// it to Locker.Resume to hold the lock again from another process. A lock
// that a Locker passes from one of its Obtains to the next without a round
// trip (see Obtain) keeps the token: the key is held by the same hold in
// Redis. Locks handed over by Redis, and fenced locks, always have a token
// of their own.
func (lk *Lock) Token() string {
	if !lk.usable() {
		return ""
	}
	return lk.h.Token
}

// Fence returns the fencing token of the lock's key: a number greater than
// every fence issued before for this key, by any Locker in any process. It
// is 0 when the lock was obtained without WithFencing, and for a set of
// several keys (ObtainMulti), where each key has a fence of its own (see
// FenceOf and Fences): SetFenced refuses 0, so a set's Fence cannot fence a
// resource with another key's fence by mistake.
//
// Pass it along with every write to the resource the lock protects, and
// have the resource reject writes whose fence is lower than the highest it
// has seen. A holder whose lease expired during a pause (GC, a stopped VM)
// still believes it holds the lock; its fence is lower than the next
// holder's, so its late writes are rejected. For a SQL row:
//
//	UPDATE stock SET count = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// and treat "0 rows updated" as ErrFenceRejected. For a value in Redis, use
// SetFenced.
func (lk *Lock) Fence() int64 {
	if !lk.usable() || len(lk.keys) > 1 {
		return 0
	}
	return lk.FenceOf(lk.keys[0])
}

// FenceOf returns the fencing token of key, one of Keys (see Fence); 0 for
// a key the lock does not hold (SetFenced refuses it), or without
// WithFencing.
func (lk *Lock) FenceOf(key string) int64 {
	if !lk.usable() || !slices.Contains(lk.keys, key) {
		return 0
	}
	return lk.h.Fences()[slices.Index(lk.h.Keys, key)]
}

// Fences returns the fencing token of each of Keys (see Fence), in the
// same order (nil for a nil Lock); FenceOf gives one key's.
func (lk *Lock) Fences() []int64 {
	if !lk.usable() {
		return nil
	}
	fences := make([]int64, len(lk.keys))
	for i, key := range lk.keys {
		fences[i] = lk.FenceOf(key)
	}
	return fences
}

// Until returns when the lease ends as far as this process can tell: the
// moment the command that set the lease (the acquiring or last successful
// refreshing command, or a command that confirmed the waiter's place before
// Redis handed it the lock) was sent, plus its ttl (less an allowance for
// clock drift, for a quorum lock: see NewQuorum), on the monotonic clock.
// Redis measures the lease from when it ran that command, a little later,
// so Redis never frees the lock before Until (clock drift between the
// machines aside). The lock is certainly not held after Until unless
// refreshed in time.
//
// Once the lock ends for this process, Until is no later than that moment:
// when it is found lost (KeepAlive's context ends with ErrLockLost, or
// Refresh, TTL or Release find the key gone or taken), and when its
// release begins (Release, or the give-back that follows a loss), Until
// moves to that moment, before any command that frees the key is sent
// (see docs/how-it-works.md). So time.Now().Before(lk.Until()) never holds while Redis no
// longer holds the key for lk. A Release that fails on Redis leaves it
// there too: the release may have run.
func (lk *Lock) Until() time.Time {
	if !lk.usable() {
		return time.Time{}
	}
	return lk.h.Until()
}

// Release releases the lock: it deletes the key if it still holds this
// lock's token, and hands the key to the next in line if anyone waits. When
// an Obtain of the same Locker waits for the key and may have it (see
// Obtain), Release passes the lock to it without contacting Redis. Release
// stops KeepAlive's renewals first.
//
// It returns nil when it released the lock. It returns ErrNotHeld when the
// key no longer held the lock: its lease ran out, or another client took
// the key (a Lock released once returns ErrNotHeld at once, without
// contacting Redis). A release whose reply was lost, and that go-redis (or
// the caller) sent again, finds the key gone by its own first run: it
// returns nil when that second run's reply came before the lease could
// have run out (the lease clock's end: see docs/lease-keeping.md), and else
// ErrNotHeld, saying the outcome is unknown (see docs/guarantees.md).
//
// Release returns when ctx is done even if Redis does not answer; the
// release then goes on in the background, for as long as go-redis may take
// with it, and the error says so. A ctx already done (a request's, ended:
// the usual `defer lock.Release(ctx)`) releases in the background the same
// way, so that no lock is left behind. A release that goes on completes as
// one that was waited for does, within that bound once Redis answers: it
// frees the key, or hands it to the next in line (an Obtain of this Locker
// or of another), and Hooks.HandOff reports the hand-off when it runs. A
// handle that joined the lock (see Lock.Context) ends its hold only, and
// returns ErrNotHeld when the lock is lost or its lease over, as the last
// hold's Release does. Other errors come from Redis: the
// release may or may not have run, and Release may be called again.
func (lk *Lock) Release(ctx context.Context) error {
	if !lk.usable() {
		return ErrNotHeld
	}
	return lk.release(ctx, false)
}

// release ends lk's handle, and releases the acquisition with its last
// handle: it begins the release (the lease's end moves to now) and hands
// the rest to the backend, which finishes it (see lease.Store). A release
// that Redis failed leaves the handle open, so that Release may be called
// again; with finally (WithLock, after which nobody can), it goes on in the
// background instead, and the error says so.
func (lk *Lock) release(ctx context.Context, finally bool) error {
	last, ok := lk.endHandle()
	if !ok {
		return ErrNotHeld
	}
	if !last { // another handle holds it still (see reentrant.go)
		if _, lost := lk.h.Join(false); lost {
			return lk.h.NotHeld() // lost, or its lease is over: this handle's Release says so, as the last one's does
		}
		return nil
	}
	var err error
	if lk.h.BeginRelease() {
		err = lk.locker.backend.Release(ctx, lk.h)
	} else {
		lk.h.WaitGiveBack(ctx) // a lost lock's keys still held are free when Release returns
		err = lk.h.NotHeld()
	}
	switch {
	case err == nil, errors.Is(err, ErrNotHeld), scripts.IsBackground(err):
	case finally:
		lk.h.GiveBack()
		err = fmt.Errorf("%w; the release %w", err, scripts.ErrBackground)
	default:
		lk.reopenHandle()
	}
	lk.locker.released(ctx, lk, err)
	return err
}

// Refresh sets the lease to ttl from now if the lock is still held. It
// returns ErrNotHeld when it is not (see Release); nothing is changed in
// Redis then. An invalid ttl returns ErrInvalidTTL without contacting Redis.
// On a kept lock (KeepAlive), the renewals set ttl from the moment Refresh
// sends it, whatever its outcome: none sent after it sets the old length.
func (lk *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if !lk.usable() {
		return ErrNotHeld
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: must be at least 1ms (got %v)", ErrInvalidTTL, ttl)
	}
	r := lease.Request{Keys: lk.h.Keys, Mode: lk.h.Mode, TTL: ttl.Truncate(time.Millisecond)}
	if err := lk.locker.backend.Check(&r); err != nil && !errors.Is(err, ErrInvalidOption) {
		return err
	}
	if lk.handleEnded() {
		return ErrNotHeld
	}
	return lk.h.Refresh(ctx, r.TTL)
}

// TTL returns the remaining lease as Redis sees it, or ErrNotHeld when the
// lock is no longer held. In the lease's last millisecond it may return 0
// with no error: Redis counts whole milliseconds.
func (lk *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if !lk.usable() || lk.handleEnded() {
		return 0, ErrNotHeld
	}
	l := lk.locker
	l.env.Background.Begin()
	left, err := scripts.Bounded(ctx, false, func(ctx context.Context) (time.Duration, error) {
		defer l.env.Background.End()
		return l.backend.PTTL(ctx, lk.h)
	}, nil)
	switch {
	case err != nil:
		return 0, scripts.Failed("read the lease of", lk.Key(), err)
	case left == scripts.LeaseNotHeld && lk.h.State() == lease.Held:
		return 0, lk.h.Lose(ctx, 0)
	case left == scripts.LeaseNotHeld:
		return 0, lk.h.NotHeld()
	}
	return left, nil
}

// KeepAlive keeps the lock's lease alive in the background and returns a
// context, derived from ctx, that tells the holder when the lock is lost.
//
// The lease is renewed to the lock's ttl (that of the acquisition or of the
// latest Refresh) about every ttl/3; a renewal that is not answered soon is
// sent again on another connection, and one that failed is retried. The
// returned context is cancelled with cause ErrLockLost
//
//   - as soon as a renewal finds the key gone or owned by another token, and
//   - at the latest at Until() - ttl/100 - min(safety margin, ttl/4) (see
//     WithSafetyMargin), even if Redis hangs and no renewal ever returns.
//     Until is never later than the key's expiry in Redis, whatever order
//     Redis runs the commands in flight in (see Lock.Until), so the lock is
//     held for as long as the context is not done, provided the process's
//     timers fire within the safety margin.
//
// Once the context ends with ErrLockLost, nothing extends the lease any
// more, and the lock is released in the background (for as long as a
// release goes on: see Lock.Release), so that a lock whose renewals Redis
// ran but did not confirm in time (WithReplicas: no replica acknowledged
// them) is free for others as soon as Redis answers, not a lease later;
// Release then returns ErrNotHeld. Before the context ends, the loss is
// recorded: Until is no later than that moment, and an Obtain, TryObtain or
// WithLock whose ctx carries the lock returns ErrLockLost at once, sending
// nothing .
//
// A kept lease rides out a stall of Redis or the network of up to about
// 2/3 ttl - ttl/100 - min(safety margin, ttl/4): a renewal sent ttl/3 after
// the last one must be answered before the context's deadline. A longer
// stall ends the context although Redis may still hold the key (a false
// alarm, which is safe). So a ttl of at least 1.5 times the longest stall
// to ride out plus the margin: 300 ms for stalls of up to about 150 ms,
// 1 s for stalls of up to about 600 ms (see docs/lease-keeping.md).
//
// Refresh may be called while KeepAlive renews: renewals then follow the
// Refresh's ttl, and a renewal of the old ttl that Redis runs after the
// Refresh cannot make the context outlive the lease. Renewal stops when the
// returned context is done: when ctx is, when the lock is lost, or when
// Release is called. Calling KeepAlive again replaces the previous context
// (it is cancelled). The leases of a Locker are renewed by one goroutine,
// which runs while the Locker keeps a lease, in pipelines per Redis node.
//
// On a handle that joined another acquisition (see Lock.Context), the
// returned context ends when ctx does or when the acquisition's kept
// context does, with its cause; an acquisition not kept yet is kept from
// then on, until it is released or lost, whatever becomes of ctx (other
// handles may rely on it).
func (lk *Lock) KeepAlive(ctx context.Context) context.Context {
	if !lk.usable() {
		ctx, cancel := context.WithCancelCause(ctx)
		cancel(ErrNotHeld)
		return ctx
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.ended {
		ctx, cancel := context.WithCancelCause(ctx)
		cancel(ErrNotHeld)
		return ctx
	}
	if lk.kept != nil {
		lk.kept(context.Canceled) // replaced
	}
	kctx := lk.h.Keep(ctx, lk.joined)
	lk.kept = func(cause error) { lease.Cancel(kctx, cause) }
	return kctx
}

// endHandle ends lk's handle: last reports that it was the last handle of
// its acquisition, which must then be released; ok is false when the
// handle was ended already. A joined handle's kept context ends with it.
func (lk *Lock) endHandle() (last, ok bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.ended {
		return false, false
	}
	lk.ended = true
	if lk.kept != nil && lk.joined {
		lk.kept(context.Canceled) // Release ends the handle's kept context
	}
	return lk.h.Leave(), true
}

// reopenHandle undoes endHandle after a release that failed, so that
// Release may be called again.
func (lk *Lock) reopenHandle() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.ended = false
	lk.h.Rejoin()
}

// handleEnded reports whether Release was called on lk, or its acquisition
// is released.
func (lk *Lock) handleEnded() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.ended || lk.h.State() == lease.Released
}
