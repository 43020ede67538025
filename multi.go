package redislock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// A set lock holds several keys as one lock (ObtainMulti): all of them or
// none, with one token, one lease and, with WithFencing, a fence per key.
//
// All or nothing. The keys of one Redis Cluster hash slot (on any other
// client: all the keys) are taken by one script run (see acquire.lua),
// which takes every key or none; so no other caller ever sees part of them
// held. Keys of several slots are taken slot by slot, in the order of the
// slots, each slot's keys all at once, the earlier slots held while the
// later ones are waited for (see obtainAcross); a call that gives up or
// fails gives back what it took before it returns.
//
// No deadlock. A set waits in the line of each of its keys with one place,
// the same token in each line, put there by one script run: the places of
// one slot's lines are in the order those runs came, the same in every
// line. A set's place is never handed a key: it takes its keys itself,
// when it is first in every line and they all fit (see line.lua). The
// earliest place of all that wait is then first in each of its lines, and
// takes its keys once their holders, who wait for nothing, release them or
// their leases end. Across slots, every set takes the slots in the same
// order and holds none of a later slot while it waits for an earlier one,
// so no cycle of waiters forms (a caller that nests its own locks in
// another order can still make one). No starvation: a set's place is first
// in the line of a key until it takes it; a key that falls free meanwhile
// stays free, for nobody may overtake the first in line, and the set is
// asked to try (see handOff).

// MaxKeys is the most keys ObtainMulti takes.
const MaxKeys = 64

// ObtainMulti acquires the locks on keys for ttl as one lock, waiting as
// Obtain does: it returns holding every key, or none. The Lock it returns
// holds them all with one token and one lease (Key is the first of keys,
// Keys all of them, Fences a fence per key with WithFencing); Release,
// Refresh, TTL, Until, KeepAlive and Context act on them all, and losing
// one of them is losing the lock. A set waits in the line of each of its
// keys, in its turn, and never deadlocks with other sets or single keys
// (see docs/lock-family.md, "Sets of keys").
//
// On a Redis Cluster, the keys of one hash slot are taken by one command,
// all at once; keys of several slots are taken slot by slot (a round trip
// per slot, and a line per slot to wait in), in the order of the slots:
// while it waits for a later slot, the call holds the keys of the earlier
// ones, and gives them back if it fails or gives up. Elsewhere every key
// is taken at once.
//
// keys must be 1 to MaxKeys distinct valid keys; WithPermits does not
// apply (ErrInvalidOption), nor does a quorum Locker. Its errors are those
// of Obtain. A ctx that carries a lock of all of keys joins it; of some of
// them, fails with ErrInvalidOption (it would wait for itself).
func (l *Locker) ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := l.opts.apply(opts, true)
	return l.obtain(ctx, o.setOf(keys), ttl, &o)
}

// TryObtainMulti makes a single attempt to acquire the locks on keys as one
// lock (see ObtainMulti), as TryObtain does for one key.
func (l *Locker) TryObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := l.opts.apply(opts, true)
	o.wait = 0
	return l.obtain(ctx, o.setOf(keys), ttl, &o)
}

// WithLockMulti is WithLock for a set of keys (see ObtainMulti).
func (l *Locker) WithLockMulti(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	if err := l.usable(); err != nil {
		return err
	}
	o := l.opts.apply(opts, true)
	return l.withLock(ctx, o.setOf(keys), fn, &o)
}

