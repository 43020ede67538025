package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// try makes TryObtain's single attempt. It takes no place in line, and
// never takes the key while others wait for it: the Locker's own waiters are
// seen here (no command is sent then), those of other processes by the
// scripts. A plain lock (see plain.go) is tried with takeScript, and with
// acquireScript when the key turns out not to be plain. It also returns how
// many acquire commands it sent.
func (l *Locker) try(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error) {
	if l.lines.busy(key) {
		return nil, 0, fmt.Errorf("%w: %s: this Locker holds it or waits for it", ErrNotObtained, quoteKey(key))
	}
	a := l.attemptArgs(key, ttl, o)
	lk, res, err := l.once(ctx, a, o)
	if a.plain && err == nil && lk == nil && res.notPlain {
		a.plain, a.token = false, newToken()
		lk, res, err = l.once(ctx, a, o)
		return lk, 2, l.tried(key, res, err)
	}
	return lk, 1, l.tried(key, res, err)
}

// tried is the error of a single attempt on key that returned (res, err)
// and no lock.
func (l *Locker) tried(key string, res attemptResult, err error) error {
	if err != nil || res.ours {
		return err
	}
	return notObtained(key, nil, res.pttl)
}

// attemptArgs returns the arguments of an acquisition's single attempt,
// with a new token.
func (l *Locker) attemptArgs(key string, ttl time.Duration, o *options) attemptArgs {
	a := attemptArgs{key: key, token: newToken(), holder: o.holder, ttl: ttl, fenced: o.fencing, mode: o.mode, plain: o.plain()}
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
	res, err := l.sendOnce(ctx, a, o.replicas)
	if err == nil {
		l.rtts.add(time.Since(start))
	}
	switch {
	case err == nil && res.ours:
		lk := newLock(l, a.key, a.token, a.mode, res.fence, a.ttl, start)
		lk.replicas, lk.plain, lk.places, lk.resent = o.replicas, a.plain, a.places, res.resent
		if time.Until(lk.Until()) >= a.ttl/2 {
			return lk, res, nil
		}
		if err := l.fit(ctx, lk, a.ttl, false); err != nil {
			return nil, res, err
		}
		return lk, res, nil
	case err == nil:
		if res.resent {
			l.forget(ctx, a.key, a.token, a.mode, true, forgetWait) // a first copy may still run
		}
		return nil, res, nil
	case errors.Is(err, ErrNotReplicated):
		// It took the key: nothing is held once ErrNotReplicated returns.
		err = released(err, l.forget(ctx, a.key, a.token, a.mode, res.resent, l.releaseBound()))
	case !refused(err) && !isAbandoned(err) && !res.unsent:
		// The attempt may have run: if it took the key, give it back.
		l.forget(ctx, a.key, a.token, a.mode, true, forgetWait)
	}
	return nil, res, failed("acquire", a.key, err)
}

// sendOnce sends the single attempt a, bounded by ctx (see bounded): an
// attempt abandoned at ctx's end settles itself when its outcome comes. It
// undoes what it did (and what a copy that go-redis sent again may still
// do) unless its outcome is sure (a reply, go-redis sent it once, or never)
// and it took nothing.
func (l *Locker) sendOnce(ctx context.Context, a attemptArgs, r replicas) (attemptResult, error) {
	if ctx.Done() == nil { // cannot be abandoned
		res, err := l.attemptAcked(ctx, a, r)
		l.noteErr(err)
		return res, err
	}
	l.chores.begin() // ended when the attempt's outcome is settled
	res, err := bounded(ctx, l.direct, func(ctx context.Context) (attemptResult, error) {
		res, err := l.attemptAcked(ctx, a, r)
		l.noteErr(err)
		return res, err
	}, func(res attemptResult, err error) {
		defer l.chores.end()
		if sure := err == nil && !res.resent || res.unsent; !sure || res.ours {
			l.forget(context.Background(), a.key, a.token, a.mode, !sure, 0)
		}
	})
	if !isAbandoned(err) {
		l.chores.end()
	}
	return res, err
}

