package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locker acquires locks on one Redis deployment (a single node, a
// Sentinel-managed primary or a Cluster), or on a quorum of masters
// (NewQuorum). It is safe for concurrent use and meant to be shared: create
// one per client and keep it. Waiters of one Locker queue up together (see
// Obtain), so sharing one Locker is also what makes waiting cheap. The zero
// Locker, and a nil *Locker, return ErrNilClient from every call.
type Locker struct {
	client     redis.UniversalClient
	opts       options
	calls      [2]options              // opts of a call with no options of its own: an Obtain's, a TryObtain's
	id         string                  // names the Locker's wake channels and its places in line
	keys       keyspace                // names its keys and channels in Redis
	backend    backend                 // where its locks live
	direct     bool                    // the client honours ctx deadlines itself (see bounded, timing)
	retry      time.Duration           // how long go-redis may take with one command (see retryWindow)
	read       time.Duration           // the client's ReadTimeout; <= 0: none
	sharded    bool                    // the client is a Cluster's: hand-offs are announced on shard channels
	rtts       roundTrips              // of answered attempts (see silence)
	failure    atomic.Pointer[failure] // see lastFailure
	keeper     keeper                  // renews kept leases
	lines      lines                   // Obtains waiting for keys (a deployment's)
	background *background             // clean-up in the background (see Shutdown)
}

// New returns a Locker that acquires locks through client, a go-redis v9
// client of any kind (an auto-pipelining one too: see
// docs/performance.md). opts set the Locker's defaults; each call may
// override some of them (see Option). New does not contact Redis.
//
// The deadlines of ctx hold with any client options: each call whose ctx
// can end runs in another goroutine, which the caller stops waiting
// for when ctx ends (go-redis stops a socket read at ctx's deadline only
// with ContextTimeoutEnabled, and never when ctx is cancelled before it).
// That goroutine then waits 20 ms for the next such call, of any Locker,
// and ends if none comes.
// A nil client or an invalid option is reported by every call on the
// returned Locker (ErrNilClient, ErrInvalidOption, ErrInvalidTTL).
func New(client redis.UniversalClient, opts ...Option) *Locker {
	o := defaultOptions().apply(opts, false)
	if isNil(client) && o.err == nil {
		o.err = ErrNilClient
	}
	l := newLocker(client, o)
	l.backend = deployment{l}
	return l
}

// newLocker returns a Locker of client (nil for a quorum Locker) with the
// resolved options o, without its masters.
func newLocker(client redis.UniversalClient, o options) *Locker {
	var id [8]byte
	_, _ = rand.Read(id[:])
	l := &Locker{client: client, opts: o, id: hex.EncodeToString(id[:]), keys: keyspace{o.namespace}, background: &background{}}
	l.calls[0], l.calls[1] = o.apply(nil, true), o.apply(nil, true)
	l.calls[1].wait = 0
	if isNil(client) {
		client = nil // go-redis's defaults for the timeouts (see timingOf)
	}
	_, l.sharded = client.(*redis.ClusterClient)
	t := timingOf(client)
	l.direct, l.read, l.retry = t.direct, t.read, t.retryWindow()
	return l
}

// Obtain acquires the lock on key for ttl (the lease, not a bound on
// waiting), waiting while another holder has it until ctx is done or the
// wait set by WithWait ends.
//
// Waiting is fair and does not poll: Lockers (processes) take turns in the
// order of their places in the key's line in Redis, the Obtains of one
// Locker in the order they were called, and a release hands the key to the
// next in line directly, so nobody can take it in between. Within its turn
// a Locker passes the lock between its own Obtains without a round trip,
// for a round of at most 17 critical sections and 10 ms (see
// docs/how-it-works.md, "Waiting").
//
// The lock returned has at least half of ttl left (Until) when Obtain
// returns it: a late reply, or a long wait for a hand-off, is followed by a
// renewal (at most 3: a ttl that round trips to Redis use up fails with
// ErrInvalidTTL). A call whose ctx carries the lock (see Lock.Context)
// joins it instead, with the lease it has.
//
// When another owner kept the key until the deadline, the error wraps
// ErrNotObtained and ctx's error. When Redis failed instead (unreachable,
// a closed client, an error reply), the error is not ErrNotObtained: it
// wraps go-redis's error, and ctx's when the deadline ended a wait whose
// last attempt failed. Errors that waiting cannot cure (a closed client,
// ErrWrongKind, an error reply such as NOPERM) end the wait at once. A ctx
// already done returns its error (and its cause, when another) at once,
// sending nothing (also when it carries the lock: nothing is joined; when
// the lock it carries is lost, the error wraps ErrLockLost, as the context
// of WithLock's fn is once the lock is lost). An invalid key, ttl or option
// returns ErrInvalidKey, ErrInvalidTTL or ErrInvalidOption before anything
// is sent. ttl must be at least one millisecond; it is truncated to whole
// milliseconds.
func (l *Locker) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := &l.calls[0]
	if len(opts) > 0 {
		call := l.opts.apply(opts, true)
		o = &call
	}
	return l.obtain(ctx, key, ttl, o)
}

