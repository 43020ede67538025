package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// How the keeper renews, and when it gives up (the numbers, and why):
//
//   - A lease is renewed a third of its ttl after the command that last set
//     it was sent: two more tries fit before it runs out.
//   - Renewals due within a sixth of their ttl of the first one go along in
//     its pipeline, one per Redis node (a Cluster master; one for other
//     clients: see Store.Batch) and maxBatch renewals, so that 10,000 kept
//     leases cost about 20 round trips a second, and a node that is down or
//     slow holds up only its own leases.
//   - A renewal not answered after a quarter of the lease it has left is
//     sent again, on another connection (go-redis takes a free one from its
//     pool), rather than waited for: one dead connection, or one reply stuck
//     in a slow network, must not cost a lease that Redis would renew. At
//     most MaxInFlight renewals of a lease are in flight.
//   - A renewal that failed is tried again RenewRetry later.
//   - The holder is told the lock is lost (its context is cancelled) margin
//     before the lease's local end: ttl/100 for clocks that run at slightly
//     different rates, and the safety margin (WithSafetyMargin, default
//     50 ms, at most a quarter of the ttl) for the timer that fires late:
//     measured on a 2-core VM with both cores busy, Go timers fired up to
//     45 ms late (2,000 timers, 300 ms apart each, other processes spinning
//     on both cores and this one allocating).
const (
	RenewRetry  = 50 * time.Millisecond
	MaxInFlight = 3
	MinHedge    = 5 * time.Millisecond
	maxBatch    = 512 // renewals per pipeline: a longer one holds up Redis
)

// margin is how long before the local end of a lease of ttl its holder is
// told that the lock is lost (see above).
func margin(ttl, safety time.Duration) time.Duration {
	return ttl/100 + min(safety, ttl/4)
}

// A keeping is a hold kept alive (see Keep): the contexts it gave, its
// lost-lock timer, and the keeper's record of its renewals.
type keeping struct {
	h       *Hold
	ctxs    map[*keptContext]struct{} // under h.mu
	forever bool                      // kept until released or lost, whatever becomes of the contexts (under h.mu)
	expire  *time.Timer               // loses the hold when its lease runs out
	end     atomic.Int64              // when expire is due, as a time since epoch
	stopped atomic.Bool

	// guarded by keeper.mu
	due      time.Time     // when the next renewal is due
	ttl      time.Duration // the lease renewals set (the hold's, cached)
	inflight int           // renewals sent and not returned
	sent     time.Time     // when the latest was sent
	hedge    time.Duration // how long after sent another is sent while it is in flight
	batch    string        // what its renewals share a pipeline by (see Store.Batch); "" when not known
	lastErr  error         // the error of the latest renewal, nil after a success
}

// Keep keeps h's lease alive and returns a context, derived from parent,
// that ends with cause ErrLockLost when h is lost, context.Canceled when
// h's release begins, and parent's cause when parent ends (see the root
// package's Lock.KeepAlive for the promise). h is renewed while a context
// that Keep returned lasts, and, when forever, until h is released or lost
// (a joined handle's other handles may rely on it). On a hold that is not
// Held it returns a context ended with ErrNotHeld (ErrLockLost when lost).
func (h *Hold) Keep(parent context.Context, forever bool) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	c := &keptContext{Context: ctx, cancel: cancel}
	h.mu.Lock()
	if h.state != Held {
		cause := scripts.ErrNotHeld
		if h.state == Lost {
			cause = scripts.ErrLockLost
		}
		h.mu.Unlock()
		cancel(cause)
		return c
	}
	k, fresh := h.kept, false
	if k == nil {
		k, fresh = &keeping{h: h, ctxs: map[*keptContext]struct{}{}}, true
		k.expire = time.AfterFunc(time.Hour, k.lose)
		h.kept = k
		k.moveExpiry()
		k.schedule(h.clock.until, h.clock.ttl)
	}
	k.ctxs[c] = struct{}{}
	k.forever = k.forever || forever
	c.k = k
	h.mu.Unlock()
	if fresh {
		h.env.keeper.add(h.env, k)
	}
	context.AfterFunc(ctx, func() { k.drop(c) })
	return c
}

// drop forgets c, whose context ended; the hold is kept no more once no
// context is left (and it was not kept forever).
func (k *keeping) drop(c *keptContext) {
	h := k.h
	h.mu.Lock()
	delete(k.ctxs, c)
	last := len(k.ctxs) == 0 && !k.forever && h.kept == k
	if last {
		h.kept = nil
	}
	h.mu.Unlock()
	if last {
		k.halt()
	}
}