// queue waits in the key's line until the key is handed or passed to this
// Obtain, or ctx ends. The line decides what to do next (lines.next); this
// loop only does it.
// It also returns how many attempts this Obtain sent.
func (l *Locker) queue(ctx context.Context, key string, ttl time.Duration, o *options, held *attemptResult) (_ *Lock, attempts int, _ error) {
	deadline, _ := ctx.Deadline()
	ln, w := l.lines.join(key, l.wakeFor(key), ttl, deadline, o)
	if held != nil {
		l.lines.heldBefore(ln, *held)
	}
	for {
		s := l.lines.next(l, ln, w)
		switch {
		case s.lock != nil:
			s.lock.replicas = o.replicas
			if !s.claim && o.replicas.n == 0 && time.Until(s.lock.Until()) >= w.ttl/2 {
				return s.lock, attempts, nil
			}
			// The lock was handed or passed over with another lease or no
			// fence, or without an acknowledged write of ours (see
			// WithReplicas), or less than half of its lease is left (the
			// waiter woke late): fit renews it.
			err := l.fit(ctx, s.lock, w.ttl, w.fenced)
			if err == nil {
				return s.lock, attempts, nil
			}
			if !errors.Is(err, errLeaseRanOut) {
				return nil, attempts, err
			}
			ln = l.lines.rejoin(ln, w)
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
			held, last := l.giveUp(ln, w)
			if last != nil {
				return nil, attempts, waitFailed(key, ctx.Err(), last)
			}
			return nil, attempts, notObtained(key, ctx.Err(), held)
		}
	}
}

// attempt sends the line's attempt a in the background. Its outcome
// settles the line (see lines.attempted), which wakes the head: a waiter
// never waits for a reply, so that a stuck one holds up neither its
// deadline nor a lock passed to it. It is bounded as a release is (by
// go-redis's own timeouts and retries), not by the Obtain that sent it:
// its outcome matters to the line's other waiters.
func (l *Locker) attempt(ln *line, a *attemptArgs) {
	start := time.Now()
	l.chores.run(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.releaseBound())
		defer cancel()
		res, err := runAttempt(ctx, l.client, l.keys, *a)
		l.lines.attempted(l, ln, a, start, res, err)
	})
}

// errLeaseRanOut is fit's error when the lease ran out before it could be
// renewed: the lock is not held.
var errLeaseRanOut = errors.New("the lease ran out before the acquire's reply arrived: Redis or the network stalled")

// fit makes the lease of lk, just acquired, fit a request for ttl (and a
// fence, when fenced and lk has none): it renews the lease to ttl from now,
// and issues the fence. Acquisitions call it when the lease left is less
// than half of ttl (the reply came late, or the wait for a hand-off was
// long), or is of another length than asked for. On failure the key is
// released (which hands it on) before fit returns, as far as forgetWait and
// ctx allow (for ErrNotReplicated, which says nothing is held, as far as
// ctx allows); errLeaseRanOut when it was no longer held.
func (l *Locker) fit(ctx context.Context, lk *Lock, ttl time.Duration, fenced bool) error {
	for try := 1; ; try++ {
		fence := fenced && lk.fence == 0
		id, gen, _ := lk.setting(ttl)
		r, err := call(ctx, l, func(ctx context.Context) (renewReply, error) {
			r := l.renewOne(ctx, lk.refreshArgs(ttl, gen, fence), lk.replicas)
			lk.settled(id, r.outcome())
			return r, r.err
		})
		switch {
		case err == nil && r.code == 0:
			lk.lapse()
			return failed("acquire", lk.key, errLeaseRanOut)
		case errors.Is(err, ErrNotReplicated):
			// Nothing is held once ErrNotReplicated returns.
			return failed("acquire", lk.key, released(err, await(ctx, l.releaseLater(lk), l.releaseBound())))
		case err != nil:
			await(ctx, l.releaseLater(lk), forgetWait)
			return failed("acquire", lk.key, err)
		}
		if r.code == 1 {
			lk.mu.Lock()
			if fence {
				lk.fence = r.fence
			}
			lk.mu.Unlock()
			lk.newGeneration(ttl)
		}
		if time.Until(lk.Until()) >= ttl/2 && (!fenced || lk.fence > 0) {
			return nil
		}
		// The reply came so late that little of the lease is left: renew
		// again, a few times.
		if try == maxFits {
			await(ctx, l.releaseLater(lk), forgetWait)
			return failed("acquire", lk.key, errTTLTooShort)
		}
	}
}

