// Package redislock provides distributed locks on Redis.
//
// A Locker acquires locks on keys of one Redis deployment. A lock is a lease:
// it is held for a ttl unless refreshed, so a holder that dies cannot block
// everyone forever. Each acquisition stores a fresh 128-bit random token in
// the key; Release and Refresh act only while the key still holds that token,
// so a holder whose lease has expired can never release or extend the lock of
// the holder that came after it.
//
//	locker := redislock.New(rdb)
//	lock, err := locker.Obtain(ctx, "order:42", 10*time.Second)
//	if err != nil {
//		return err // errors.Is(err, redislock.ErrNotObtained) when it stayed taken
//	}
//	defer lock.Release(ctx)
//
// A lease can expire while its holder still works (a long GC pause, a frozen
// VM), and a Redis failover can lose a lock, since replication is
// asynchronous. Keep leases alive with WithLock or Lock.KeepAlive, which
// also tell the holder when the lock is lost, and use fencing tokens where two
// holders at once must never write.
package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locker acquires locks on one Redis deployment (a single node, a
// Sentinel-managed primary or a Cluster). It is safe for concurrent use and
// meant to be shared: create one per client and keep it.
type Locker struct {
	client  redis.UniversalClient
	opts    options
	direct  bool    // the client honours ctx deadlines itself (see bounded)
	keeper  keeper  // renews kept leases
	waiting waiting // Obtains waiting for contended keys
}

// New returns a Locker that acquires locks through client, a go-redis v9
// client of any kind. opts set the Locker's defaults; each call may override
// them. New does not contact Redis.
//
// The deadlines of ctx hold with any client options. With a client whose
// options set ContextTimeoutEnabled, go-redis stops its own socket reads at
// the deadline and calls with a deadline are made directly; otherwise each
// call that can be cancelled runs in a goroutine of its own, which costs a
// goroutine hand-off per call. A nil client or an invalid option is
// reported by every call on the returned Locker (ErrNilClient,
// ErrInvalidOption, ErrInvalidTTL).
func New(client redis.UniversalClient, opts ...Option) *Locker {
	o := defaultOptions().apply(opts)
	if isNil(client) && o.err == nil {
		o.err = ErrNilClient
	}
	return &Locker{client: client, opts: o, direct: !isNil(client) && honoursDeadlines(client)}
}

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
	released bool          // Release succeeded: the lock is gone for good
	lease    *lease        // set while KeepAlive renews the lease
}

// Obtain acquires the lock on key for ttl, waiting while another holder has
// it. It retries with jittered exponential backoff (see WithBackoff) until the
// acquire deadline: the earlier of ctx's deadline and the end of WithWait;
// without either it waits until ctx is cancelled. The ttl is the lease, not a
// bound on waiting.
//
// When the lock could not be acquired in time the error wraps ErrNotObtained
// and, when the context ended the wait, ctx's error as well, so both
// errors.Is(err, ErrNotObtained) and errors.Is(err, context.DeadlineExceeded)
// hold. An invalid key, ttl or option returns ErrInvalidKey, ErrInvalidTTL or
// ErrInvalidOption before anything is sent to Redis. ttl must be at least one
// millisecond; it is truncated to whole milliseconds.
func (l *Locker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	o := l.opts.apply(opts)
	return l.obtain(ctx, key, ttl, &o)
}

// TryObtain makes a single attempt to acquire the lock on key for ttl. It
// returns an error wrapping ErrNotObtained at once when another holder has
// the lock. Its other errors are those of Obtain.
func (l *Locker) TryObtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	o := l.opts.apply(opts)
	o.wait = 0
	return l.obtain(ctx, key, ttl, &o)
}

