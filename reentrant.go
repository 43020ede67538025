package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Reentrancy by context.
//
// A context can carry locks: the one WithLock gives fn carries its lock,
// and Lock.Context makes one that does. An Obtain, TryObtain or WithLock of
// the same key on the same Locker, with such a context (or one derived from
// it), joins the lock the context carries instead of waiting for it: it
// sends nothing to Redis and returns another handle of the same acquisition
// (same token, lease and lost-lock signal; its Key and Fence are those of the
// key it asked for, one of a set's). The acquisition counts its live
// handles; each Release ends one, and the key is released when the last one
// ends, whichever it is. Once the lock is lost or its lease over, each
// handle's Release returns ErrNotHeld.
//
// This prevents the deadlock of a function that takes a lock and calls
// another that takes it again, which without it waits for itself (forever
// without a deadline, while the outer lease keeps being renewed). It cannot
// prevent the same deadlock when the inner call does not get the context
// (it is given context.Background(), or a context not derived from the
// outer one): a context that does not carry the lock is another owner, and
// waits as any other would.
//
// A shared (WithShared) call joins a shared or exclusive lock the context
// carries (a writer may read); an exclusive call joins an exclusive one, and
// fails with ErrInvalidOption on a shared one (upgrading a reader to a
// writer would wait for itself). A joining call's ttl and WithFencing do not
// apply: the joined lock's lease and fence do. Permits (WithPermits) are
// not reentrant: a nested call takes another permit. A context that
// carries a lock that is lost (its lease is over, or a renewal, Refresh or
// TTL found it gone) joins nothing: the nested call returns an error
// wrapping ErrLockLost at once, and WithLock does not call fn.

// heldKey is the context key under which a context carries locks.
type heldKey struct{}

// held is the list of the locks a context carries, innermost first.
type held struct {
	lk   *Lock // the handle given to Context: FromContext returns it, joins join its acquisition
	next *held
}

// Context returns a context, derived from parent, that carries lk: with it,
// an Obtain, TryObtain or WithLock of lk's key on lk's Locker joins lk
// instead of waiting for it (see docs/lock-family.md). A nil or zero Lock
// returns parent: it carries nothing.
func (lk *Lock) Context(parent context.Context) context.Context {
	if lk == nil || lk.locker == nil {
		return parent
	}
	next, _ := parent.Value(heldKey{}).(*held)
	return context.WithValue(parent, heldKey{}, &held{lk: lk, next: next})
}

// FromContext returns the lock ctx carries (see Lock.Context): in the fn of
// WithLock or WithLockMulti, that call's lock, with no round trip: its
// Fence or Fences (for SetFenced), Token, Keys and Until. With locks
// nested, the innermost; nil when ctx carries none. A nested call that
// joined a lock carries the handle it got: in the fn of a one-key WithLock
// nested in a WithLockMulti, the lock of that key (Key and Keys that key,
// Fence that key's fence), the lock a nested Obtain of the key returns,
// not the set. WithLock releases it when fn returns: fn must not Release
// it, nor call its KeepAlive (which would replace the context fn runs
// with).
func FromContext(ctx context.Context) *Lock {
	if h, _ := ctx.Value(heldKey{}).(*held); h != nil {
		return h.lk
	}
	return nil
}

// acquisition returns the acquisition lk is a handle of (lk itself, unless
// it joined another).
func (lk *Lock) acquisition() *Lock {
	if lk.joined != nil {
		return lk.joined
	}
	return lk
}

// errUpgrade is the error of an exclusive call on a context that carries a
// shared lock of the same key.
var errUpgrade = fmt.Errorf("%w: an exclusive lock cannot join a shared one the context carries (a reader cannot become the writer)", ErrInvalidOption)