// maxFits bounds the renewals an acquisition makes to get half its ttl
// (see fit): a ttl shorter than about two round trips to Redis never gets
// there, and must not loop for as long as ctx lasts.
const maxFits = 3

// errTTLTooShort is an acquisition's error when maxFits renewals in a row
// left less than half of the ttl by the time their replies came.
var errTTLTooShort = fmt.Errorf("%w: too short for this Redis: after 3 renewals in a row, less than half of it was left when the reply came (round trips take about half the ttl or more); use a longer ttl", ErrInvalidTTL)

// giveUp ends an Obtain that waited in line: it leaves the line, and
// releases a lock that was handed or passed to it meanwhile, which passes
// it on. Neither waits for Redis. It returns the error of the line's last
// attempt, nil when that found the key held by another owner, and then
// what the latest reply said of the holder's lease left (see blockedFor).
func (l *Locker) giveUp(ln *line, w *waiter) (held time.Duration, last error) {
	lk, held, last := l.lines.leave(l, ln, w)
	if lk != nil {
		l.releaseLater(lk)
	}
	return held, last
}

// releaseLater releases lk in the background, bounded by releaseBound, and
// returns a channel closed once that is done. A lock handed or passed to an
// Obtain that gave up is passed on, if it may be, instead.
func (l *Locker) releaseLater(lk *Lock) <-chan struct{} {
	done := make(chan struct{})
	_ = lk.beginRelease()
	lk.stopKeeping()
	if l.lines.pass(lk) {
		l.handedOff(context.Background(), lk.key, true, 1)
		close(done)
		return done
	}
	lk.markReleased()
	l.chores.begin()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.releaseBound())
		_, n, _ := l.masters.release(ctx, lk)
		cancel()
		l.chores.end() // Shutdown waits for Redis, not for the hook
		close(done)
		l.handedOff(context.Background(), lk.key, false, n)
	}()
	return done
}

// notObtained is the error of an acquisition that found the key held by
// another owner; cause is the ctx error that ended the wait, or nil; held
// is the holder's lease left, as the latest reply said (see blockedFor):
// -1ms when the key has no expiry.
func notObtained(key string, cause error, held time.Duration) error {
	owner := "another owner"
	if held == -time.Millisecond {
		owner = "another owner without an expiry: it will not be released by itself (see Locker.Inspect)"
	}
	if cause == nil {
		return fmt.Errorf("%w: %s is held by %s", ErrNotObtained, quoteKey(key), owner)
	}
	return fmt.Errorf("%w: %s is held by %s: %w", ErrNotObtained, quoteKey(key), owner, cause)
}

// forgetWait bounds how long a failing Obtain waits for the clean-up of its
// token, and forgetTimeout the clean-up itself. The clean-up goes on after
// the Obtain returned, and takes effect when Redis answers.
const (
	forgetWait    = 100 * time.Millisecond
	forgetTimeout = 5 * time.Second
)

// forget deletes the key if it holds token (handing it on to the next in
// line), takes token out of line, and with spend marks it spent, so that a
// copy of an attempt that go-redis sent again and that runs later takes
// nothing (see leave). It ignores the outcome: a lease that is left
// expires by itself. It waits for that at most wait, and not past the end
// of ctx, and reports whether it is done.
func (l *Locker) forget(ctx context.Context, key, token string, m lockMode, spend bool, wait time.Duration) bool {
	done := make(chan struct{})
	l.chores.run(func() {
		defer close(done)
		l.leave(key, token, m, spend)
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

// released is the error err of an acquisition whose lock was given back:
// when the release is done, and when it goes on.
func released(err error, done bool) error {
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
