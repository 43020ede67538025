package redislock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrLockLost is the cause (see context.Cause) with which the context of a
// kept lease is cancelled when the lock is lost: a renewal found the key gone
// or owned by another token, or no renewal succeeded before the lease ran out
// (Redis or the network hung). The work done under the lock must stop; it may
// overlap with the next holder's from then on. WithLock's error wraps it too.
var ErrLockLost = errors.New("redislock: lock lost")

// drift is how much sooner than Redis a holder considers its lease over: the
// two clocks may run at slightly different rates, and the signal must arrive
// while the lock is still held.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// KeepAlive keeps the lock's lease alive in the background and returns a
// context, derived from ctx, that tells the holder when the lock is lost.
//
// The lease is renewed to the lock's ttl (that of the acquisition or of the
// latest Refresh) about every ttl/3, and retried quickly after a transient
// error. The returned context is cancelled with cause ErrLockLost
//
//   - as soon as a renewal finds the key gone or owned by another token, and
//   - at the latest at T + ttl - ttl/100 - 2ms, where T is when the last
//     successful renewal (or the acquisition) was sent, even if Redis hangs
//     and that renewal never returns. Redis cannot have let the lease expire
//     by then, so the lock is held for as long as the context is not done.
//
// Renewal stops when the returned context is done: when ctx is, when the
// lock is lost, or when Release is called. Calling KeepAlive again replaces
// the previous context (it is cancelled). All leases of a Locker are renewed
// by one goroutine, in one pipelined round trip per tick; it exits when the
// Locker keeps no lease.
func (lk *Lock) KeepAlive(ctx context.Context) context.Context {
	lctx, cancel := context.WithCancelCause(ctx)
	le := &lease{lk: lk, ctx: lctx, cancel: cancel}
	lk.mu.Lock()
	if lk.released {
		lk.mu.Unlock()
		cancel(ErrNotHeld)
		return lctx
	}
	old := lk.lease
	lk.lease = le
	le.expire = time.AfterFunc(time.Until(lk.until)-drift(lk.ttl), func() { cancel(ErrLockLost) })
	due := lk.until.Add(-lk.ttl).Add(lk.ttl / 3)
	lk.mu.Unlock()
	if old != nil {
		old.cancel(context.Canceled)
	}

	k := &lk.locker.keeper
	k.add(le, due)
	context.AfterFunc(lctx, func() {
		le.expire.Stop()
		k.remove(le)
		lk.mu.Lock()
		if lk.lease == le {
			lk.lease = nil
		}
		lk.mu.Unlock()
	})
	return lctx
}

// extended records that the lease was set to ttl by a command sent at start.
func (lk *Lock) extended(start time.Time, ttl time.Duration) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.until, lk.ttl = start.Add(ttl), ttl
	if le := lk.lease; le != nil && le.ctx.Err() == nil {
		le.expire.Reset(time.Until(lk.until) - drift(ttl))
	}
}

// stopKeeping ends the lock's lease keeping, if any.
func (lk *Lock) stopKeeping() {
	lk.mu.Lock()
	le := lk.lease
	lk.mu.Unlock()
	if le != nil {
		le.cancel(context.Canceled)
	}
}

// A lease is a Lock kept alive by its Locker's keeper.
type lease struct {
	lk     *Lock
	ctx    context.Context
	cancel context.CancelCauseFunc
	expire *time.Timer // cancels ctx with ErrLockLost when the lease runs out

	// guarded by keeper.mu
	due      time.Time // when the next renewal is due
	renewing bool      // a renewal is in flight
}

// keeper renews the leases of one Locker from a single goroutine, which
// runs while there is a lease to keep.
type keeper struct {
	mu      sync.Mutex
	leases  map[*lease]struct{}
	running bool
	wake    chan struct{}
}

func (k *keeper) add(le *lease, due time.Time) {
	k.mu.Lock()
	if k.leases == nil {
		k.leases = make(map[*lease]struct{})
		k.wake = make(chan struct{}, 1)
	}
	le.due = due
	k.leases[le] = struct{}{}
	start := !k.running
	k.running = true
	k.mu.Unlock()
	if start {
		go k.loop(le.lk.locker)
	} else {
		k.poke()
	}
}

