package redislock

import (
	"context"
	"errors"
	"fmt"
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
	fence  int64

	mu       sync.Mutex
	ttl      time.Duration // lease length of the acquisition or latest Refresh
	until    time.Time     // end of the lease as known locally (monotonic clock)
	released bool          // released (or passed on): the lock is gone for good
	lease    *lease        // set while KeepAlive renews the lease
}

// newLock returns the lock on key held by token since a command sent at
// start set its lease to ttl.
func newLock(l *Locker, key, token string, fence int64, ttl time.Duration, start time.Time) *Lock {
	return &Lock{locker: l, key: key, token: token, fence: fence, ttl: ttl, until: start.Add(ttl)}
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
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.until
}

// Release releases the lock: it deletes the key if, and only if, it still
// holds this lock's token, and hands the key to the next in line if anyone
// waits. It returns ErrNotHeld when it did not (the lock was already
// released, its lease expired, or someone else holds it now); a Lock released
// once returns ErrNotHeld at once, without contacting Redis. When an Obtain
// of the same Locker waits for the key and may have it (see Obtain), Release
// passes the lock to it without contacting Redis.
//
// Release stops KeepAlive's renewals first. It returns when ctx is done even
// if Redis does not answer; the lease then expires by itself.
func (lk *Lock) Release(ctx context.Context) error {
	if lk.isReleased() {
		return ErrNotHeld
	}
	lk.stopKeeping()
	l := lk.locker
	if l.lines.pass(lk) {
		return nil
	}
	ln, leave := l.lines.releasing(lk)
	res, err := bounded(ctx, l.direct, func(ctx context.Context) (releaseResult, error) {
		res, err := runRelease(ctx, l.client, releaseArgs{key: lk.key, token: lk.token, locker: l.id, leave: leave})
		l.lines.released(l, lk.key, ln, res, err)
		return res, err
	}, nil)
	if err != nil {
		return err
	}
	lk.mu.Lock()
	lk.released = true // held or not, it is not ours any more
	lk.mu.Unlock()
	if !res.released {
		return ErrNotHeld
	}
	return nil
}

// Refresh extends the lease to ttl from now if the lock is still held. It
// returns ErrNotHeld when it is not (see Release); nothing is changed in
// Redis then. An invalid ttl returns ErrInvalidTTL without contacting Redis.
func (lk *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w (got %v)", ErrInvalidTTL, ttl)
	}
	if lk.isReleased() {
		return ErrNotHeld
	}
	ttl = ttl.Truncate(time.Millisecond)
	start := time.Now()
	held, err := bounded(ctx, lk.locker.direct, func(ctx context.Context) (bool, error) {
		held, _, err := runRefresh(ctx, lk.locker.client, lk.key, lk.token, ttl, false)
		return held, err
	}, nil)
	if err != nil {
		return err
	}
	if !held {
		return ErrNotHeld
	}
	lk.extended(start, ttl)
	return nil
}

// TTL returns the remaining lease as Redis sees it, or ErrNotHeld when the
// lock is no longer held.
func (lk *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if lk.isReleased() {
		return 0, ErrNotHeld
	}
	left, err := bounded(ctx, lk.locker.direct, func(ctx context.Context) (time.Duration, error) {
		return runPTTL(ctx, lk.locker.client, lk.key, lk.token)
	}, nil)
	if err != nil {
		return 0, err
	}
	if left < 0 {
		return 0, ErrNotHeld
	}
	return left, nil
}

func (lk *Lock) currentTTL() time.Duration {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.ttl
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
