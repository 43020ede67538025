package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// A Lock is one acquisition of a key. It is safe for concurrent use: any
// method may be called from any goroutine at any time. Refresh may run
// while KeepAlive renews (renewals then follow the Refresh's ttl, and none
// can make Until later than the key's expiry: see leaseClock); TTL and
// Until may be called at any time; Release stops the renewals first. A
// Lock is only ever made by a Locker; a nil *Lock, or a zero Lock, is not
// held: Release, Refresh and TTL return ErrNotHeld, KeepAlive a context
// ended with ErrNotHeld, and Key, Token, Fence and Until their zero values.
//
// Lock order: a Locker's keeper.mu and lines.mu before an acquisition's mu,
// never after; no code holds two acquisitions' mu at once.
type Lock struct {
	locker *Locker
	key    string
	rkey   string // the lock's key in Redis (see keyspace.lock)
	token  string
	mode   lockMode
	fence  int64
	set    []string // a set's keys (ObtainMulti), in the caller's order, key the first; nil for one key
	fences []int64  // a set's fences, one per key of set (fence the first); nil for one key
	parts  []*Lock  // a set across Cluster slots: a Lock per slot (see obtainAcross); nil otherwise

	// What the acquisition wrote, for the release to undo; set before the
	// Lock is returned.
	plain     bool   // taken by take.lua: while nothing else happens, drop.lua releases it (see Lock.drop)
	places    string // its places key, for drop.lua
	described bool   // a holder description was stored (WithHolder)
	lined     bool   // got through the line: others likely wait (see deployment.release)
	// A command that could take the key for the token may still run when
	// resent (go-redis sent the acquire twice) or first.mayRun(): its
	// release then marks the token spent (see spend.lua).
	resent       bool
	firstAttempt *firstAttempt

	replicas replicas                // that must acknowledge its writes (WithReplicas); set before the Lock is returned
	joined   *Lock                   // the acquisition this handle joined (see reentrant.go), or nil
	kept     context.CancelCauseFunc // ends this joined handle's kept context (see keepJoined); under the acquisition's mu

	mu          sync.Mutex // of the acquisition guards all but the constant fields above
	clock       leaseClock // the lease as known locally
	handles     int        // live handles of the acquisition, itself included
	ended       bool       // Release was called on this handle
	releasing   bool       // a release of the acquisition is under way
	released    bool       // released (or passed on): the lock is gone for good
	renewal     *renewal   // set while KeepAlive renews the lease
	since       time.Time  // when the lock was acquired (or passed to this acquisition)
	lostWhy     error      // why the lock is known to be lost (see lose), or nil
	over        time.Time  // when this process stopped holding the lock: it was found lost, or its release (or a pass) began; zero while held (see endNow)
	lost        bool       // found lost while no Release was under way (see lose)
	lostSeen    bool       // the Lost hook was called
	generations bool       // a command of a generation above 0 was sent: Redis may keep its generation (see leaseClock)
	unsure      bool       // a release's outcome was unknown: an earlier run may have released it (see releasedBy)
}

// newLock returns the lock on key held by token in mode since a command
// sent at start set its lease to ttl.
func newLock(l *Locker, key, token string, m lockMode, fence int64, ttl time.Duration, start time.Time) *Lock {
	return &Lock{locker: l, key: key, rkey: l.keys.lock(key), token: token, mode: m, fence: fence, described: l.opts.holder != "", handles: 1, since: start,
		clock: leaseClock{until: start.Add(ttl), ttl: ttl, genTTL: ttl}}
}

// passed returns the acquisition that a pass of lk (see lines.pass) gives
// a waiter whose ttl is ttl: the same hold in Redis, with a lease clock of
// its own whose commands start a generation of their own, so that no late
// command of the passer can change the lease after them. lk.mu is held.
func (lk *Lock) passed(ttl time.Duration) *Lock {
	return &Lock{locker: lk.locker, key: lk.key, rkey: lk.rkey, token: lk.token, plain: lk.plain, places: lk.places, described: lk.described, lined: lk.lined, resent: lk.resent, firstAttempt: lk.firstAttempt,
		handles: 1, since: time.Now(), clock: leaseClock{until: lk.clock.until, ttl: ttl, gen: lk.clock.gen + 1, genTTL: ttl}}
}