func (k *keeper) remove(le *lease) {
	k.mu.Lock()
	delete(k.leases, le)
	k.mu.Unlock()
	k.poke()
}

func (k *keeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// renewRetry is how soon a renewal that failed with an error (not a lost
// lock) is tried again, at most.
const renewRetry = 50 * time.Millisecond

// loop renews due leases until there are none left. It wakes when the
// first lease is due and renews with it every lease due within a sixth of its
// ttl, so that many locks share a round trip.
func (k *keeper) loop(l *Locker) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		if len(k.leases) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		now := time.Now()
		next := now.Add(time.Hour)
		var batch []*lease
		for le := range k.leases {
			if le.renewing {
				continue
			}
			slack := le.lk.currentTTL() / 6
			if !le.due.After(now.Add(slack)) {
				le.renewing = true
				batch = append(batch, le)
			} else if le.due.Before(next) {
				next = le.due
			}
		}
		k.mu.Unlock()

		if len(batch) > 0 {
			k.renew(l, batch)
			continue // look again: some leases may have come due meanwhile
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-k.wake:
			if !timer.Stop() {
				<-timer.C
			}
		}
	}
}

// renew sends one renewal for each lease of batch in one pipelined round
// trip, bounded by the shortest time any of them has left; an abandoned round
// trip still settles its leases when it returns.
func (k *keeper) renew(l *Locker, batch []*lease) {
	start := time.Now()
	ttls := make([]time.Duration, len(batch))
	bound := time.Hour
	for i, le := range batch {
		le.lk.mu.Lock()
		ttls[i] = le.lk.ttl
		if left := time.Until(le.lk.until) - drift(ttls[i]); left < bound {
			bound = left
		}
		le.lk.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, renewRetry))
	defer cancel()
	// The round trip settles its leases itself, also when it is abandoned:
	// they stay marked as renewing until then, and their expiry timers run.
	_, _ = bounded(ctx, l.direct, func(ctx context.Context) (struct{}, error) {
		res, err := l.refreshAll(ctx, batch, ttls)
		k.settle(batch, ttls, start, res, err)
		return struct{}{}, nil
	}, nil)
}

// settle applies the outcome of a renewal round trip sent at start.
func (k *keeper) settle(batch []*lease, ttls []time.Duration, start time.Time, res []int64, err error) {
	retry := time.Now().Add(renewRetry)
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, le := range batch {
		le.renewing = false
		switch {
		case le.ctx.Err() != nil: // stopped meanwhile
		case err != nil || res == nil:
			le.due = retry
		case res[i] == 1:
			le.lk.extended(start, ttls[i])
			le.due = start.Add(ttls[i] / 3)
		case res[i] == 0:
			le.cancel(ErrLockLost)
		default: // this lease's command failed: try again soon
			le.due = retry
		}
	}
	k.poke()
}

// refreshAll runs refreshScript for every lease of batch in one pipeline. It
// returns 1 (renewed), 0 (lost) or -1 (error) per lease. After SCRIPT FLUSH
// the leases whose EVALSHA said NOSCRIPT are sent again with EVAL, which
// loads the script.
func (l *Locker) refreshAll(ctx context.Context, batch []*lease, ttls []time.Duration) ([]int64, error) {
	cmds := make([]*redis.Cmd, len(batch))
	run := func(idx []int, sha bool) error {
		_, err := l.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				keys, args := refreshKeys(batch[i].lk.key), refreshArgv(batch[i].lk.token, ttls[i], false)
				if sha {
					cmds[i] = refreshScript.EvalSha(ctx, p, keys, args...)
				} else {
					cmds[i] = refreshScript.Eval(ctx, p, keys, args...)
				}
			}
			return nil
		})
		return err
	}
	all := make([]int, len(batch))
	for i := range all {
		all[i] = i
	}
	err := run(all, true)
	var again []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		err = run(again, false)
	}
	res := make([]int64, len(batch))
	ok := false
	for i, c := range cmds {
		res[i] = -1
		if r, cerr := c.Int64Slice(); cerr == nil && len(r) == 2 {
			res[i], ok = r[0], true
		}
	}
	if !ok {
		return nil, err
	}
	return res, nil
}
