package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locker acquires locks on one Redis deployment (a single node, a
// Sentinel-managed primary or a Cluster). It is safe for concurrent use and
// meant to be shared: create one per client and keep it. Waiters of one
// Locker queue up together (see Obtain), so sharing one Locker is also what
// makes waiting cheap.
type Locker struct {
	client  redis.UniversalClient
	opts    options
	id      string        // names the Locker's wake channel and its places in line
	direct  bool          // the client honours ctx deadlines itself (see bounded, timing)
	retry   time.Duration // how long go-redis may take with one command (see retryWindow)
	read    time.Duration // the client's ReadTimeout; <= 0: none
	retries int           // the client's MaxRetries: how often go-redis sends a command again
	rtts    roundTrips    // of answered attempts (see silence)
	keeper  keeper        // renews kept leases
	lines   lines         // Obtains waiting for keys
	quorum  *quorum       // the masters of a quorum Locker (NewQuorum); nil for others
	chores  *chores       // clean-up in the background (see Shutdown)
}

// New returns a Locker that acquires locks through client, a go-redis v9
// client of any kind. opts set the Locker's defaults; each call may override
// them. New does not contact Redis.
//
// The deadlines of ctx hold with any client options: each call whose ctx
// can end runs in a goroutine of its own, which the caller stops waiting
// for when ctx ends (go-redis stops a socket read at ctx's deadline only
// with ContextTimeoutEnabled, and never when ctx is cancelled before it),
// at the cost of a goroutine hand-off per call. A nil client or an invalid
// option is reported by every call on the returned Locker (ErrNilClient,
// ErrInvalidOption, ErrInvalidTTL).
func New(client redis.UniversalClient, opts ...Option) *Locker {
	o := defaultOptions().apply(opts)
	if isNil(client) && o.err == nil {
		o.err = ErrNilClient
	}
	return newLocker(client, o)
}

// newLocker returns a Locker of client (nil for a quorum Locker) with the
// resolved options o.
func newLocker(client redis.UniversalClient, o options) *Locker {
	var id [8]byte
	_, _ = rand.Read(id[:])
	l := &Locker{client: client, opts: o, id: hex.EncodeToString(id[:]), chores: &chores{}}
	if isNil(client) {
		client = nil // go-redis's defaults for the timeouts (see timingOf)
	}
	t := timingOf(client)
	l.direct, l.read, l.retries, l.retry = t.direct, t.read, t.retries, t.retryWindow()
	return l
}

// Obtain acquires the lock on key for ttl, waiting while another holder has
// it, until the acquire deadline: the earlier of ctx's deadline and the end
// of WithWait; without either it waits until ctx is cancelled. The ttl is
// the lease, not a bound on waiting.
//
// Waiting is fair and does not poll. Lockers (processes) take turns in the
// order of their places in the key's line in Redis, and the Obtains of one
// Locker in the order they were called; a release hands the key to the next
// in line directly, so nobody can take it in between: not a TryObtain, not
// a new Obtain, not the releasing process calling Obtain again. Within its
// turn a Locker passes the lock between its own Obtains without a round
// trip, for a round of at most 17 critical sections and 10 ms: a waiter
// waits for the round under way, then for one round of each Locker whose
// place is ahead of its own (see the README, "Waiting").
//
// The lock returned has at least half of ttl left (Until) when Obtain is
// done with it, before the Obtain hook (see Hooks) is called: when the
// reply came late, or the wait for a hand-off was long, Obtain renews the
// lease before it returns (at most 3 times: a ttl that round trips to Redis
// use up fails with an error saying so). A call whose ctx carries the lock
// (see Lock.Context) joins it instead, with the lease it has.
//
// When another owner kept the key until the deadline, the error wraps
// ErrNotObtained and ctx's error, so both errors.Is(err, ErrNotObtained)
// and errors.Is(err, context.DeadlineExceeded) hold. When Redis failed
// instead (it could not be reached, the client is closed, an error reply),
// the error is not ErrNotObtained: it wraps go-redis's error, and ctx's
// when the deadline ended a wait whose last attempt failed. Errors that
// waiting cannot cure (a closed client, WRONGTYPE, a script error) end the
// wait at once. A ctx already done returns its error at once. An invalid
// key, ttl or option returns ErrInvalidKey, ErrInvalidTTL or
// ErrInvalidOption before anything is sent to Redis. ttl must be at least
// one millisecond; it is truncated to whole milliseconds.
func (l *Locker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	o := l.opts.apply(opts)
	return l.obtain(ctx, key, ttl, &o)
}

// TryObtain makes a single attempt to acquire the lock on key for ttl. It
// returns an error wrapping ErrNotObtained at once when another holder has
// the lock, and also when others wait for it (in this Locker or in Redis's
// line), or this Locker holds it: it never takes a key out of turn. Its
// other errors are those of Obtain: a Redis failure is not ErrNotObtained.
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
	if err := l.quorum.checkTTL(ttl); err != nil {
		return nil, err
	}
	if err := l.checkUpgrade(ctx, key, o.mode); err != nil {
		return nil, err
	}
	start := time.Now()
	lk, attempts, err := l.acquire(ctx, key, ttl.Truncate(time.Millisecond), o)
	l.obtained(ctx, key, start, attempts, lk, err)
	return lk, err
}

