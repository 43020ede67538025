package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Acquisitions on a deployment (see backend.go): a plain lock in one
// command, a single attempt (TryObtain), or waiting in the key's line
// (queue); then the claim that makes the lease fit the call, and the
// give-back of what an acquisition that failed or gave up may hold.

// acquire takes a plain lock with one command when it can (see the note at
// the top of scripts.go), and else waits in the key's line (see queue); a
// single attempt when o.wait == 0 (see try). It also returns how many
// acquire commands it sent.
func (d deployment) acquire(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error) {
	l := d.l
	if o.set != nil && l.sharded {
		if groups := slotGroups(o.set); len(groups) > 1 {
			return l.obtainAcross(ctx, ttl, o, groups)
		}
	}
	if o.wait == 0 {
		return l.try(ctx, key, ttl, o)
	}
	if !o.plain() || l.lines.busy(key) {
		return l.queue(ctx, key, ttl, o, nil)
	}
	lk, res, err := l.once(ctx, l.attemptArgs(key, ttl, o), o)
	switch {
	case lk != nil:
		return lk, 1, nil
	case isAbandoned(err):
		return nil, 1, waitFailed(key, ctx.Err(), l.lastFailure(errNoAnswer))
	case err != nil && ctx.Err() != nil:
		return nil, 1, waitFailed(key, ctx.Err(), err)
	case err != nil && (permanent(err) || errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrInvalidTTL)):
		return nil, 1, err // waiting cannot cure it (a ttl too short for this Redis: see claim)
	}
	// Held by another owner, not plain, or a failure that waiting may
	// cure (the line tries again after its backoff): the line decides,
	// knowing that Redis answered when it did.
	var blocked *attemptResult
	if err == nil && !res.notPlain {
		blocked = &res
	}
	lk, n, err := l.queue(ctx, key, ttl, o, blocked)
	return lk, n + 1, err
}

// try makes TryObtain's single attempt. It takes no place in line, and
// never takes the key while others wait for it: the Locker's own waiters are
// seen here (no command is sent then), those of other processes by the
// scripts. A plain lock is tried with take.lua, and with acquire.lua when
// the key turns out not to be plain. It also returns how many acquire
// commands it sent.
func (l *Locker) try(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error) {
	if l.lines.busy(keysOf(key, o.set)...) {
		return nil, 0, fmt.Errorf("%w: %s: this Locker holds it or waits for it", ErrNotObtained, quoteKey(key))
	}
	a := l.attemptArgs(key, ttl, o)
	lk, res, err := l.once(ctx, a, o)
	n := 1
	if a.plain && err == nil && lk == nil && res.notPlain {
		a.plain, a.token = false, newToken()
		lk, res, err = l.once(ctx, a, o)
		n = 2
	}
	if err == nil && lk == nil {
		err = notObtained(quoteKeys(key, o.set), nil, res.pttl)
	}
	return lk, n, err
}

// attemptArgs returns the arguments of an acquisition's single attempt,
// with a new token.
func (l *Locker) attemptArgs(key string, ttl time.Duration, o *options) attemptArgs {
	a := attemptArgs{key: key, set: o.set, token: newToken(), holder: o.holder, ttl: ttl, fenced: o.fencing, mode: o.mode, plain: o.plain()}
	if a.plain {
		rkey := l.keys.lock(key)
		a.places = l.keys.side(rkey, key, placesKind)
	}
	return a
}