// carried returns the locks of l on key that ctx carries, which a call in
// mode m may join (none for permits), innermost first.
func (l *Locker) carried(ctx context.Context, key string, m lockMode) []*Lock {
	if m.permits > 0 {
		return nil
	}
	var lks []*Lock
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.next {
		if a := h.lk.acquisition(); a.locker == l && slices.Contains(keysOf(a.key, a.set), key) && a.mode.permits == 0 {
			lks = append(lks, a)
		}
	}
	return lks
}

// checkUpgrade refuses an exclusive call on a context that carries a shared
// lock of the key: bad input, found before anything is sent.
func (l *Locker) checkUpgrade(ctx context.Context, key string, m lockMode) error {
	for _, a := range l.carried(ctx, key, m) {
		if a.mode.shared && m.exclusive() {
			return errUpgrade
		}
	}
	return nil
}

// join returns a new handle of the lock on key that ctx carries for l, if
// it carries one that a call with options o may join, and nil otherwise.
// A set's call (o.set) joins a lock that holds all its keys; a lock that
// holds some of them would make the call wait for itself: that is an error.
func (l *Locker) join(ctx context.Context, key string, o *options) (*Lock, error) {
	carried := l.carried(ctx, key, o.mode)
	if o.set != nil {
		carried = nil
		partly := false
		for _, k := range o.set {
			for _, a := range l.carried(ctx, k, o.mode) {
				if _, lost := a.joinable(false); lost {
					return nil, lostCarried(k)
				}
				partly = true
				if !slices.ContainsFunc(o.set, func(k string) bool { return !slices.Contains(keysOf(a.key, a.set), k) }) {
					carried = append(carried, a)
				}
			}
		}
		if partly && carried == nil {
			return nil, errPartly
		}
	}
	for _, a := range carried {
		live, lost := a.joinable(true)
		switch {
		case lost:
			return nil, lostCarried(key)
		case live:
			return &Lock{locker: l, key: key, set: o.set, token: a.token, mode: a.mode, fence: a.FenceOf(key), fences: a.fencesOf(o.set), joined: a}, nil
		}
	}
	return nil, nil
}

// joinable reports whether a, a lock a context carries, is live and
// whether it is lost, and takes a handle of it (take) when it is live and
// not lost. A lock found lost stays lost, also once the give-back that
// follows the loss has released it (see KeepAlive): lost is set before any
// of its contexts ends with ErrLockLost. A set across slots is lost with
// any part (see keepAcross).
func (a *Lock) joinable(take bool) (live, lost bool) {
	across := a.parts != nil && (a.lostAcross() || !time.Now().Before(a.untilAcross()))
	a.mu.Lock()
	defer a.mu.Unlock()
	live = !a.released && !a.releasing && a.handles > 0
	lost = a.lost || live && (across || a.parts == nil && (a.lostWhy != nil || !time.Now().Before(a.heldUntil())))
	if take && live && !lost {
		a.handles++
	}
	return live, lost
}

// lostCarried is the error of a call on key whose context carries a lost
// lock of key.
func lostCarried(key string) error {
	return fmt.Errorf("%w: %s: the lock this context carries is lost (its lease is over): its holder must stop", ErrLockLost, quoteKey(key))
}

// errPartly is the error of a set's call whose context carries a lock of
// some of its keys, but not of all: it would wait for itself.
var errPartly = fmt.Errorf("%w: the context carries a lock of some of the keys, not of all: the call would wait for itself", ErrInvalidOption)

// endHandle ends lk's handle: last reports that it was the last handle of
// its acquisition, which must then be released (or reported not held, when
// it was given back after its loss: see KeepAlive); ok is false when the
// handle was ended already.
func (lk *Lock) endHandle() (a *Lock, last, ok bool) {
	a = lk.acquisition()
	a.mu.Lock()
	defer a.mu.Unlock()
	if lk.ended {
		return a, false, false
	}
	lk.ended = true
	a.handles--
	if lk.kept != nil {
		lk.kept(context.Canceled) // Release ends the handle's kept context
	}
	return a, a.handles == 0, true
}

