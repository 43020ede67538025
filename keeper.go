package redislock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrLockLost is the cause (see context.Cause) with which the context of a
// kept lease is cancelled when the lock is lost: a renewal found the key gone
// or owned by another token, or no renewal succeeded before the lease ran out
// (Redis or the network hung). The work done under the lock must stop; it may
// overlap with the next holder's from then on. WithLock's error wraps it too,
// and so does that of an Obtain, TryObtain or WithLock whose ctx carries a
// lost lock of the key (see Lock.Context).
var ErrLockLost = errors.New("redislock: lock lost")

// How the keeper renews, and when it gives up (the numbers, and why):
//
//   - A lease is renewed a third of its ttl after the command that last set
//     it was sent: two more tries fit before it runs out.
//   - Renewals due within a sixth of their ttl of the first one go along in
//     its pipeline, one per Redis node (a Cluster master; one for other
//     clients) and maxBatch renewals, so that 10,000 kept leases cost about
//     20 round trips a second, and a node that is down or slow holds up
//     only its own leases.
//   - A renewal not answered after a quarter of the lease it has left is
//     sent again, on another connection (go-redis takes a free one from its
//     pool), rather than waited for: one dead connection, or one reply stuck
//     in a slow network, must not cost a lease that Redis would renew. At
//     most maxInFlight renewals of a lease are in flight.
//   - A renewal that failed is tried again renewRetry later.
//   - The holder is told the lock is lost (its context is cancelled) margin
//     before the lease's local end: ttl/100 for clocks that run at slightly
//     different rates, and the safety margin (WithSafetyMargin, default
//     DefaultSafetyMargin, at most a quarter of the ttl) for the timer that
//     fires late: measured on a 2-core VM with both cores busy, Go timers
//     fired up to 45 ms late (2,000 timers, 300 ms apart each, other
//     processes spinning on both cores and this one allocating).
const (
	renewRetry  = 50 * time.Millisecond
	maxInFlight = 3
	minHedge    = 5 * time.Millisecond
	maxBatch    = 512 // renewals per pipeline: a longer one holds up Redis
)

// margin is how long before the local end of a lease of ttl its holder is
// told that the lock is lost (see above).
func margin(ttl, safety time.Duration) time.Duration {
	return ttl/100 + min(safety, ttl/4)
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
// nothing (see Lock.lose).
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
	if lk.joined != nil {
		return lk.keepJoined(ctx)
	}
	return lk.keep(ctx, true)
}

// keep is KeepAlive for an acquisition; byHandle says that its own handle
// asks, which it may not once it was released (joined handles may: see
// keepOn).
func (lk *Lock) keep(ctx context.Context, byHandle bool) context.Context {
	if lk.parts != nil {
		return lk.keepAcross(ctx, byHandle)
	}
	return lk.keepOne(ctx, byHandle)
}

// keepOne is keep for a Lock of one key, or of one slot's keys.
func (lk *Lock) keepOne(ctx context.Context, byHandle bool) context.Context {
	cctx, cancel := context.WithCancelCause(ctx)
	r := &renewal{lk: lk, ctx: cctx, cancel: cancel}
	lctx := leaseContext{Context: cctx, r: r}
	lk.mu.Lock()
	if lk.released || lk.ended && byHandle {
		lk.mu.Unlock()
		cancel(ErrNotHeld)
		return lctx
	}
	old := lk.renewal
	lk.renewal = r
	r.expire = time.AfterFunc(time.Hour, r.lose)
	lk.moveExpiry()
	r.schedule(lk.clock.until, lk.clock.ttl)
	lk.mu.Unlock()
	if old != nil {
		old.cancel(context.Canceled)
	}

	k := &lk.locker.keeper
	k.add(lk.locker, r)
	context.AfterFunc(lctx, func() {
		r.expire.Stop()
		lastErr := k.remove(r)
		lk.mu.Lock()
		if lk.renewal == r {
			lk.renewal = nil
		}
		lk.mu.Unlock()
		if errors.Is(context.Cause(lctx), ErrLockLost) && lk.isLost() {
			lk.reportLost(lctx, lastErr) // not for a cause ctx had from its parent
			lk.locker.releaseLater(lk)   // see KeepAlive: given back once Redis answers
		}
	})
	return lctx
}

// moveExpiry sets KeepAlive's lost-lock timer to the lease's local end,
// less the margin. lk.mu is held.
func (lk *Lock) moveExpiry() {
	if r := lk.renewal; r != nil && r.ctx.Err() == nil {
		end := lk.clock.until.Add(-margin(lk.clock.ttl, lk.locker.opts.safety))
		r.end.Store(int64(end.Sub(epoch)))
		r.expire.Reset(time.Until(end))
	}
}

