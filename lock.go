package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Lock is one acquisition of a key. It is safe for concurrent use. A Lock
// is only ever made by a Locker; its zero value is not usable.
type Lock struct {
	locker *Locker
	key    string
	token  string
	mode   mode
	fence  int64

	joined *Lock // the acquisition this handle joined (see reentrant.go), or nil

	mu        sync.Mutex // of the acquisition guards all but the constant fields above
	clock     leaseClock // the lease as known locally
	holds     int        // live handles of the acquisition, itself included
	ended     bool       // Release was called on this handle
	releasing bool       // a release of the acquisition is under way
	released  bool       // released (or passed on): the lock is gone for good
	renewal   *renewal   // set while KeepAlive renews the lease
}

// newLock returns the lock on key held by token in mode since a command
// sent at start set its lease to ttl.
func newLock(l *Locker, key, token string, m mode, fence int64, ttl time.Duration, start time.Time) *Lock {
	return &Lock{locker: l, key: key, token: token, mode: m, fence: fence, holds: 1, clock: leaseClock{until: start.Add(ttl), ttl: ttl}}
}

// A leaseClock is the end of a lock's lease as this process knows it, on
// the monotonic clock, and the commands that may still move it: renewals
// (several may be in flight, see keeper), Refresh, claims.
//
// Invariant: until is never later than the key's expiry in Redis, whatever
// the order in which Redis runs the commands in flight. The argument: a
// command sent at S that sets the lease to ttl sets the expiry to E + ttl,
// where E >= S is when Redis runs it, and the expiry is that of the command
// Redis ran last. So
//
//   - send lowers until to S + ttl at once, before Redis can run the
//     command: whenever it runs, the expiry stays at or above until;
//   - settle, when a command sent at S that set the lease to ttl is known
//     to have run, raises until to S + ttl, but not above max(S, S') + ttl'
//     for any command (S', ttl') that Redis may have run after it: those
//     still in flight, and those whose outcome arrived after S (the order of
//     two commands in flight together is unknown). Such a command ran at
//     some E' >= S' and, being later, E' >= S: it left the expiry at
//     E' + ttl' >= max(S, S') + ttl'. So a renewal of the same ttl still in
//     flight (on a dead connection, say) does not hold until back, and a
//     shorter Refresh in flight does.
//
// A command that failed (a lost connection) is taken to have run before its
// failure was reported, or not at all: go-redis closes the connection, and
// Redis runs what it has received from a connection before it notices the
// close.
//
// A Refresh starts a new generation: ttl changes, so renewals scheduled
// after it renew to the new ttl and are due a third of it after it was sent.
// Renewals of the old generation still in flight can no longer raise until
// above the Refresh's S + ttl (see settle).
type leaseClock struct {
	until time.Time
	ttl   time.Duration // the lease renewals set: the acquisition's, or the latest Refresh's
	cmds  []leaseCmd    // commands that Redis may run after one in flight
	last  uint64        // the id of the latest command sent
}

// A leaseCmd is a command that sets the lease.
type leaseCmd struct {
	id   uint64
	sent time.Time
	ttl  time.Duration
	done time.Time // when its outcome arrived; zero while in flight
}

// send records a command that sets the lease to ttl, sent now, and returns
// its id for settle. moved reports that until changed.
func (c *leaseClock) send(sent time.Time, ttl time.Duration) (id uint64, moved bool) {
	end := sent.Add(ttl)
	if end.Before(c.until) {
		c.until, moved = end, true
	}
	c.last++
	c.cmds = append(c.cmds, leaseCmd{id: c.last, sent: sent, ttl: ttl})
	return c.last, moved
}