// reopenHandle undoes endHandle after a release that failed, so that
// Release may be called again.
func (lk *Lock) reopenHandle() {
	a := lk.acquisition()
	a.mu.Lock()
	defer a.mu.Unlock()
	lk.ended = false
	a.handles++
}

// handleEnded reports whether Release was called on lk.
func (lk *Lock) handleEnded() bool {
	a := lk.acquisition()
	a.mu.Lock()
	defer a.mu.Unlock()
	return lk.ended || a.released
}

// keepJoined is KeepAlive for a handle that joined another acquisition: the
// returned context ends when ctx does, or with the acquisition's lease
// context and its cause (a KeepAlive of the acquisition that replaces that
// context is followed: see follower). An acquisition not kept yet is kept
// from now on, until it is released or lost: not only while ctx lasts,
// since other handles (siblings) may rely on it. As for any Lock, calling
// it again replaces the handle's previous context, and Release of the
// handle ends it (context.Canceled); on a released handle it returns a
// context ended with ErrNotHeld.
func (lk *Lock) keepJoined(ctx context.Context) context.Context {
	a := lk.joined
	child, cancel := context.WithCancelCause(ctx)
	var r *renewal
	if !lk.handleEnded() { // a released handle keeps nothing on
		r = a.keepOn()
	}
	a.mu.Lock()
	if lk.ended || r == nil {
		a.mu.Unlock()
		cancel(ErrNotHeld)
		return child
	}
	if lk.kept != nil {
		lk.kept(context.Canceled) // replaced
	}
	lk.kept = cancel
	a.mu.Unlock()
	f := &follower{a: a, cancel: cancel}
	f.watch(r)
	context.AfterFunc(child, f.stop)
	return leaseContext{Context: child, f: f, cancel: cancel}
}

// keepOn returns a's kept context, keeping a from now on if it is not kept
// (with no end but a's release or loss: joined handles rely on it); nil
// when a is released, or being released.
func (a *Lock) keepOn() *renewal {
	a.mu.Lock()
	r, gone := a.renewal, a.released || a.releasing
	a.mu.Unlock()
	if gone {
		return nil
	}
	if r == nil || r.ctx.Err() != nil {
		a.keep(context.Background(), false)
		a.mu.Lock()
		r = a.renewal
		a.mu.Unlock()
		if r == nil || r.ctx.Err() != nil {
			return nil // released meanwhile
		}
	}
	return r
}

// A follower ends a joined handle's context (cancel) when the
// acquisition's kept context ends, with its cause; when a new KeepAlive of
// the acquisition replaced that context (which ends it, see KeepAlive), it
// follows the new one instead.
type follower struct {
	a      *Lock
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	stopR   func() bool // stops the watch of the kept context followed
}

// watch follows r: when r's context ends (at once if it has), ended decides.
func (f *follower) watch(r *renewal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopR = context.AfterFunc(r.ctx, func() { f.ended(r) })
	}
}

// ended is called when r's context has ended: a loss ends the joined
// context with ErrLockLost; a replacement (the acquisition's kept context
// is another one now) is followed; the end of the ctx the holder gave
// KeepAlive keeps the acquisition on for the joined handle (see keepOn); a
// release ends the joined context with r's cause.
func (f *follower) ended(r *renewal) {
	cause := context.Cause(r.ctx)
	next, lost := f.a.keptNow()
	switch {
	case errors.Is(cause, ErrLockLost):
		f.cancel(cause)
	case lost:
		f.cancel(ErrLockLost)
	case next != nil && next != r:
		f.watch(next)
	default:
		if next = f.a.keepOn(); next != nil {
			f.watch(next)
			return
		}
		f.cancel(cause)
	}
}

// keptNow returns a's kept context, if any, and whether a was found lost.
func (a *Lock) keptNow() (*renewal, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.renewal, a.lost
}

// stop ends the watch, once the joined handle's context is done.
func (f *follower) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	f.stopR()
}