// once sends the single attempt a (which takes no place in line), bounded
// by ctx, and returns the lock when it took the key. When it did not, it
// returns the attempt's result; when it failed, an error saying so. Either
// way nothing of a is left behind: a call abandoned at ctx's end, or whose
// outcome is unknown, gives the key back if it took it (and the call's
// late reply too), and a token that go-redis sent more than once (see
// counted) is marked spent, so that a late copy takes nothing.
func (l *Locker) once(ctx context.Context, a attemptArgs, o *options) (*Lock, attemptResult, error) {
	start := time.Now()
	var res attemptResult
	var err error
	if ctx.Done() == nil && o.replicas.n == 0 { // it can neither be abandoned nor need acknowledging
		res, err = runAttempt(ctx, l.client, l.keys, a)
		l.noteErr(err)
	} else {
		res, err = l.sendOnce(ctx, a, o.replicas)
	}
	if err == nil {
		l.rtts.add(time.Since(start))
	}
	switch {
	case err == nil && res.ours:
		lk := newLock(l, a.key, a.token, a.mode, res.fence, a.ttl, start)
		lk.replicas, lk.plain, lk.places, lk.resent = o.replicas, a.plain, a.places, res.resent
		lk.set, lk.fences = a.set, res.fences
		if err := l.claim(ctx, lk, a.ttl, false, false); err != nil {
			return nil, res, err
		}
		return lk, res, nil
	case err == nil:
		if res.resent {
			l.withdrawLater(ctx, &a, true, withdrawWait) // a first copy may still run
		}
		return nil, res, nil
	case errors.Is(err, ErrNotReplicated):
		// It took the key: nothing is held once ErrNotReplicated returns.
		err = givenBack(err, l.withdrawLater(ctx, &a, res.resent, l.releaseBound()))
	case !refused(err) && !isAbandoned(err) && !res.unsent:
		// The attempt may have run: if it took the key, give it back.
		l.withdrawLater(ctx, &a, true, withdrawWait)
	}
	return nil, res, failed("acquire", a.key, err)
}

// sendOnce sends the single attempt a, bounded by ctx (see bounded), and
// acknowledged by r's replicas (see attemptAcked). An attempt abandoned at
// ctx's end cleans up after itself when its outcome comes: it withdraws
// its token (and marks it spent, when a copy that go-redis sent again may
// still run) unless its outcome is sure (a reply, go-redis sent it once, or
// never) and it took nothing.
func (l *Locker) sendOnce(ctx context.Context, a attemptArgs, r replicas) (attemptResult, error) {
	if ctx.Done() == nil { // cannot be abandoned
		res, err := l.attemptAcked(ctx, a, r)
		l.noteErr(err)
		return res, err
	}
	l.background.begin() // ended when the attempt's outcome is known
	res, err := bounded(ctx, l.direct, func(ctx context.Context) (attemptResult, error) {
		res, err := l.attemptAcked(ctx, a, r)
		l.noteErr(err)
		return res, err
	}, func(res attemptResult, err error) {
		defer l.background.end()
		if sure := err == nil && !res.resent || res.unsent; !sure || res.ours {
			l.withdrawLater(context.Background(), &a, !sure, 0)
		}
	})
	if !isAbandoned(err) {
		l.background.end()
	}
	return res, err
}

// queue waits in the key's line until the key is handed or passed to this
// Obtain, or ctx ends. The line decides what to do next (lines.next); this
// loop only does it. blocked, when not nil, is what an attempt made just
// before found: the key held by another owner. It also returns how many
// attempts this Obtain sent.
func (l *Locker) queue(ctx context.Context, key string, ttl time.Duration, o *options, blocked *attemptResult) (_ *Lock, attempts int, _ error) {
	deadline, _ := ctx.Deadline()
	ln, w := l.lines.enter(key, l.wakeFor(key), ttl, deadline, o)
	if blocked != nil {
		l.lines.blockedBefore(ln, *blocked)
	}
	for {
		s := l.lines.next(l, ln, w)
		switch {
		case s.lock != nil:
			s.lock.replicas = o.replicas
			// The lock may have been handed or passed over with another
			// lease or no fence, or without an acknowledged write of ours
			// (see WithReplicas), or with less than half of its lease left
			// (the waiter woke late): claim renews it then.
			err := l.claim(ctx, s.lock, w.ttl, w.fenced, s.claim || o.replicas.n > 0)
			if err == nil {
				return s.lock, attempts, nil
			}
			if !errors.Is(err, errLeaseRanOut) {
				return nil, attempts, err
			}
			ln = l.lines.reenter(ln, w)
			continue
		case s.err != nil:
			l.giveUp(ln, w)
			return nil, attempts, failed("acquire", key, s.err)
		case s.attempt != nil:
			attempts++
			l.attempt(ln, s.attempt)
		default:
			_ = sleep(ctx, w.wake, s.wait)
		}
		if ctx.Err() != nil {
			blocked, last := l.giveUp(ln, w)
			if last != nil {
				return nil, attempts, waitFailed(key, ctx.Err(), last)
			}
			return nil, attempts, notObtained(quoteKeys(key, o.set), ctx.Err(), blocked)
		}
	}
}