// settle records the outcome of command id: set reports that it ran and set
// the lease. moved reports that until changed.
func (c *leaseClock) settle(id uint64, set bool) (moved bool) {
	now := time.Now()
	i := slices.IndexFunc(c.cmds, func(x leaseCmd) bool { return x.id == id })
	if i < 0 {
		return false
	}
	c.cmds[i].done = now
	me := c.cmds[i]
	if set {
		end := me.sent.Add(me.ttl)
		for _, o := range c.cmds {
			if o.id != id && (o.done.IsZero() || o.done.After(me.sent)) {
				// o may have run after me: it left at least this.
				if e := maxTime(me.sent, o.sent).Add(o.ttl); e.Before(end) {
					end = e
				}
			}
		}
		if end.After(c.until) {
			c.until, moved = end, true
		}
	}
	// Keep only what a command in flight may have to be compared with.
	oldest := now
	for _, o := range c.cmds {
		if o.done.IsZero() && o.sent.Before(oldest) {
			oldest = o.sent
		}
	}
	c.cmds = slices.DeleteFunc(c.cmds, func(o leaseCmd) bool { return !o.done.IsZero() && !o.done.After(oldest) })
	return moved
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// busy reports whether commands that set the lease are in flight.
func (c *leaseClock) busy() bool {
	return slices.ContainsFunc(c.cmds, func(o leaseCmd) bool { return o.done.IsZero() })
}

// setting records, under lk.mu, that a command setting the lease to ttl is
// sent now; settled records its outcome. Both move the lost-lock timer of
// KeepAlive along with the lease.
func (lk *Lock) setting(ttl time.Duration) (id uint64, sent time.Time) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	sent = time.Now()
	id, moved := lk.clock.send(sent, ttl)
	if moved {
		lk.moveExpiry()
	}
	return id, sent
}

func (lk *Lock) settled(id uint64, set bool) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.clock.settle(id, set) {
		lk.moveExpiry()
	}
}

// Key returns the key the lock is held on.
func (lk *Lock) Key() string { return lk.key }

// Token returns the random token stored at the key while the lock is held.
// A lock that a Locker passes from one of its Obtains to the next without a
// round trip (see Obtain) keeps the token: the key is held by the same hold
// in Redis. Locks handed over by Redis, and fenced locks, always have a
// token of their own.
func (lk *Lock) Token() string { return lk.token }

// Until returns when the lease ends as far as this process can tell: the
// moment the command that set the lease (the acquiring or last successful
// refreshing command, or a command that confirmed the waiter's place before
// Redis handed it the lock) was sent, plus its ttl, on the monotonic clock.
// Redis measures the lease from when it ran that command, a little later,
// so Redis never frees the lock before Until (clock drift between the
// machines aside). The lock is certainly not held after Until unless
// refreshed in time.
func (lk *Lock) Until() time.Time {
	a := lk.acquisition()
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.clock.until
}

// Release releases the lock: it deletes the key if it still holds this
// lock's token, and hands the key to the next in line if anyone waits. When
// an Obtain of the same Locker waits for the key and may have it (see
// Obtain), Release passes the lock to it without contacting Redis. Release
// stops KeepAlive's renewals first.
//
// It returns nil when it released the lock, also when Redis ran it but its
// reply was lost and go-redis sent it again (a mark kept for releaseMark
// tells the second run that the first one released it). It returns
// ErrNotHeld when the key no longer held the lock: its lease ran out, or
// another client took the key (a Lock released once returns ErrNotHeld at
// once, without contacting Redis).
//
// Release returns when ctx is done even if Redis does not answer; the
// release then goes on in the background, bounded to 5 seconds, and the
// error says so. A ctx already done (a request's, ended: the usual
// `defer lock.Release(ctx)`) releases in the background the same way, so
// that no lock is left behind. Other errors come from Redis, and leave the
// lock as it was: Release may be called again.
func (lk *Lock) Release(ctx context.Context) error {
	a, last, ok := lk.endHandle()
	if !ok {
		return ErrNotHeld
	}
	if !last {
		return nil // another handle holds it still (see reentrant.go)
	}
	err := a.end(ctx)
	if err != nil && !errors.Is(err, ErrNotHeld) && !a.isReleased() {
		lk.reopenHandle()
	}
	return err
}

// end releases the acquisition lk, whose last handle ended.
func (lk *Lock) end(ctx context.Context) error {
	if !lk.beginRelease() {
		return ErrNotHeld
	}
	lk.stopKeeping()
	l := lk.locker
	if l.lines.pass(lk) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		lk.markReleased()
		l.releaseLater(lk)
		return fmt.Errorf("redislock: release %s goes on in the background: %w", quoteKey(lk.key), err)
	}
	ln, leave := l.lines.releasing(lk)
	res, err := detached(ctx, l.direct, forgetTimeout, func(ctx context.Context) (releaseResult, error) {
		res, err := runRelease(ctx, l.client, releaseArgs{key: lk.key, token: lk.token, locker: l.id, mode: lk.mode, leave: leave, mark: releaseMark})
		l.lines.released(l, lk.key, ln, res, err)
		return res, err
	})
	switch {
	case isAbandoned(err):
		lk.markReleased()
		return fmt.Errorf("redislock: release %s goes on in the background: %w", quoteKey(lk.key), err)
	case ctx.Err() != nil && err != nil:
		// go-redis stopped at the deadline (ContextTimeoutEnabled): the
		// release may not have run; run it again in the background.
		lk.markReleased()
		l.releaseLater(lk)
		return fmt.Errorf("redislock: release %s goes on in the background: %w", quoteKey(lk.key), err)
	case err != nil:
		lk.mu.Lock()
		lk.releasing = false // Release may be called again
		lk.mu.Unlock()
		return failed("release", lk.key, err)
	}
	lk.markReleased() // held or not, it is not ours any more
	if !res.released {
		return ErrNotHeld
	}
	return nil
}