// Key returns the key the lock is held on ("" for a nil Lock).
func (lk *Lock) Key() string {
	if lk == nil {
		return ""
	}
	return lk.key
}

// Token returns the random token stored at the key while the lock is held
// (at every key of a set; of a set across Cluster slots, the token of the
// first slot's keys: each slot's keys hold a token of their own).
// A lock that a Locker passes from one of its Obtains to the next without a
// round trip (see Obtain) keeps the token: the key is held by the same hold
// in Redis. Locks handed over by Redis, and fenced locks, always have a
// token of their own.
func (lk *Lock) Token() string {
	if lk == nil {
		return ""
	}
	return lk.token
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
// (see endNow). So time.Now().Before(lk.Until()) never holds while Redis no
// longer holds the key for lk. A Release that fails on Redis leaves it
// there too: the release may have run.
func (lk *Lock) Until() time.Time {
	if !lk.usable() {
		return time.Time{}
	}
	a := lk.acquisition()
	if a.parts != nil {
		return a.untilAcross()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heldUntil()
}

// heldUntil is Until for the acquisition lk: the lease clock's end, or the
// moment the lock ended for this process if that is earlier. lk.mu is held.
func (lk *Lock) heldUntil() time.Time {
	if !lk.over.IsZero() && lk.over.Before(lk.clock.until) {
		return lk.over
	}
	return lk.clock.until
}

// endNow records that the lock ends for this process now, unless it ended
// already: it is found lost, or its release begins. It is the one writer of
// over, and every path that ends a lock calls it before it sends anything
// that frees the key (a release, a give-back), so Until is never later than
// the key's life. lk.mu is held.
func (lk *Lock) endNow() {
	if lk.over.IsZero() {
		lk.over = time.Now()
	}
}

// FenceOf returns the fencing token of key, one of Keys (see Fence): for a
// set of keys (ObtainMulti), that key's own; 0 for a key the lock does not
// hold, or without WithFencing.
func (lk *Lock) FenceOf(key string) int64 {
	if lk == nil {
		return 0
	}
	if lk.set == nil {
		if key != lk.key {
			return 0
		}
		return lk.fence
	}
	if i := slices.Index(lk.set, key); i >= 0 {
		return lk.fences[i]
	}
	return 0
}

// fencesOf returns the fences lk took for keys (nil for nil keys).
func (lk *Lock) fencesOf(keys []string) []int64 {
	var fences []int64
	for _, key := range keys {
		fences = append(fences, lk.FenceOf(key))
	}
	return fences
}

// redisKeys returns the Redis keys of lk's keys.
func (lk *Lock) redisKeys() []string {
	if lk.set == nil {
		return []string{lk.rkey}
	}
	rkeys := make([]string, len(lk.set))
	for i, key := range lk.set {
		rkeys[i] = lk.locker.keys.lock(key)
	}
	return rkeys
}

// usable reports whether lk was made by a Locker (not nil, not a zero Lock).
func (lk *Lock) usable() bool { return lk != nil && lk.locker != nil }

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
// have run out (the lease clock's end: see leaseClock), and else
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
// handle. A release that Redis failed leaves the handle open, so that
// Release may be called again; with finally (WithLock, after which nobody
// can), it goes on in the background instead, and the error says so.
func (lk *Lock) release(ctx context.Context, finally bool) error {
	a, last, ok := lk.endHandle()
	if !ok {
		return ErrNotHeld
	}
	if !last { // another handle holds it still (see reentrant.go)
		if _, lost := a.joinable(false); lost {
			return a.notHeld(nil) // lost, or its lease is over: this hold's Release says so, as the last one's does
		}
		return nil
	}
	lost, err := a.end(ctx)
	if lost != nil {
		err = a.notHeld(lost)
	}
	switch {
	case err == nil, errors.Is(err, ErrNotHeld), a.isReleased():
	case finally:
		a.locker.releaseLater(a)
		err = fmt.Errorf("%w; the release %w", err, errBackground)
	default:
		lk.reopenHandle()
	}
	a.releasedEvent(ctx, err)
	return err
}

// end releases the acquisition lk, whose last handle ended: it passes it
// to the Locker's next waiting Obtain when it may (see lines.pass), drops a
// plain lock with one command (see drop), and releases any other through
// the Locker's backend. It returns the keys the release found not held by
// lk (lost: nil when it released them all, or when the error says why
// not), for the caller's ErrNotHeld to name (see notHeld; a set across
// slots names those its parts found: see endAcross).
func (lk *Lock) end(ctx context.Context) (lost []string, _ error) {
	if !lk.beginRelease() {
		return nil, lk.notHeld(nil)
	}
	lk.stopKeeping()
	if lk.parts != nil {
		return nil, lk.endAcross(ctx)
	}
	l := lk.locker
	passed, lined := l.lines.pass(lk)
	if passed {
		l.handedOff(ctx, lk.key, true, 1)
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		lk.markReleased()
		l.releaseLater(lk)
		return nil, goesOn(lk.key, err)
	}
	reply := dropReply{code: replyNotPlain}
	var err error
	if !lined && lk.droppable() {
		if ctx.Done() == nil {
			reply, err = lk.drop(ctx)
		} else { // it goes on when the caller stops waiting (see detached)
			l.background.begin() // ended by the caller, or by late once the caller left
			reply, err = detached(ctx, l.releaseBound(), lk.drop, func(reply dropReply, err error) {
				defer l.background.end()
				lk.dropLate(ctx, reply, err)
			})
			if !isAbandoned(err) {
				l.background.end()
			}
		}
	}
	var handoffs int
	if err == nil && reply.code == replyNotPlain {
		lost, handoffs, err = l.backend.release(ctx, lk)
	} else if err == nil && !lk.releasedBy(reply.code == replyOK, reply.resent) {
		lost = []string{lk.key}
	}
	switch {
	case isAbandoned(err):
		lk.markReleased()
		return nil, goesOn(lk.key, err)
	case ended(ctx) && err != nil:
		// go-redis stopped at the deadline (ContextTimeoutEnabled): the
		// release may not have run; run it again in the background.
		lk.markReleased()
		l.releaseLater(lk)
		return nil, goesOn(lk.key, err)
	case err != nil:
		lk.mu.Lock()
		lk.releasing = false // Release may be called again
		lk.unsure = lk.unsure || !refused(err)
		lk.mu.Unlock()
		return nil, failed("release", lk.key, err)
	}
	lk.markReleased() // held or not, it is not ours any more
	l.handedOff(ctx, lk.key, false, handoffs)
	return lost, nil
}

// droppable reports whether lk is still a plain lock that drop may
// release: taken by take.lua, not got through a line, no generation stored
// for it, and no copy of its acquisition that may still run (which must be
// marked spent: see release.lua).
func (lk *Lock) droppable() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.plain && !lk.lined && !lk.generations && !lk.resent && !lk.firstAttempt.mayRun()
}

// dropLate finishes the release of lk whose drop its caller stopped waiting
// for (ctx, the caller's, ended), with drop's outcome: a key that is not
// plain any more (someone waits in its line) is released with release.lua,
// which hands it on, within releaseBound; the hand-off is reported then.
// The caller's Release has returned, saying the release goes on: nobody else
// would finish it, and the key would wait out its lease.
func (lk *Lock) dropLate(ctx context.Context, reply dropReply, err error) {
	if err != nil || reply.code != replyNotPlain {
		return // released, not ours, or go-redis gave up: the lease ends it
	}
	l := lk.locker
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.releaseBound())
	defer cancel()
	if _, n, err := l.backend.release(rctx, lk); err == nil {
		l.handedOff(ctx, lk.key, false, n)
	}
}