// attempt sends the line's attempt a in the background. Its outcome
// updates the line (see lines.attempted), which wakes the head: a waiter
// never waits for a reply, so that a stuck one holds up neither its
// deadline nor a lock passed to it. It is bounded as a release is (by
// go-redis's own timeouts and retries), not by the Obtain that sent it:
// its outcome matters to the line's other waiters.
func (l *Locker) attempt(ln *line, a *attemptArgs) {
	start := time.Now()
	l.background.run(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.releaseBound())
		defer cancel()
		res, err := runAttempt(ctx, l.client, l.keys, *a)
		l.lines.attempted(l, ln, a, start, res, err)
	})
}

// claim makes the lease of lk, just acquired, fit a request for ttl: at
// least half of ttl left when it returns (a late reply, or a long wait for
// a hand-off, leaves less), and a fence when fenced. With force it renews
// the lease at least once: a lock handed or passed over with another lease
// or no fence, or whose write replicas must acknowledge (WithReplicas). It
// renews the lease to ttl from now (see setLease), at most maxClaims times:
// a ttl shorter than about two round trips to Redis never gets there, and
// must not loop for as long as ctx lasts. On failure the key is given back
// (which hands it on) before claim returns, as far as withdrawWait and ctx
// allow (for ErrNotReplicated, which says nothing is held, as far as ctx
// allows); errLeaseRanOut when it was no longer held.
func (l *Locker) claim(ctx context.Context, lk *Lock, ttl time.Duration, fenced, force bool) error {
	for try := 0; force || time.Until(lk.Until()) < ttl/2 || fenced && lk.fence == 0; try++ {
		if try == maxClaims {
			await(ctx, l.releaseLater(lk), withdrawWait)
			return failed("acquire", lk.key, errTTLTooShort)
		}
		force = false
		r, err := lk.setLease(ctx, ttl, fenced && lk.fence == 0)
		switch {
		case r.lost():
			lk.lapse()
			l.releaseLater(lk) // on a quorum, the masters of a minority may hold it still
			return failed("acquire", lk.key, errLeaseRanOut)
		case errors.Is(err, ErrNotReplicated):
			// Nothing is held once ErrNotReplicated returns.
			return failed("acquire", lk.key, givenBack(err, await(ctx, l.releaseLater(lk), l.releaseBound())))
		case err != nil:
			await(ctx, l.releaseLater(lk), withdrawWait)
			return failed("acquire", lk.key, err)
		}
	}
	return nil
}

// maxClaims bounds the renewals an acquisition makes to get half its ttl
// (see claim).
const maxClaims = 3

// errLeaseRanOut is claim's error when the lease ran out before it could
// be renewed: the lock is not held.
var errLeaseRanOut = errors.New("the lease ran out before the acquire's reply arrived: Redis or the network stalled")

// errTTLTooShort is an acquisition's error when maxClaims renewals in a row
// left less than half of the ttl by the time their replies came.
var errTTLTooShort = fmt.Errorf("%w: too short for this Redis: after 3 renewals in a row, less than half of it was left when the reply came (round trips take about half the ttl or more); use a longer ttl", ErrInvalidTTL)

// giveUp ends an Obtain that waited in line: it quits the line, and
// releases a lock that was handed or passed to it meanwhile, which passes
// it on. Neither waits for Redis. It returns the error of the line's last
// attempt, nil when that found the key held by another owner, and then
// what the latest reply said of the holder's lease left (see blockedFor in
// line.lua).
func (l *Locker) giveUp(ln *line, w *waiter) (blocked time.Duration, last error) {
	lk, blocked, last := l.lines.quit(l, ln, w)
	if lk != nil {
		l.releaseLater(lk)
	}
	return blocked, last
}