// acquire is obtain with valid input; it also returns how many acquire
// commands it sent.
func (l *Locker) acquire(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, failed("acquire", key, err)
	}
	if lk, err := l.join(ctx, key, o.mode); lk != nil || err != nil {
		return lk, 0, err
	}
	if o.wait == 0 && l.quorum == nil {
		return l.try(ctx, key, ttl, o)
	}
	if o.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.wait)
		defer cancel()
	}
	if l.quorum != nil {
		return l.quorum.acquire(ctx, l, key, ttl, o)
	}
	return l.queue(ctx, key, ttl, o)
}

// WithLock obtains the lock on key for the lease set by WithTTL (waiting as
// Obtain does), runs fn while keeping the lease alive, and releases the lock
// when fn returns, panics (the panic goes on after the release) or the
// caller's ctx is cancelled (fn's ctx is then cancelled too, and WithLock
// waits for fn to return).
//
// fn's ctx is derived from ctx. It is cancelled with cause ErrLockLost as soon
// as the lock is lost (see Lock.KeepAlive for the timing guarantee); fn
// should then stop, and WithLock's error wraps ErrLockLost. (fn's ctx also
// ends when ctx does, with ctx's cause: an outer lock's loss, when WithLock
// runs in the fn of another, ends it with ErrLockLost, but is not this
// lock's.) WithLock returns fn's error, joined with ErrLockLost and with any
// error of the release, which uses a fresh context bounded to 5 seconds; a
// release that fails (Redis is unreachable) goes on in the background, as
// with a Release whose ctx has ended, and its error says so. If the lock is
// not obtained, fn is not called and the error is Obtain's.
func (l *Locker) WithLock(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	o := l.opts.apply(opts)
	if fn == nil && o.err == nil {
		o.err = ErrNilFunc
	}
	lk, err := l.obtain(ctx, key, o.ttl, &o)
	if err != nil {
		return err
	}
	lctx := lk.Context(lk.KeepAlive(ctx))
	defer func() {
		lost := lk.acquisition().isLost() // not when lctx only ended with an outer lock's loss
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		rerr := lk.endWith(rctx, true)
		if lost && !errors.Is(err, ErrLockLost) {
			err = errors.Join(err, ErrLockLost)
		}
		if rerr != nil && !(lost && errors.Is(rerr, ErrNotHeld)) {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(lctx)
}

// releaseTimeout bounds the Release that WithLock makes after fn returns.
const releaseTimeout = 5 * time.Second

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
		return fmt.Errorf("%w: must be at least 1ms (got %v)", ErrInvalidTTL, ttl)
	case l.quorum != nil:
		return l.quorum.check(o)
	case o.replicas.n > 0 && l.read > 0 && o.replicas.timeout > l.read-waitSlack(l.read):
		return fmt.Errorf("%w: WithReplicas timeout %v: must leave %v of the client's ReadTimeout (%v): Redis answers a WAIT that timed out up to 100ms late, and go-redis would stop reading first",
			ErrInvalidOption, o.replicas.timeout, waitSlack(l.read), l.read)
	}
	return nil
}

// newToken returns 128 random bits from crypto/rand, base64url-encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