// A dropReply is drop.lua's reply: replyOK, replyNotOurs or replyNotPlain,
// and whether go-redis sent the command more than once.
type dropReply struct {
	code   int64
	resent bool
}

// drop releases lk, a plain lock (see droppable), with drop.lua: one
// compare and delete, when the key is still plain; replyNotPlain says it is
// not (someone waits, or a token of the key may be spent), and nothing was
// changed: release.lua must release it.
func (lk *Lock) drop(ctx context.Context) (dropReply, error) {
	l := lk.locker
	cmd, sent := scriptCall{dropScript, []string{lk.rkey, lk.places}, []any{&counted{s: lk.token}}}.run(ctx, l.client)
	code, err := cmd.Int64()
	l.noteErr(err)
	return dropReply{code: code, resent: sent.resent()}, err
}

// notHeld is the error of an operation on lk that did not find lost held
// (nil: did not say which keys, or sent nothing). Once lk was found lost,
// it says what was found: the Locker gives back what is left of a kept
// lock in the background, so what a release finds missing later is no news.
func (lk *Lock) notHeld(lost []string) error {
	lk.mu.Lock()
	unsure, why, found := lk.unsure, lk.lostWhy, lk.lost
	lk.mu.Unlock()
	switch {
	case why != nil:
		return fmt.Errorf("%w: %s", ErrNotHeld, strings.TrimPrefix(why.Error(), ErrLockLost.Error()+": "))
	case found:
		return fmt.Errorf("%w: %s: no renewal got through before the lease's end", ErrNotHeld, quoteKeys(lk.key, lk.set))
	case lost == nil:
	case lk.set != nil:
		return fmt.Errorf("%w: %s: not held by this lock any more (the set's other keys were released)", ErrNotHeld, quoteAll(lost))
	case unsure:
		return fmt.Errorf("%w: %s: an earlier run of this release may have released it (its reply was lost) before the lease ran out, or the lease ran out first", ErrNotHeld, quoteKey(lk.key))
	}
	return ErrNotHeld
}

