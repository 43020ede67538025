package redislock

import (
	"context"
	"fmt"
	"slices"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
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
	lk   *Lock // a handle: the one its WithLock's fn was given, or Context's
	next *held
}

// Context returns a context, derived from parent, that carries lk: with it,
// an Obtain, TryObtain or WithLock of lk's key on lk's Locker joins lk
// instead of waiting for it (see docs/lock-family.md). A nil or zero Lock
// returns parent: it carries nothing.
func (lk *Lock) Context(parent context.Context) context.Context {
	if !lk.usable() {
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
// not the set. WithLock releases it
// when fn returns: fn must not Release it, nor call its KeepAlive (which
// would replace the context fn runs with).
func FromContext(ctx context.Context) *Lock {
	if h, _ := ctx.Value(heldKey{}).(*held); h != nil {
		return h.lk
	}
	return nil
}

// errUpgrade is the error of an exclusive call on a context that carries a
// shared lock of the same key.
var errUpgrade = fmt.Errorf("%w: an exclusive lock cannot join a shared one the context carries (a reader cannot become the writer)", ErrInvalidOption)

// carried returns the acquisitions of l holding key that ctx carries, which
// a call in mode m may join (none for permits), innermost first.
func (l *Locker) carried(ctx context.Context, key string, m scripts.Mode) []*lease.Hold {
	if m.Permits > 0 {
		return nil
	}
	var hs []*lease.Hold
	for c, _ := ctx.Value(heldKey{}).(*held); c != nil; c = c.next {
		if h := c.lk.h; c.lk.locker == l && slices.Contains(h.Keys, key) && h.Mode.Permits == 0 {
			hs = append(hs, h)
		}
	}
	return hs
}

// checkUpgrade refuses an exclusive call on a context that carries a shared
// lock of the key: bad input, found before anything is sent.
func (l *Locker) checkUpgrade(ctx context.Context, r *lease.Request) error {
	for _, h := range l.carried(ctx, r.Key(), r.Mode) {
		if h.Mode.Shared && r.Mode.Exclusive() {
			return errUpgrade
		}
	}
	return nil
}

// join returns a new handle of the lock on r's keys that ctx carries for
// l, if it carries one that r may join, and nil otherwise. A set's call
// joins a lock that holds all its keys; a lock that holds some of them
// would make the call wait for itself: that is an error.
func (l *Locker) join(ctx context.Context, r *lease.Request) (*Lock, error) {
	carried := l.carried(ctx, r.Key(), r.Mode)
	if len(r.Keys) > 1 {
		carried = nil
		partly := false
		for _, k := range r.Keys {
			for _, h := range l.carried(ctx, k, r.Mode) {
				if _, lost := h.Join(false); lost {
					return nil, lostCarried(k)
				}
				partly = true
				if !slices.ContainsFunc(r.Keys, func(k string) bool { return !slices.Contains(h.Keys, k) }) {
					carried = append(carried, h)
				}
			}
		}
		if partly && carried == nil {
			return nil, errPartly
		}
	}
	for _, h := range carried {
		switch joined, lost := h.Join(true); {
		case lost:
			return nil, lostCarried(r.Key())
		case joined:
			return &Lock{locker: l, h: h, keys: r.Keys, joined: true}, nil
		}
	}
	return nil, nil
}

// lostCarried is the error of a call on key whose context carries a lost
// lock of key.
func lostCarried(key string) error {
	return fmt.Errorf("%w: %s: the lock this context carries is lost (its lease is over): its holder must stop", ErrLockLost, scripts.QuoteKey(key))
}

// errPartly is the error of a set's call whose context carries a lock of
// some of its keys, but not of all: it would wait for itself.
var errPartly = fmt.Errorf("%w: the context carries a lock of some of the keys, not of all: the call would wait for itself", ErrInvalidOption)