// releaseLater gives lk back in the background, bounded by releaseBound,
// and returns a channel closed once that is done: a lock that its holder
// lost (see KeepAlive), or that an acquisition that failed or gave up
// got. It is passed to the Locker's next waiting Obtain instead, when it
// may be (see lines.pass).
//
// It is counted as background work before it marks lk's release begun: a
// Release that finds it begun returns at once (ErrNotHeld for a lost
// lock), and a Shutdown after that Release must wait for this give-back.
func (l *Locker) releaseLater(lk *Lock) <-chan struct{} {
	done := make(chan struct{})
	l.background.begin()
	_ = lk.beginRelease()
	lk.stopKeeping()
	if lk.parts != nil { // a set across slots: each part
		lk.markReleased()
		var parts []<-chan struct{}
		for _, p := range lk.parts {
			parts = append(parts, l.releaseLater(p))
		}
		go func() {
			for _, p := range parts {
				<-p
			}
			l.background.end()
			close(done)
		}()
		return done
	}
	passed, lined := l.lines.pass(lk)
	if passed {
		l.handedOff(context.Background(), lk.key, true, 1)
		l.background.end()
		close(done)
		return done
	}
	lk.markReleased()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.releaseBound())
		n, reply := 0, dropReply{code: replyNotPlain}
		if !lined && lk.droppable() {
			reply, _ = lk.drop(ctx)
		}
		if reply.code == replyNotPlain {
			_, n, _ = l.backend.release(ctx, lk)
		}
		cancel()
		l.background.end() // Shutdown waits for Redis, not for the hook
		close(done)
		l.handedOff(context.Background(), lk.key, false, n)
	}()
	return done
}

// notObtained is the error of an acquisition that found the key held by
// another owner; what is the key, quoted (see quoteKeys); cause is the ctx
// error that ended the wait, or nil; blocked is the holder's lease left, as
// the latest reply said (see blockedFor in line.lua, and leaseNoExpiry).
func notObtained(what string, cause error, blocked time.Duration) error {
	owner := "another owner"
	if blocked == leaseNoExpiry*time.Millisecond {
		owner = "another owner without an expiry: it will not be released by itself (see Locker.Inspect)"
	}
	if cause == nil {
		return fmt.Errorf("%w: %s is held by %s", ErrNotObtained, what, owner)
	}
	return fmt.Errorf("%w: %s is held by %s: %w", ErrNotObtained, what, owner, cause)
}

// quoteKeys quotes key for an error text, or a set's keys (key the first).
func quoteKeys(key string, set []string) string {
	if set == nil {
		return quoteKey(key)
	}
	return "one of the keys " + quoteAll(set)
}

// quoteAll quotes keys for an error text.
func quoteAll(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = quoteKey(k)
	}
	return strings.Join(quoted, ", ")
}

// withdrawWait bounds how long a failing Obtain waits for the withdrawal
// of its token, and withdrawTimeout the withdrawal itself. The withdrawal
// goes on after the Obtain returned, and takes effect when Redis answers.
const (
	withdrawWait    = 100 * time.Millisecond
	withdrawTimeout = 5 * time.Second
)

// withdrawLater withdraws token (see withdraw) in the background: it
// releases the key if token holds it (handing it on to the next in line),
// takes token out of line, and with spend marks it spent, so that a copy of
// an attempt that go-redis sent again and that runs later takes nothing
// (see spend.lua). It ignores the outcome: a lease that is left expires by
// itself. It waits for it at most wait, and not past the end of ctx, and
// reports whether it is done.
func (l *Locker) withdrawLater(ctx context.Context, a *attemptArgs, spend bool, wait time.Duration) bool {
	done := make(chan struct{})
	l.background.run(func() {
		defer close(done)
		l.withdraw(keysOf(a.key, a.set), a.token, a.mode, spend)
	})
	return await(ctx, done, wait)
}

// await waits until done is closed, at most d, and not past the end of ctx;
// it reports whether done was closed.
func await(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// givenBack is the error err of an acquisition whose lock was given back:
// when the release is done, and when it goes on.
func givenBack(err error, done bool) error {
	if done {
		return fmt.Errorf("%w; the lock was released", err)
	}
	return fmt.Errorf("%w; the lock's release goes on in the background", err)
}

// sleep waits until wake, d (0: no limit) or the end of ctx.
func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-timeout:
	}
	return nil
}