// obtain is Obtain with resolved options; o.wait == 0 makes a single attempt.
func (l *Locker) obtain(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, error) {
	if err := l.check(key, ttl, o); err != nil {
		return nil, err
	}
	ttl = ttl.Truncate(time.Millisecond)
	if o.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.wait)
		defer cancel()
	}
	lk := &Lock{locker: l, key: key, token: newToken()}

	// wt is set once this Obtain waits in line (see wait.go). It joins at
	// once, without an attempt of its own, when others in this process wait
	// for the key already: it is their turn first.
	var wt *waiter
	defer func() {
		if wt != nil {
			l.waiting.leave(wt)
		}
	}()
	line := func() error {
		wt = l.waiting.join(ctx, l, key, lk.token)
		return l.waiting.await(ctx, wt)
	}
	// ambiguous is when the first attempt whose outcome is unknown started
	// (its reply was lost): that attempt may have set the key, and if a later
	// attempt finds the key holding our token, the lease runs from then.
	var ambiguous time.Time
	fail := func(cause error) error {
		return l.giveUp(ctx, lk, !ambiguous.IsZero() || wt != nil, cause)
	}

	if o.wait != 0 && l.waiting.busy(key) {
		if err := line(); err != nil {
			return nil, fail(err)
		}
	}
	delay := o.minBackoff
	for {
		start := time.Now()
		a, err := l.acquire(ctx, lk, ttl, o, wt != nil)
		if err == nil && a.ours {
			if !ambiguous.IsZero() {
				start = ambiguous
			}
			lk.until, lk.ttl, lk.fence = start.Add(ttl), ttl, a.fence
			return lk, nil
		}
		if err != nil {
			if refused(err) {
				return nil, fail(err) // retrying will not help
			}
			if ambiguous.IsZero() {
				ambiguous = start
			}
			if ctx.Err() != nil {
				return nil, fail(ctx.Err())
			}
		}
		if o.wait == 0 {
			return nil, fail(err)
		}
		if wt == nil {
			if err := line(); err != nil {
				return nil, fail(err)
			}
			continue // subscribed now: look again before waiting
		}

		// Wait for a release to announce our turn, at most until the
		// holder's lease ends or our place in the queue needs renewing.
		// Without pub/sub, poll.
		d := queueLease / 3
		if !l.waiting.armed(wt) {
			d = delay
			delay = nextBackoff(delay, o)
		}
		if a.pttl >= 0 && a.pttl+time.Millisecond < d {
			d = a.pttl + time.Millisecond
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fail(ctx.Err())
		case <-wt.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// isNil reports whether client is nil, also as a nil pointer in a non-nil
// interface (a nil *redis.Client).
func isNil(client redis.UniversalClient) bool {
	if client == nil {
		return true
	}
	v := reflect.ValueOf(client)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// check validates a call's input before any I/O.
func (l *Locker) check(key string, ttl time.Duration, o *options) error {
	switch {
	case o.err != nil:
		return o.err
	case key == "":
		return ErrInvalidKey
	case ttl < time.Millisecond:
		return fmt.Errorf("%w (got %v)", ErrInvalidTTL, ttl)
	}
	return nil
}

// giveUp ends an Obtain that failed. When an attempt's outcome was unknown,
// the key may hold our token although we never learned it; when we waited in
// line, our token may hold a place in the key's queue in Redis. Then forget
// it (compare-and-delete, leave the queue), so that no lock or place is left
// that nobody owns. cause is why we stop (ctx's error, a Redis error, or nil
// when the lock stayed taken).
func (l *Locker) giveUp(ctx context.Context, lk *Lock, forget bool, cause error) error {
	if forget {
		lk.forget(ctx)
	}
	if cause == nil {
		return fmt.Errorf("%w: %q is held by another owner", ErrNotObtained, lk.key)
	}
	return fmt.Errorf("%w: %q: %w", ErrNotObtained, lk.key, cause)
}

// attempt is the outcome of one acquire attempt.
type attempt struct {
	ours  bool          // the key holds our token now
	fence int64         // with WithFencing, the fence issued
	pttl  time.Duration // when not ours: the holder's remaining lease, < 0 if unknown
}

// acquire makes one attempt to set the key to lk's token. queued attempts
// wait in line in the key's queue in Redis. If ctx ends before Redis
// answers, the attempt is abandoned; should it still succeed, the lock is
// removed again when the late reply arrives.
func (l *Locker) acquire(ctx context.Context, lk *Lock, ttl time.Duration, o *options, queued bool) (attempt, error) {
	return bounded(ctx, l.direct, func(ctx context.Context) (attempt, error) {
		if !o.fencing && !queued {
			// The uncontended path: one plain SET. NX: only if free. GET:
			// the previous value tells a key already holding our own token
			// (an earlier attempt whose reply was lost, or go-redis retrying
			// this one after a reset) from another holder's.
			prev, err := l.client.SetArgs(ctx, lk.key, lk.token, redis.SetArgs{Mode: "NX", TTL: ttl, Get: true}).Result()
			switch {
			case errors.Is(err, redis.Nil), err == nil && prev == lk.token:
				return attempt{ours: true}, nil
			case err != nil:
				return attempt{}, err
			}
			return attempt{pttl: -1}, nil
		}
		fencing, lease := 0, int64(0)
		if o.fencing {
			fencing = 1
		}
		if queued {
			lease = queueLease.Milliseconds()
		}
		keys := []string{lk.key, sideKey(lk.key, "fence"), sideKey(lk.key, "queue"), sideKey(lk.key, "places")}
		res, err := acquireScript.Run(ctx, l.client, keys, lk.token, ttl.Milliseconds(), fencing, lease).Int64Slice()
		if err != nil {
			return attempt{}, err
		}
		if res[0] == 1 {
			return attempt{ours: true, fence: res[1]}, nil
		}
		return attempt{pttl: time.Duration(res[1]) * time.Millisecond}, nil
	}, func(a attempt, err error) {
		if a.ours || (err != nil && !refused(err)) {
			lk.forget(context.Background())
		}
	})
}

// refused reports whether err is an error reply from Redis (wrong type at the
// key, out of memory, ...): Redis answered and did not run the command. Any
// other error (a reset connection, a timeout) leaves the outcome unknown.
func refused(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

// forgetWait bounds how long a failing Obtain waits for the clean-up of its
// token, and forgetTimeout the clean-up itself. The clean-up goes on after
// the Obtain returned, and takes effect when Redis answers.
const (
	forgetWait    = 100 * time.Millisecond
	forgetTimeout = 5 * time.Second
)

// forget deletes the key if it holds lk's token, and takes the token out of
// the key's queue, ignoring the outcome: a lease or a place in the queue
// that is left expires by itself. It waits for that at most forgetWait, and
// not past the end of ctx, the caller's context.
func (lk *Lock) forget(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fctx, cancel := context.WithTimeout(context.Background(), forgetTimeout)
		defer cancel()
		_, _ = lk.releaseCall(fctx)
	}()
	t := time.NewTimer(forgetWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// nextBackoff returns the delay after prev: drawn at random from
// [min, 3*prev], capped at max ("decorrelated jitter"), so that contending
// clients spread out instead of retrying in lockstep.
func nextBackoff(prev time.Duration, o *options) time.Duration {
	hi := 3 * prev
	if hi > o.maxBackoff {
		hi = o.maxBackoff
	}
	if hi <= o.minBackoff {
		return o.minBackoff
	}
	return o.minBackoff + mathrand.N(hi-o.minBackoff+1)
}

// newToken returns 128 random bits from crypto/rand, base64url-encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Key returns the key the lock is held on.
func (lk *Lock) Key() string { return lk.key }

// Token returns the random token that identifies this acquisition. It is the
// value stored at the key while the lock is held.
func (lk *Lock) Token() string { return lk.token }

// Until returns when the lease ends as far as this process can tell: the
// moment the acquiring (or last successful refreshing) command was sent plus
// its ttl, on the monotonic clock. Redis measures the lease from when it ran
// the command, a little later, so Redis never frees the lock before Until
// (clock drift between the machines aside). The lock is certainly not held
// after Until unless refreshed in time.
func (lk *Lock) Until() time.Time {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.until
}

// Release releases the lock: it deletes the key if, and only if, it still
// holds this lock's token. It returns ErrNotHeld when it did not (the lock was
// already released, its lease expired, or someone else holds it now); a Lock
// released once returns ErrNotHeld at once, without contacting Redis.
// Release stops KeepAlive's renewals first. It returns when ctx is done even
// if Redis does not answer; the lease then expires by itself.
func (lk *Lock) Release(ctx context.Context) error {
	if lk.isReleased() {
		return ErrNotHeld
	}
	lk.stopKeeping()
	n, err := lk.release(ctx)
	if err != nil {
		return err
	}
	lk.mu.Lock()
	lk.released = true // held or not, it is not ours any more
	lk.mu.Unlock()
	if n == 0 {
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
	n, err := lk.run(ctx, refreshScript, ttl.Milliseconds())
	if err != nil {
		return err
	}
	if n == 0 {
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
	ms, err := lk.run(ctx, pttlScript)
	if err != nil {
		return 0, err
	}
	if ms < 0 {
		return 0, ErrNotHeld
	}
	return time.Duration(ms) * time.Millisecond, nil
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

// release runs releaseScript for lk, bounded by ctx.
func (lk *Lock) release(ctx context.Context) (int64, error) {
	return bounded(ctx, lk.locker.direct, lk.releaseCall, nil)
}

func (lk *Lock) releaseCall(ctx context.Context) (int64, error) {
	keys := []string{lk.key, sideKey(lk.key, "queue"), sideKey(lk.key, "places")}
	return releaseScript.Run(ctx, lk.locker.client, keys, lk.token, wakeChannel(lk.key)).Int64()
}

// run runs one of the compare-then-act scripts on lk's key and token, bounded
// by ctx.
func (lk *Lock) run(ctx context.Context, s *redis.Script, args ...any) (int64, error) {
	return bounded(ctx, lk.locker.direct, func(ctx context.Context) (int64, error) {
		return s.Run(ctx, lk.locker.client, []string{lk.key}, append([]any{lk.token}, args...)...).Int64()
	}, nil)
}