// stop ends k for good with cause: its contexts end, renewals stop. k may
// be nil. The hold's mu is not held: stop ends contexts, whose handlers
// take it.
func (k *keeping) stop(cause error) {
	if k == nil {
		return
	}
	h := k.h
	h.mu.Lock()
	if h.kept == k {
		h.kept = nil
	}
	ctxs := k.ctxs
	k.ctxs = nil
	h.mu.Unlock()
	k.halt()
	for c := range ctxs {
		c.cancel(cause)
	}
}

// halt stops k's timer and renewals.
func (k *keeping) halt() {
	if k.stopped.Swap(true) {
		return
	}
	k.expire.Stop()
	k.h.env.keeper.remove(k)
}

// moveExpiry sets the lost-lock timer to the lease's local end, less the
// margin. The hold's mu is held; k may be nil.
func (k *keeping) moveExpiry() {
	if k == nil || k.stopped.Load() {
		return
	}
	h := k.h
	end := h.clock.until.Add(-margin(h.clock.ttl, h.env.Safety))
	k.end.Store(int64(end.Sub(epoch)))
	k.expire.Reset(time.Until(end))
}

// lose is the lost-lock timer, which fires margin before the lease's local
// end: the hold is lost (see Hold.lose), unless k was stopped, or a
// renewal answered while the timer was firing moved the end (moveExpiry
// then set the timer again).
func (k *keeping) lose() {
	if k.stopped.Load() || time.Since(epoch) < time.Duration(k.end.Load()) {
		return
	}
	h := k.h
	k.h.env.keeper.mu.Lock()
	lastErr := k.lastErr
	k.h.env.keeper.mu.Unlock()
	why := fmt.Errorf("%w: %s: no renewal was answered before the lease ran out (Redis or the network stalled)", scripts.ErrLockLost, scripts.QuoteKeys(h.Keys))
	if lastErr != nil {
		why = fmt.Errorf("%w: %s: no renewal succeeded before the lease ran out; the last one failed: %w", scripts.ErrLockLost, scripts.QuoteKeys(h.Keys), lastErr)
	}
	h.lose(k.context(), why)
}

// context returns one of k's contexts, for the hooks of what k finds.
func (k *keeping) context() context.Context {
	k.h.mu.Lock()
	defer k.h.mu.Unlock()
	for c := range k.ctxs {
		return c
	}
	return context.Background()
}

// epoch is the origin of keeping.end, on the monotonic clock.
var epoch = time.Now()

// A keptContext is a context Keep returns. Its Err also reads the clock:
// called once the lease's local end, less the margin, has passed, it loses
// the hold there and then. So a holder that polls Err learns of the loss in
// time even when the lost-lock timer fires late on a busy machine; one that
// waits on Done depends on the timer.
type keptContext struct {
	context.Context
	cancel context.CancelCauseFunc
	k      *keeping
}

func (c *keptContext) Err() error {
	if err := c.Context.Err(); err != nil || c.k == nil {
		return err
	}
	if time.Since(epoch) >= time.Duration(c.k.end.Load()) {
		c.k.lose()
		c.cancel(scripts.ErrLockLost) // at once, also while the timer's lose is under way
	}
	return c.Context.Err()
}

// Cancel ends c (a context Keep returned) with cause; a no-op for other
// contexts.
func Cancel(ctx context.Context, cause error) {
	if c, ok := ctx.(*keptContext); ok {
		c.cancel(cause)
	}
}

// schedule makes k due a third of ttl after the command that set the lease
// ending at until was sent: renewals follow the lease's length. keeper.mu
// (or, before k is the keeper's, the hold's mu) is held.
func (k *keeping) schedule(until time.Time, ttl time.Duration) {
	k.due, k.ttl = until.Add(-ttl*2/3), ttl
}

// A renewalSend is one renewal of a lease to send.
type renewalSend struct {
	k     *keeping
	hedge bool // another renewal of the lease is in flight
}

// A batchKey is what the renewals of one pipeline share: the node that
// serves their keys, and the replicas that must acknowledge them.
type batchKey struct {
	batch    string
	replicas scripts.Replicas
}

// keeper renews the kept leases of one Locker. Its goroutine, loop, decides
// what is due and sends each node's pipeline from a goroutine of its own,
// which it never waits for. loop is started by the first renewal and
// returns once there is none left; it runs while wake is not nil.
type keeper struct {
	mu     sync.Mutex
	kept   map[*keeping]struct{}
	wake   chan struct{} // poked when renewals or their timing changed; nil while loop is not running
	wakeAt time.Time     // when loop looks again, unless poked
}

func (kp *keeper) add(e *Env, k *keeping) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if k.stopped.Load() {
		return
	}
	if kp.kept == nil {
		kp.kept = make(map[*keeping]struct{})
	}
	kp.kept[k] = struct{}{}
	if kp.wake == nil {
		kp.wake = make(chan struct{}, 1)
		go kp.loop(e, kp.wake)
	}
	kp.poke()
}