// releasedBy reports whether the release of lk whose run answered held
// (it found the key held by lk, and released it) and resent (go-redis sent
// it more than once) released lk: also when it did not find it held, but
// an earlier run of this release may have released it (this run was sent
// again, or an earlier Release of lk had an unknown outcome), and this
// run's reply came before Until. Until is never later than the key's
// expiry (see leaseClock), so the key did not expire before this run: it
// was deleted, by the earlier run, or by a fault this process cannot tell
// from it (a failover that lost the key, FLUSHALL, eviction, another
// client's DEL). Reported as released, since it most likely was; the same
// without a reply in time is not (see notHeld).
func (lk *Lock) releasedBy(held, resent bool) bool {
	if held {
		return true
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.unsure = lk.unsure || resent
	// The lease clock's end, not Until's: Until moved to when the release
	// began. A lock found lost before was not released by it.
	return lk.unsure && lk.lostWhy == nil && time.Now().Before(lk.clock.until)
}

// releaseBound is how long a release goes on in the background once its
// caller stopped waiting: long enough for go-redis to send it again after a
// timeout. spendFor is how long a spent token's mark lasts (see spend.lua):
// as long as that, at least 10 s, covers every copy go-redis sends of a
// command, and of one sent before it.
func (l *Locker) releaseBound() time.Duration { return max(withdrawTimeout, l.retry+time.Second) }

func (l *Locker) spendFor() time.Duration { return max(10*time.Second, l.releaseBound()) }

// beginRelease claims lk's release for the caller: false when lk is
// released, or another Release of it is under way.
func (lk *Lock) beginRelease() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released || lk.releasing {
		return false
	}
	lk.releasing = true
	lk.endNow()
	return true
}

// lose ends lk for a loss: the one function that decides that a lock is
// lost, found gone or taken (by a renewal, Refresh, TTL: why says so), or
// with its lease run out and no renewal answered (KeepAlive's timer: why is
// nil). Under lk.mu it moves Until to now (endNow), keeps the first
// reason, and, unless a Release of lk has begun (the key is then gone by
// its doing: no loss), marks lk lost: beginSet refuses it and no context
// joins it (see Locker.join). Only then does it end the kept context with
// ErrLockLost, whose handler reports the loss (Hooks.Lost) and gives the
// key back (see keep); a lock that is not kept is reported here, with ctx,
// the context of the call that found it lost.
func (lk *Lock) lose(ctx context.Context, why error) {
	lk.mu.Lock()
	lk.endNow()
	if lk.lostWhy == nil {
		lk.lostWhy = why
	}
	losable := lk.losable()
	lk.lost = lk.lost || losable
	r := lk.renewal
	kept := r != nil && r.ctx.Err() == nil
	lk.mu.Unlock()
	switch {
	case kept:
		r.cancel(ErrLockLost)
	case losable:
		lk.reportLost(ctx, nil)
	}
}