// setOf makes o a set's call on keys, and returns its first key (""
// without one: checkSet refuses it). One key is a call of one key, checked
// as a set's (no permits, no quorum).
func (o *options) setOf(keys []string) string {
	o.multi = true
	if len(keys) == 1 {
		return keys[0]
	}
	o.set = slices.Clip(append([]string{}, keys...)) // the caller's slice is the caller's
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// checkSet refuses a set's call that cannot be made: no key, a key given
// twice or invalid, more than MaxKeys, permits. key is the call's key (see
// setOf).
func checkSet(o *options, key string) error {
	keys := o.set
	if keys == nil {
		keys = []string{key} // a set of one key
	}
	switch {
	case len(keys) == 0:
		return fmt.Errorf("%w: no keys", ErrInvalidKey)
	case len(keys) > MaxKeys:
		return fmt.Errorf("%w: %d keys: at most %d", ErrInvalidKey, len(keys), MaxKeys)
	case o.mode.permits > 0:
		return fmt.Errorf("%w: WithPermits: a semaphore is one key, not a set", ErrInvalidOption)
	}
	for i, key := range keys {
		if err := checkKey(key); err != nil {
			return err
		}
		if slices.Contains(keys[:i], key) {
			return fmt.Errorf("%w: %s given twice", ErrInvalidKey, quoteKey(key))
		}
	}
	return nil
}

// Keys returns the keys the lock is held on: a set's (see ObtainMulti),
// in the order they were given, or the one key (nil for a nil Lock).
func (lk *Lock) Keys() []string {
	if lk == nil {
		return nil
	}
	return slices.Clone(keysOf(lk.key, lk.set))
}

// Fences returns the fencing token of each of Keys (see Fence), in the
// same order (nil for a nil Lock); FenceOf gives one key's.
func (lk *Lock) Fences() []int64 {
	if lk == nil {
		return nil
	}
	if lk.set == nil {
		return []int64{lk.fence}
	}
	return slices.Clone(lk.fences)
}

// A set across Cluster slots (see obtainAcross) is one Lock made of parts:
// a Lock per slot, each with its own token, lease and line, taken in the
// order of the slots. The set's methods act on every part, and the set is
// lost when any part is. The parts are never given to a caller.

// slotGroups returns keys grouped by Redis Cluster hash slot, in the order
// of the slots (the same for every caller: see the note at the top), each
// group in the order of keys.
func slotGroups(keys []string) [][]string {
	bySlot := map[uint16][]string{}
	for _, key := range keys {
		s := slot(hashPart(key))
		bySlot[s] = append(bySlot[s], key)
	}
	var slots []uint16
	for s := range bySlot {
		slots = append(slots, s)
	}
	slices.Sort(slots)
	groups := make([][]string, len(slots))
	for i, s := range slots {
		groups[i] = bySlot[s]
	}
	return groups
}

// obtainAcross takes a set whose keys are in several Cluster slots: the
// keys of each slot as one set (or one key), slot after slot in the order
// of the slots, keeping the leases of those it has while it waits for the
// next. It gives back what it took when it fails or gives up, and when a
// part was lost meanwhile. It also returns how many acquire commands it
// sent.
func (l *Locker) obtainAcross(ctx context.Context, ttl time.Duration, o *options, groups [][]string) (*Lock, int, error) {
	var parts []*Lock
	keep, stop := context.WithCancel(context.Background())
	defer stop()
	// giveBack releases the parts taken, and waits for it (withdrawWait at
	// most, also past ctx's end), so that a call that returns has given
	// them back, or says that the release goes on.
	giveBack := func(err error) error {
		if len(parts) == 0 {
			return err
		}
		var done []<-chan struct{}
		for _, p := range parts {
			done = append(done, l.releaseLater(p))
		}
		wctx, deadline, all := context.WithoutCancel(ctx), time.Now().Add(withdrawWait), true
		for _, d := range done {
			all = await(wctx, d, time.Until(deadline)) && all
		}
		if !all {
			return fmt.Errorf("%w; the keys it held are released in the background", err)
		}
		return err
	}
	attempts := 0
	for _, g := range groups {
		og := *o
		og.set = g
		if len(g) == 1 {
			og.set = nil
		}
		p, n, err := l.backend.acquire(ctx, g[0], ttl, &og)
		attempts += n
		if err != nil {
			return nil, attempts, giveBack(err)
		}
		p.mu.Lock()
		p.lostSeen = true // a part's loss is the set's: the set reports it (see keepAcross), parts never do
		p.mu.Unlock()
		parts = append(parts, p)
		p.keep(keep, false)
	}
	stop() // the parts' kept contexts end (context.Canceled)
	for _, p := range parts {
		if p.isLost() {
			return nil, attempts, giveBack(failed("acquire", p.key, fmt.Errorf("%w while the set waited for the keys of later slots", p.gone(0))))
		}
		if err := l.claim(ctx, p, ttl, false, false); err != nil {
			return nil, attempts, giveBack(err)
		}
	}
	lk := &Lock{locker: l, key: o.set[0], rkey: l.keys.lock(o.set[0]), set: o.set, token: parts[0].token, mode: o.mode, handles: 1, since: time.Now(), parts: parts}
	lk.fences = make([]int64, len(o.set))
	for i, key := range o.set {
		for _, p := range parts {
			if slices.Contains(keysOf(p.key, p.set), key) {
				lk.fences[i] = p.FenceOf(key)
			}
		}
	}
	lk.fence = lk.fences[0]
	return lk, attempts, nil
}

// untilAcross is Until for a set across slots: the earliest of its parts',
// or when the set ended for this process (see endNow), if earlier.
func (lk *Lock) untilAcross() time.Time {
	lk.mu.Lock()
	until := lk.over
	lk.mu.Unlock()
	for _, p := range lk.parts {
		if u := p.Until(); until.IsZero() || u.Before(until) {
			until = u
		}
	}
	return until
}

// lostAcross reports whether a set across slots, or a part of it, is lost.
func (lk *Lock) lostAcross() bool {
	return lk.isLost() || slices.ContainsFunc(lk.parts, (*Lock).isLost)
}

// refreshAcross is Refresh for a set across slots: every part's.
func (lk *Lock) refreshAcross(ctx context.Context, ttl time.Duration) error {
	var errs []error
	for _, p := range lk.parts {
		errs = append(errs, p.Refresh(ctx, ttl))
	}
	return lk.acrossErr(ctx, errs)
}

// ttlAcross is TTL for a set across slots: the shortest of its parts'.
func (lk *Lock) ttlAcross(ctx context.Context) (time.Duration, error) {
	var left time.Duration
	var errs []error
	for i, p := range lk.parts {
		d, err := p.TTL(ctx)
		if i == 0 || d < left {
			left = d
		}
		errs = append(errs, err)
	}
	if err := lk.acrossErr(ctx, errs); err != nil {
		return 0, err
	}
	return left, nil
}

// acrossErr is the error of an operation on a set across slots whose parts
// returned errs (one per part, in order): ErrNotHeld when a part was not
// held (the set is lost, for the reason the part found: it names the key),
// else the parts' errors joined.
func (lk *Lock) acrossErr(ctx context.Context, errs []error) error {
	for i, err := range errs {
		if errors.Is(err, ErrNotHeld) {
			why := lk.parts[i].lostReason()
			if why == nil {
				why = lk.gone(0)
			}
			lk.lose(ctx, why)
			return lk.notHeld(nil)
		}
	}
	return errors.Join(errs...)
}

// endAcross is end for a set across slots, whose release has begun: it
// releases every part; a part that Redis failed goes on in the background.
// Its ErrNotHeld names the keys the parts' releases found lost, and no
// other (all of a part's keys when it did not say which: it was released
// before).
func (lk *Lock) endAcross(ctx context.Context) error {
	var lost []string
	var errs []error
	for _, p := range lk.parts {
		missing, err := p.end(ctx)
		switch {
		case missing != nil:
			lost = append(lost, missing...)
			continue
		case errors.Is(err, ErrNotHeld):
			lost = append(lost, keysOf(p.key, p.set)...)
			continue
		case err != nil && !isBackground(err) && !p.isReleased():
			lk.locker.releaseLater(p)
			err = fmt.Errorf("%w; the release %w", err, errBackground)
		}
		errs = append(errs, err)
	}
	lk.markReleased()
	if lost != nil {
		errs = append(errs, lk.notHeld(lost))
	}
	return errors.Join(errs...)
}

// keepAcross is KeepAlive for a set across slots: it keeps every part, and
// its context ends when any part's does, with its cause: a part lost is
// the set lost (see Lock.lose), and ends the keeping of the others.
func (lk *Lock) keepAcross(ctx context.Context, byHandle bool) context.Context {
	cctx, cancel := context.WithCancelCause(ctx)
	r := &renewal{lk: lk, ctx: cctx, cancel: cancel}
	r.end.Store(math.MaxInt64) // the parts' timers tell (see leaseContext)
	lk.mu.Lock()
	if lk.released || lk.ended && byHandle {
		lk.mu.Unlock()
		cancel(ErrNotHeld)
		return cctx
	}
	old := lk.renewal
	lk.renewal = r
	lk.mu.Unlock()
	if old != nil {
		old.cancel(context.Canceled)
	}
	parts := make([]context.Context, len(lk.parts))
	for i, p := range lk.parts {
		parts[i] = p.keep(cctx, false)
		context.AfterFunc(parts[i], func() {
			if errors.Is(context.Cause(parts[i]), ErrLockLost) {
				lk.lose(cctx, p.lostReason())
			}
		})
	}
	context.AfterFunc(cctx, func() {
		lk.mu.Lock()
		if lk.renewal == r {
			lk.renewal = nil
		}
		lk.mu.Unlock()
		if lk.isLost() {
			lk.reportLost(cctx, nil)
			lk.locker.releaseLater(lk) // the parts not lost: see KeepAlive
		}
	})
	return setContext{Context: cctx, parts: parts, cancel: cancel}
}

// A setContext is keepAcross's context. Its Err also asks the parts'
// contexts, which read the clock (see leaseContext).
type setContext struct {
	context.Context
	parts  []context.Context
	cancel context.CancelCauseFunc
}

func (c setContext) Err() error {
	for _, p := range c.parts {
		if p.Err() != nil {
			c.cancel(context.Cause(p))
		}
	}
	return c.Context.Err()
}