func (kp *keeper) remove(k *keeping) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	delete(kp.kept, k)
	kp.poke()
}

// reschedule makes h's renewal due a third of its ttl after the command
// that last set its lease (after a Refresh).
func (kp *keeper) reschedule(h *Hold) {
	h.mu.Lock()
	k, until, ttl := h.kept, h.clock.until, h.clock.ttl
	h.mu.Unlock()
	if k == nil {
		return
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	k.schedule(until, ttl)
	kp.poke()
}

// hurry makes k due a third of ttl after sent, if that is sooner than it
// is: a command sent then shortened the lease to ttl, and may not return.
func (kp *keeper) hurry(k *keeping, sent time.Time, ttl time.Duration) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if _, ok := kp.kept[k]; ok && sent.Add(ttl/3).Before(k.due) {
		k.schedule(sent.Add(ttl), ttl)
		kp.poke()
	}
}

// poke wakes loop. kp.mu is held.
func (kp *keeper) poke() {
	if kp.wake == nil {
		return
	}
	select {
	case kp.wake <- struct{}{}:
	default:
	}
}

func (kp *keeper) loop(e *Env, wake chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batches, next, ok := kp.due(e)
		if !ok {
			return
		}
		for _, b := range batches {
			go kp.renew(e, b)
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
func (kp *keeper) due(e *Env) (batches [][]renewalSend, next time.Time, ok bool) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if len(kp.kept) == 0 {
		kp.wake = nil
		return nil, time.Time{}, false
	}
	now := time.Now()
	next = now.Add(time.Hour)
	byBatch := make(map[batchKey][]renewalSend)
	defer func() { kp.wakeAt = next }()
	for k := range kp.kept {
		at, slack := k.due, k.ttl/6
		if k.lastErr != nil {
			slack = 0 // a retry waits for its RenewRetry: no batching slack
		}
		send := !at.After(now.Add(slack))
		if k.inflight > 0 {
			at = k.sent.Add(k.hedge)
			send = k.inflight < MaxInFlight && !at.After(now)
		}
		if !send {
			if k.inflight < MaxInFlight && at.Before(next) {
				next = at
			}
			continue
		}
		if k.batch == "" {
			k.batch = e.Store.Batch(k.h)
		}
		until, _ := k.h.Lease()
		k.inflight++
		k.sent, k.hedge = now, max(until.Sub(now)/4, MinHedge)
		b := batchKey{k.batch, k.h.Replicas}
		byBatch[b] = append(byBatch[b], renewalSend{k: k, hedge: k.inflight > 1})
		if hedge := now.Add(k.hedge); hedge.Before(next) {
			next = hedge
		}
	}
	for _, rs := range byBatch {
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
// records their outcome when the replies are in (see Set).
func (kp *keeper) renew(e *Env, sends []renewalSend) {
	var batch []renewalSend
	var sets []Set
	bound := time.Hour
	for _, s := range sends {
		until, ttl := s.k.h.Lease()
		set, ok := s.k.h.beginSet(ttl, false)
		if !ok { // released or lost meanwhile
			kp.mu.Lock()
			s.k.inflight--
			kp.mu.Unlock()
			continue
		}
		batch, sets = append(batch, s), append(sets, set)
		bound = min(bound, time.Until(until))
	}
	if len(batch) == 0 {
		return
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, RenewRetry))
	defer cancel()
	replies := e.Store.Renew(ctx, sets)
	for i, s := range batch {
		sets[i].done(replies[i])
		if replies[i].Lost() {
			s.k.h.lose(s.k.context(), s.k.h.Gone(replies[i].Missing))
		}
	}
	retry := time.Now().Add(RenewRetry)
	kp.mu.Lock()
	for i, s := range batch {
		k := s.k
		k.inflight--
		k.lastErr = replies[i].Err
		switch {
		case replies[i].Err == nil && replies[i].Code != scripts.ReplyNotOurs: // set, or superseded by a Refresh
			k.schedule(k.h.Lease())
		case k.inflight == 0:
			k.due, k.batch = retry, "" // and ask which node serves it again
		}
		if k.due.Before(kp.wakeAt) {
			kp.poke() // loop sleeps past this renewal's turn
		}
	}
	kp.mu.Unlock()
	for i, s := range batch {
		if replies[i].Lost() && s.k.h.State() != Lost {
			continue // it found the key gone by a release's doing: no renewal to speak of
		}
		e.Events.Renewed(s.k.context(), s.k.h, sent, s.hedge, replies[i])
	}
}