// releaseMark is how long a release leaves its mark: longer than go-redis
// takes to send a command again after a lost reply (a read timeout, 3 s by
// default, and a backoff of at most 512 ms).
const releaseMark = 10 * time.Second

// beginRelease claims lk's release for the caller: false when lk is
// released, or another Release of it is under way.
func (lk *Lock) beginRelease() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released || lk.releasing {
		return false
	}
	lk.releasing = true
	return true
}

// markLost records that lk is known not to be held (a Refresh, TTL or
// renewal found the key gone or owned by another): its lease ends now.
func (lk *Lock) markLost() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if now := time.Now(); lk.clock.until.After(now) {
		lk.clock.until = now
	}
}

// markReleased records that lk is released, or being released.
func (lk *Lock) markReleased() {
	lk.mu.Lock()
	lk.released = true
	lk.mu.Unlock()
}

// release releases lk through Redis, bounded by ctx, without the checks of
// Release: for locks handed or passed to an Obtain that gave up meanwhile,
// and for Releases whose ctx was done.
func (lk *Lock) release(ctx context.Context) {
	l := lk.locker
	ln, leave := l.lines.releasing(lk)
	res, err := runRelease(ctx, l.client, releaseArgs{key: lk.key, token: lk.token, locker: l.id, mode: lk.mode, leave: leave, mark: releaseMark})
	l.lines.released(l, lk.key, ln, res, err)
}

// Refresh extends the lease to ttl from now if the lock is still held. It
// returns ErrNotHeld when it is not (see Release); nothing is changed in
// Redis then. An invalid ttl returns ErrInvalidTTL without contacting Redis.
func (lk *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w (got %v)", ErrInvalidTTL, ttl)
	}
	if lk.handleEnded() {
		return ErrNotHeld
	}
	lk = lk.acquisition()
	ttl = ttl.Truncate(time.Millisecond)
	id, _ := lk.setting(ttl)
	held, err := bounded(ctx, lk.locker.direct, func(ctx context.Context) (bool, error) {
		held, _, err := runRefresh(ctx, lk.locker.client, lk.key, lk.token, lk.mode, ttl, false)
		lk.settled(id, err == nil && held)
		return held, err
	}, nil)
	if err != nil {
		return failed("refresh", lk.key, err)
	}
	if !held {
		lk.markLost()
		return ErrNotHeld
	}
	lk.newGeneration(ttl)
	return nil
}

// TTL returns the remaining lease as Redis sees it, or ErrNotHeld when the
// lock is no longer held.
func (lk *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if lk.handleEnded() {
		return 0, ErrNotHeld
	}
	lk = lk.acquisition()
	left, err := bounded(ctx, lk.locker.direct, func(ctx context.Context) (time.Duration, error) {
		return runPTTL(ctx, lk.locker.client, lk.key, lk.token, lk.mode)
	}, nil)
	if err != nil {
		return 0, failed("read the lease of", lk.key, err)
	}
	if left < 0 {
		lk.markLost()
		return 0, ErrNotHeld
	}
	return left, nil
}

// newGeneration makes ttl the lease that renewals set from now on (see
// leaseClock), and reschedules KeepAlive's next renewal from it.
func (lk *Lock) newGeneration(ttl time.Duration) {
	lk.mu.Lock()
	lk.clock.ttl = ttl
	r := lk.renewal
	lk.mu.Unlock()
	if r != nil {
		lk.locker.keeper.reschedule(r)
	}
}

// lease returns the lease's local end and the ttl renewals set.
func (lk *Lock) lease() (until time.Time, ttl time.Duration) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.clock.until, lk.clock.ttl
}

func (lk *Lock) isReleased() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.released
}

// refused reports whether err is an error reply from Redis (wrong type at the
// key, out of memory, ...): Redis answered and did not run the command. Any
// other error (a reset connection, a timeout) leaves the outcome unknown.
func refused(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}