// lostReason is why lk is known to be lost (see lose), or nil.
func (lk *Lock) lostReason() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.lostWhy
}

// gone is why lk is lost when a command found the key gone or another's:
// of a set, its i-th key (from 1), or one of them when i is 0.
func (lk *Lock) gone(i int) error {
	what := quoteKeys(lk.key, lk.set)
	if i >= 1 && i <= len(lk.set) {
		what = quoteKey(lk.set[i-1])
	}
	return fmt.Errorf("%w: %s was gone or held by another owner", ErrLockLost, what)
}

// lapse records that lk, which its acquisition has not returned yet, is not
// held: its lease ended before the acquisition could renew it. Nobody held
// it, so nobody is told (Hooks.Lost).
func (lk *Lock) lapse() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.endNow()
	if lk.lostWhy == nil {
		lk.lostWhy = fmt.Errorf("%w: %s: the lease ran out before the acquisition returned", ErrLockLost, quoteKey(lk.key))
	}
}

// releaseBegun reports whether lk's release has begun, or lk is released.
func releaseBegun(lk *Lock) bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.releasing || lk.released
}

// losable reports whether lk can be found lost: no Release of it is under
// way or done. lk.mu is held.
func (lk *Lock) losable() bool { return !lk.releasing && !lk.released }

// isLost reports whether lk was found lost (before any Release began).
func (lk *Lock) isLost() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.lost
}

// reportLost calls the Lost hook, once per acquisition, for lk found lost
// (see lose). lastErr is the error of the last renewal, if it
// failed.
func (lk *Lock) reportLost(ctx context.Context, lastErr error) {
	lk.mu.Lock()
	seen, why := lk.lostSeen, lk.lostWhy
	lk.lostSeen = true
	lk.mu.Unlock()
	h := lk.locker.opts.hooks.Lost
	if h == nil || seen {
		return
	}
	switch {
	case why != nil:
	case lastErr != nil:
		why = fmt.Errorf("%w: %s: no renewal succeeded before the lease ran out; the last one failed: %w", ErrLockLost, quoteKey(lk.key), lastErr)
	default:
		why = fmt.Errorf("%w: %s: no renewal was answered before the lease ran out (Redis or the network stalled)", ErrLockLost, quoteKey(lk.key))
	}
	h(ctx, LostEvent{Key: lk.key, Keys: lk.set, Token: lk.token, Held: time.Since(lk.since), Err: why})
}

// markReleased records that lk is released, or being released.
func (lk *Lock) markReleased() {
	lk.mu.Lock()
	lk.released = true
	lk.mu.Unlock()
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
	if err := lk.locker.backend.check(&options{}, ttl); err != nil {
		return err
	}
	if lk.handleEnded() {
		return ErrNotHeld
	}
	lk = lk.acquisition()
	ttl = ttl.Truncate(time.Millisecond)
	if lk.parts != nil {
		return lk.refreshAcross(ctx, ttl)
	}
	r, err := lk.setLease(ctx, ttl, false)
	if err != nil {
		return failed("refresh", lk.key, err)
	}
	if r.lost() {
		lk.lose(ctx, lk.gone(r.missing))
		return lk.notHeld(nil)
	}
	return nil
}

// TTL returns the remaining lease as Redis sees it, or ErrNotHeld when the
// lock is no longer held. In the lease's last millisecond it may return 0
// with no error: Redis counts whole milliseconds.
func (lk *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if !lk.usable() || lk.handleEnded() {
		return 0, ErrNotHeld
	}
	lk = lk.acquisition()
	if lk.parts != nil {
		return lk.ttlAcross(ctx)
	}
	left, err := call(ctx, lk.locker, func(ctx context.Context) (time.Duration, error) {
		return lk.locker.backend.pttl(ctx, lk)
	})
	if err != nil {
		return 0, failed("read the lease of", lk.key, err)
	}
	if left == leaseNotHeld*time.Millisecond {
		lk.lose(ctx, lk.gone(0))
		return 0, lk.notHeld(nil)
	}
	return left, nil
}

func (lk *Lock) isReleased() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.released
}