// TryObtain makes a single attempt to acquire the lock on key for ttl. It
// returns an error wrapping ErrNotObtained at once when another holder has
// the lock, and also when others wait for it (in this Locker or in Redis's
// line), or this Locker holds it: it never takes a key out of turn. Its
// other errors are those of Obtain: a Redis failure is not ErrNotObtained.
func (l *Locker) TryObtain(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := &l.calls[1]
	if len(opts) > 0 {
		call := l.opts.apply(opts, true)
		call.wait = 0
		o = &call
	}
	return l.obtain(ctx, key, ttl, o)
}

// usable returns ErrNilClient for a nil or zero Locker (not made by New or
// NewQuorum).
func (l *Locker) usable() error {
	if l == nil || l.backend == nil {
		return ErrNilClient
	}
	return nil
}

// obtain is Obtain with resolved options, which it does not change; o.wait
// == 0 makes a single attempt. It checks the call, joins the lock ctx
// carries or acquires the key on the Locker's backend, and reports the
// outcome (Hooks.Obtain).
func (l *Locker) obtain(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, error) {
	if err := l.check(ctx, key, ttl, o); err != nil {
		return nil, err
	}
	start := time.Now()
	attempts := 0
	lk, err := l.join(ctx, key, o) // a lost lock's context ends with the loss: join says so
	switch {
	case ctx.Err() != nil && err != nil:
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	case ctx.Err() != nil:
		if lk != nil {
			lk.endHandle()
			lk = nil
		}
		err = failed("acquire", key, ctxErr(ctx))
	case lk == nil && err == nil:
		if o.wait > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.wait)
			defer cancel()
		}
		lk, attempts, err = l.backend.acquire(ctx, key, ttl.Truncate(time.Millisecond), o)
	}
	l.obtained(ctx, key, o.set, start, attempts, lk, err)
	return lk, err
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
	if err := l.usable(); err != nil {
		return err
	}
	o := l.opts.apply(opts, true)
	return l.withLock(ctx, key, fn, &o)
}

// withLock is WithLock with resolved options (a set's, with o.set).
func (l *Locker) withLock(ctx context.Context, key string, fn func(ctx context.Context) error, o *options) (err error) {
	if fn == nil && o.err == nil {
		o.err = ErrNilFunc
	}
	o.ttlSet = false // WithLock takes its lease from WithTTL
	lk, err := l.obtain(ctx, key, o.ttl, o)
	if err != nil {
		return err
	}
	lctx := lk.Context(lk.KeepAlive(ctx))
	defer func() {
		lost := lk.acquisition().isLost() // not when lctx only ended with an outer lock's loss
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		rerr := lk.release(rctx, true)
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
func (l *Locker) check(ctx context.Context, key string, ttl time.Duration, o *options) error {
	switch {
	case o.err != nil:
		return o.err
	case o.multi:
		if err := checkSet(o, key); err != nil {
			return err
		}
	case checkKey(key) != nil:
		return checkKey(key)
	}
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("%w: must be at least 1ms (got %v)", ErrInvalidTTL, ttl)
	case o.ttlSet:
		return fmt.Errorf("%w: WithTTL sets WithLock's lease; Obtain and TryObtain take theirs as the ttl argument", ErrInvalidOption)
	}
	if err := l.backend.check(o, ttl); err != nil {
		return err
	}
	return l.checkUpgrade(ctx, key, o.mode)
}

// plain reports whether an acquisition with options o takes a plain lock
// (see the note at the top of scripts.go): exclusive, without a fence or a description.
func (o *options) plain() bool {
	return o.mode.exclusive() && !o.fencing && o.holder == "" && o.set == nil
}
