package redislock

import (
	"context"
	"fmt"
	"time"
)

// try makes TryObtain's single attempt. It takes no place in line, and
// never takes the key while others wait for it: the Locker's own waiters are
// seen here, those of other processes by acquireScript.
func (l *Locker) try(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, error) {
	if l.lines.busy(key) {
		return nil, fmt.Errorf("%w: %q: others of this Locker wait for it", ErrNotObtained, key)
	}
	a := attemptArgs{key: key, token: newToken(), locker: l.id, ttl: ttl, fenced: o.fencing}
	start := time.Now()
	res, err := bounded(ctx, l.direct, func(ctx context.Context) (attemptResult, error) {
		return runAttempt(ctx, l.client, a)
	}, func(res attemptResult, err error) {
		if res.ours || (err != nil && !refused(err)) {
			l.forget(context.Background(), key, a.token) // a late success: undo it
		}
	})
	switch {
	case err == nil && res.ours:
		return newLock(l, key, a.token, res.fence, ttl, start), nil
	case err == nil:
		return nil, notObtained(key, nil)
	case !refused(err) && !isAbandoned(err):
		// The attempt may have run: if it took the key, give it back.
		l.forget(ctx, key, a.token)
	}
	return nil, notObtained(key, err)
}

// queue waits in the key's line until the key is handed or passed to this
// Obtain, or ctx ends. The line decides what to do next (lines.next); this
// loop only does it.
func (l *Locker) queue(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, error) {
	ln, w := l.lines.join(key, ttl, o)
	for {
		s := l.lines.next(l, ln, w)
		var err error
		switch {
		case s.lock != nil:
			lk, again, err := l.claim(ctx, s.lock, s.claim, w)
			if !again {
				return lk, err
			}
			ln = l.lines.rejoin(key, w)
			continue
		case s.err != nil:
			return nil, l.giveUp(ln, w, s.err)
		case s.attempt != nil:
			err = l.attempt(ctx, ln, w, s.attempt)
		default:
			err = sleep(ctx, w.wake, s.wait)
		}
		if ctx.Err() != nil {
			return nil, l.giveUp(ln, w, ctx.Err())
		}
		if err != nil && refused(err) {
			return nil, l.giveUp(ln, w, err)
		}
	}
}

// attempt sends the line's attempt a. Its outcome settles the line, also
// when ctx ends first and the attempt is abandoned. After an error the head
// waits for its backoff before the next attempt.
func (l *Locker) attempt(ctx context.Context, ln *line, w *waiter, a *attemptArgs) error {
	start := time.Now()
	_, err := bounded(ctx, l.direct, func(ctx context.Context) (struct{}, error) {
		res, err := runAttempt(ctx, l.client, *a)
		l.lines.attempted(l, ln, a, start, res, err)
		return struct{}{}, err
	}, nil)
	if err != nil {
		w.retryAt = time.Now().Add(w.poll)
		w.poll = nextBackoff(w.poll, &l.opts)
	}
	return err
}

// claim makes a lock handed or passed to w fit w's request when it does not
// (see lines.grant): it renews the lease to w's ttl, and issues w's fence.
// again reports that the lock was lost before it could be claimed: w waits
// in line again.
func (l *Locker) claim(ctx context.Context, lk *Lock, needed bool, w *waiter) (_ *Lock, again bool, _ error) {
	if !needed {
		return lk, false, nil
	}
	start := time.Now()
	fence := w.fenced && lk.fence == 0
	r, err := bounded(ctx, l.direct, func(ctx context.Context) (refreshResult, error) {
		held, f, err := runRefresh(ctx, l.client, lk.key, lk.token, w.ttl, fence)
		return refreshResult{held, f}, err
	}, nil)
	switch {
	case err == nil && r.held:
		lk.mu.Lock()
		if fence {
			lk.fence = r.fence
		}
		lk.mu.Unlock()
		lk.extended(start, w.ttl)
		return lk, false, nil
	case err == nil:
		return nil, true, nil // the lease ran out before it was claimed
	}
	l.releaseLater(lk)
	if ctx.Err() != nil || refused(err) {
		return nil, false, notObtained(lk.key, err)
	}
	return nil, true, nil
}

// refreshResult is runRefresh's outcome, for bounded.
type refreshResult struct {
	held  bool
	fence int64
}

// giveUp ends an Obtain that waited in line: it leaves the line, and
// releases a lock that was handed or passed to it meanwhile, which passes
// it on. Neither waits for Redis. cause is why it stops.
func (l *Locker) giveUp(ln *line, w *waiter, cause error) error {
	if lk := l.lines.leave(l, ln, w); lk != nil {
		l.releaseLater(lk)
	}
	return notObtained(ln.key, cause)
}

// releaseLater releases lk in the background, bounded by forgetTimeout.
func (l *Locker) releaseLater(lk *Lock) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), forgetTimeout)
		defer cancel()
		_ = lk.Release(ctx)
	}()
}

// notObtained is the error of an acquisition that failed; cause is why (nil
// when another owner kept the key).
func notObtained(key string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, key)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, key, cause)
}

// forgetWait bounds how long a failing Obtain waits for the clean-up of its
// token, and forgetTimeout the clean-up itself. The clean-up goes on after
// the Obtain returned, and takes effect when Redis answers.
const (
	forgetWait    = 100 * time.Millisecond
	forgetTimeout = 5 * time.Second
)

// forget deletes the key if it holds token (handing it on to the next in
// line), ignoring the outcome: a lease that is left expires by itself. It
// waits for that at most forgetWait, and not past the end of ctx.
func (l *Locker) forget(ctx context.Context, key, token string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fctx, cancel := context.WithTimeout(context.Background(), forgetTimeout)
		defer cancel()
		res, err := runRelease(fctx, l.client, releaseArgs{key: key, token: token, locker: l.id})
		l.lines.released(l, key, nil, res, err)
	}()
	t := time.NewTimer(forgetWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
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