// A leaseContext is the context KeepAlive returns. Its Err also reads the
// clock: called once the lease's local end, less the margin, has passed, it
// cancels the context with ErrLockLost there and then. So a holder that
// polls Err learns of the loss in time even when the lost-lock timer fires
// late on a busy machine; one that waits on Done depends on the timer.
type leaseContext struct {
	context.Context // the cancelable context; Done, Value and Cause are its
	r               *renewal
	f               *follower               // instead of r, for a joined handle's context (see keepJoined)
	cancel          context.CancelCauseFunc // of a joined handle's context, or nil
}

func (c leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	r := c.r
	if c.f != nil { // a joined handle's: the acquisition's kept context now
		var lost bool
		r, lost = c.f.a.keptNow()
		switch {
		case lost || r != nil && errors.Is(context.Cause(r.ctx), ErrLockLost):
			c.cancel(ErrLockLost)
			return c.Context.Err()
		case r == nil || r.ctx.Err() != nil:
			return nil // replaced or ended: the follower follows or tells
		}
	}
	if time.Since(epoch) >= time.Duration(r.end.Load()) {
		r.lose()
		if c.cancel != nil {
			c.cancel(ErrLockLost) // at once, not when r's context tells it
		}
		return c.Context.Err()
	}
	return nil
}

// epoch is the origin of renewal.end, on the monotonic clock.
var epoch = time.Now()

// lose is KeepAlive's lost-lock timer, which fires margin before the
// lease's local end: the lock is lost (see Lock.lose), unless r was
// stopped or replaced, or a renewal answered while the timer was firing
// moved the end (moveExpiry then set the timer again).
func (r *renewal) lose() {
	if r.ctx.Err() == nil && time.Since(epoch) >= time.Duration(r.end.Load()) {
		r.lk.lose(r.ctx, nil)
	}
}

// stopKeeping ends the lock's lease keeping, if any.
func (lk *Lock) stopKeeping() {
	lk.mu.Lock()
	r := lk.renewal
	lk.mu.Unlock()
	if r != nil {
		r.cancel(context.Canceled)
	}
}

// A renewal is the keeper's record of a Lock kept alive by KeepAlive.
type renewal struct {
	lk     *Lock
	ctx    context.Context
	cancel context.CancelCauseFunc
	expire *time.Timer  // cancels ctx with ErrLockLost when the lease runs out
	end    atomic.Int64 // when expire is due, as a time since epoch

	// guarded by keeper.mu
	due      time.Time     // when the next renewal is due
	ttl      time.Duration // the lease renewals set (the Lock's, cached)
	inflight int           // renewals sent and not returned
	sent     time.Time     // when the latest was sent
	hedge    time.Duration // how long after sent another is sent while it is in flight
	node     string        // the Redis node that serves the key; "" for all of a non-Cluster client
	lastErr  error         // the error of the latest renewal, nil after a success
}

// schedule makes r due a third of ttl after the command that set the lease
// ending at until was sent: renewals follow the lease's length. k.mu (or,
// before r is the keeper's, lk.mu) is held.
func (r *renewal) schedule(until time.Time, ttl time.Duration) {
	r.due, r.ttl = until.Add(-ttl*2/3), ttl
}

// A batchKey is what the renewals of one pipeline share: the node that
// serves their keys, and the replicas that must acknowledge them.
type batchKey struct {
	node     string
	replicas replicas
}

// A renewalSend is one renewal of a lease to send.
type renewalSend struct {
	r     *renewal
	hedge bool // another renewal of the lease is in flight
}

// keeper renews the leases of one Locker. Its goroutine, loop, decides what
// is due and sends each node's pipeline from a goroutine of its own, which
// it never waits for. loop is started by the first renewal and returns once
// there is none left; it runs while wake is not nil.
type keeper struct {
	mu       sync.Mutex
	renewals map[*renewal]struct{}
	wake     chan struct{} // poked when renewals or their timing changed; nil while loop is not running
	wakeAt   time.Time     // when loop looks again, unless poked
}

func (k *keeper) add(l *Locker, r *renewal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.renewals == nil {
		k.renewals = make(map[*renewal]struct{})
	}
	k.renewals[r] = struct{}{}
	if k.wake == nil {
		k.wake = make(chan struct{}, 1)
		go k.loop(l, k.wake)
	}
	k.poke()
}

// remove stops renewing r, and returns the error of its latest renewal.
func (k *keeper) remove(r *renewal) (lastErr error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.renewals, r)
	k.poke()
	return r.lastErr
}

// reschedule makes r due a third of its ttl after the command that last
// set its lease (after a Refresh).
func (k *keeper) reschedule(r *renewal) {
	until, ttl := r.lk.lease()
	k.mu.Lock()
	defer k.mu.Unlock()
	r.schedule(until, ttl)
	k.poke()
}

// hurry makes r due a third of ttl after sent, if that is sooner than it
// is: a command sent then shortened the lease to ttl, and may not return.
func (k *keeper) hurry(r *renewal, sent time.Time, ttl time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.renewals[r]; ok && sent.Add(ttl/3).Before(r.due) {
		r.schedule(sent.Add(ttl), ttl)
		k.poke()
	}
}

// poke wakes loop. k.mu is held.
func (k *keeper) poke() {
	if k.wake == nil {
		return
	}
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *keeper) loop(l *Locker, wake chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batches, next, ok := k.due(l)
		if !ok {
			return
		}
		for _, b := range batches {
			go k.renew(l, b)
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-wake:
		}
	}
}

// due returns the renewals to send now, in batches of one node each, and
// when to look again. ok is false when there is nothing left to keep: loop
// returns.
func (k *keeper) due(l *Locker) (batches [][]renewalSend, next time.Time, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.renewals) == 0 {
		k.wake = nil
		return nil, time.Time{}, false
	}
	now := time.Now()
	next = now.Add(time.Hour)
	byNode := make(map[batchKey][]renewalSend)
	defer func() { k.wakeAt = next }()
	for r := range k.renewals {
		if r.ctx.Err() != nil {
			continue // lost or stopped: KeepAlive's clean-up removes it
		}
		at, slack := r.due, r.ttl/6
		if r.lastErr != nil {
			slack = 0 // a retry waits for its renewRetry: no batching slack
		}
		send := !at.After(now.Add(slack))
		if r.inflight > 0 {
			at = r.sent.Add(r.hedge)
			send = r.inflight < maxInFlight && !at.After(now)
		}
		if !send {
			if r.inflight < maxInFlight && at.Before(next) {
				next = at
			}
			continue
		}
		if r.node == "" {
			r.node = l.nodeOf(r.lk.rkey)
		}
		until, _ := r.lk.lease()
		r.inflight++
		r.sent, r.hedge = now, max(until.Sub(now)/4, minHedge)
		b := batchKey{r.node, r.lk.replicas}
		byNode[b] = append(byNode[b], renewalSend{r: r, hedge: r.inflight > 1})
		if hedge := now.Add(r.hedge); hedge.Before(next) {
			next = hedge
		}
	}
	for _, rs := range byNode {
		for len(rs) > 0 {
			n := min(len(rs), maxBatch)
			batches = append(batches, rs[:n])
			rs = rs[n:]
		}
	}
	return batches, next, true
}

// renew sends one renewal for each lease of sends, all served by one node,
// in one pipeline, bounded by the shortest time any of them has left, and
// records their outcome when the replies are in (see leaseSet).
func (k *keeper) renew(l *Locker, sends []renewalSend) {
	var batch []renewalSend
	var sets []leaseSet
	var calls []refreshArgs
	bound := time.Hour
	for _, s := range sends {
		until, ttl := s.r.lk.lease()
		set, ok := s.r.lk.beginSet(ttl, false)
		if !ok { // released or lost meanwhile
			k.mu.Lock()
			s.r.inflight--
			k.mu.Unlock()
			continue
		}
		batch, sets, calls = append(batch, s), append(sets, set), append(calls, set.args)
		bound = min(bound, time.Until(until))
	}
	if len(batch) == 0 {
		return
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, renewRetry))
	defer cancel()
	replies := l.backend.renew(ctx, calls, batch[0].r.lk.replicas)
	for i, s := range batch {
		sets[i].done(replies[i])
		if replies[i].lost() {
			s.r.lk.lose(s.r.ctx, s.r.lk.gone(replies[i].missing))
		}
	}
	retry := time.Now().Add(renewRetry)
	k.mu.Lock()
	for i, s := range batch {
		r := s.r
		r.inflight--
		r.lastErr = replies[i].err
		switch {
		case replies[i].err == nil && replies[i].code != replyNotOurs: // set, or superseded by a Refresh
			r.schedule(r.lk.lease())
		case r.inflight == 0:
			r.due, r.node = retry, "" // and ask which node serves it again
		}
		if r.due.Before(k.wakeAt) {
			k.poke() // loop sleeps past this renewal's turn
		}
	}
	k.mu.Unlock()
	for i, s := range batch {
		if replies[i].lost() && releaseBegun(s.r.lk) {
			continue // it found the key gone by the release's doing: no renewal to speak of
		}
		l.renewed(s.r, sent, s.hedge, replies[i].event(), replies[i].err)
	}
}

// nodeOf returns the address of the Redis node that serves key, for a
// ClusterClient, or "" (one node for all keys) for other clients. When the
// ClusterClient cannot tell (its slot map is being reloaded), it returns
// the key's slot instead: the renewals of one slot are served by one node,
// so a pipeline never waits on two.
func (l *Locker) nodeOf(key string) string {
	c, ok := l.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	node, err := c.MasterForKey(ctx, key)
	if err != nil {
		return "slot " + strconv.Itoa(int(slot(hashPart(key))))
	}
	return node.Options().Addr
}
