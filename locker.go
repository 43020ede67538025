package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	backends "github.com/seed5e0b76d9/redislock/internal/backend"
	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A Locker acquires locks on one Redis deployment (a single node, a
// Sentinel-managed primary or a Cluster), or on a quorum of masters
// (NewQuorum). It is safe for concurrent use and meant to be shared: create
// one per client and keep it. Waiters of one Locker queue up together (see
// Obtain), so sharing one Locker is also what makes waiting cheap. The zero
// Locker, and a nil *Locker, return ErrNilClient from every call.
type Locker struct {
	opts    options
	calls   [2]options // opts of a call with no options of its own: an Obtain's, a TryObtain's
	env     *lease.Env // what its holds share
	backend backend    // where its locks live
}

// A backend is where a Locker's locks live (see internal/backend): one
// deployment (a backends.Node) or a quorum of masters (a backends.Quorum).
type backend interface {
	lease.Store
	Check(r *lease.Request) error
	Acquire(ctx context.Context, r *lease.Request) (*lease.Hold, int, error)
	PTTL(ctx context.Context, h *lease.Hold) (time.Duration, error)
	Inspect(ctx context.Context, key string) (scripts.Info, error)
	Resume(ctx context.Context, r *lease.Request, token string) (*lease.Hold, error)
	Shutdown(ctx context.Context) error
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
	l := newLocker(opts)
	if isNil(client) && l.opts.err == nil {
		l.opts.err = ErrNilClient
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	if isNil(client) {
		client = nil // go-redis's defaults for the timeouts (see scripts.TimingOf)
	}
	l.backend = backends.NewNode(client, l.opts.namespace, hex.EncodeToString(id[:]), l.env, l.handedOff)
	return l
}

// NewQuorum returns a Locker whose locks are held on a majority of the
// independent Redis masters clients (not replicas of each other, not nodes
// of one Cluster): an odd number, usually 3 or 5 (of n masters a majority
// is n/2+1, so a fourth master adds no tolerance to three). A lock
// survives the loss of a minority of them: with 5 masters, any 2 may be
// down, slow or partitioned away. The Locker has the API and contract of New's, with
// these differences (the details are in docs/fault-tolerance.md):
//
//   - Obtain polls with jittered backoff (WithBackoff) instead of waiting
//     in a line: waiting is not fair, and a release does not hand the key
//     over. WithShared, WithPermits and WithReplicas are refused
//     (ErrInvalidOption), and so are sets of keys (ObtainMulti,
//     TryObtainMulti, WithLockMulti; one key too).
//   - Each operation goes to every master at once and is decided by the
//     fastest majority: an attempt is contention (ErrNotObtained) when a
//     majority answered and fewer than a majority took the key, and a
//     failure (an error joining the masters' errors) only when so many
//     failed that a majority cannot answer. A release is decided by a
//     majority; the other masters' releases go on in the background until
//     each is answered or go-redis gives up on it, and Shutdown waits for
//     them.
//   - WithFencing's fences keep increasing across holders as long as no
//     master forgets its counter (see docs/fault-tolerance.md); a fenced acquisition
//     costs one or two more round trips.
//   - Until allows for the drift of the masters' clocks, as Redlock does:
//     ttl/100 + 2 ms less than the lease that a command set; a ttl below
//     10 ms is ErrInvalidTTL.
//
// The restart rule: a master that loses its data forgets the locks it
// held, and a second majority may form while they are held. Such a master
// must stay away for longer than the longest lease, or run with
// appendonly yes and appendfsync always. Fence counters never expire:
// masters that issue fences need appendfsync always.
//
// A nil client, or no client, is reported by every call (ErrNilClient).
func NewQuorum(clients []redis.UniversalClient, opts ...Option) *Locker {
	l := newLocker(opts)
	if (len(clients) == 0 || slices.ContainsFunc(clients, isNil)) && l.opts.err == nil {
		l.opts.err = ErrNilClient
	}
	l.backend = backends.NewQuorum(clients, l.opts.namespace, l.env)
	return l
}

// newLocker returns a Locker with opts, without its backend.
func newLocker(opts []Option) *Locker {
	o := defaultOptions().apply(opts, false)
	l := &Locker{opts: o}
	l.calls[0], l.calls[1] = o.apply(nil, true), o.apply(nil, true)
	l.calls[1].wait = 0
	l.env = &lease.Env{Events: events{l}, Background: &scripts.Background{}, Safety: o.safety}
	return l
}

// Obtain acquires the lock on key for ttl, waiting while another holder
// has it until ctx is done or WithWait's wait ends: with a ctx that never
// ends, such as context.Background(), and no WithWait, it waits as long as
// the key is held. (bsm/redislock's Obtain with nil options makes one
// attempt: that is TryObtain here.) ttl is the lease, not a bound on
// waiting.
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
	r := o.request([]string{key}, ttl, false)
	return l.obtain(ctx, &r, ttl, o.bad(false))
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
	r := o.request([]string{key}, ttl, false)
	return l.obtain(ctx, &r, ttl, o.bad(false))
}

// usable returns ErrNilClient for a nil or zero Locker (not made by New or
// NewQuorum).
func (l *Locker) usable() error {
	if l == nil || l.backend == nil {
		return ErrNilClient
	}
	return nil
}

// obtain acquires r: it checks the call (bad is the first invalid option),
// joins the lock ctx carries or acquires the keys on the Locker's backend,
// and reports the outcome (Hooks.Obtain).
func (l *Locker) obtain(ctx context.Context, r *lease.Request, ttl time.Duration, bad error) (*Lock, error) {
	if err := l.check(ctx, r, ttl, bad); err != nil {
		return nil, err
	}
	start := time.Now()
	attempts := 0
	lk, err := l.join(ctx, r) // a lost lock's context ends with the loss: join says so
	switch {
	case ctx.Err() != nil && err != nil:
		err = fmt.Errorf("%w (%w)", err, ctx.Err())
	case ctx.Err() != nil:
		if lk != nil {
			lk.h.Leave()
			lk = nil
		}
		err = scripts.Failed("acquire", r.Key(), scripts.CtxErr(ctx))
	case lk == nil && err == nil:
		if r.Wait > 0 && !r.Try {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, r.Wait)
			defer cancel()
		}
		var h *lease.Hold
		h, attempts, err = l.backend.Acquire(ctx, r)
		if h != nil {
			lk = &Lock{locker: l, h: h, keys: r.Keys}
		}
	}
	l.obtained(ctx, r, start, attempts, lk, err)
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
	r := o.request([]string{key}, o.ttl, false)
	return l.withLock(ctx, &r, fn, o.bad(true))
}

// withLock is WithLock for r (a set's too); bad is the first invalid
// option of the call.
func (l *Locker) withLock(ctx context.Context, r *lease.Request, fn func(ctx context.Context) error, bad error) (err error) {
	if fn == nil && bad == nil {
		bad = ErrNilFunc
	}
	lk, err := l.obtain(ctx, r, r.TTL, bad)
	if err != nil {
		return err
	}
	lctx := lk.Context(lk.KeepAlive(ctx))
	defer func() {
		lost := lk.h.State() == lease.Lost // not when lctx only ended with an outer lock's loss
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

// A set lock holds several keys as one lock (ObtainMulti): all of them or
// none, with one token, one lease and, with WithFencing, a fence per key.
//
// All or nothing. The keys of one Redis Cluster hash slot (on any other
// client: all the keys) are taken by one script run (see acquire.lua),
// which takes every key or none; so no other caller ever sees part of them
// held. Keys of several slots are taken slot by slot, in the order of the
// slots, each slot's keys all at once, the earlier slots held while the
// later ones are waited for (see the backend layer's acquireAcross); a call that gives up or
// fails gives back what it took before it returns.
//
// No deadlock. A set waits in the line of each of its keys with one place,
// the same token in each line, put there by one script run: the places of
// one slot's lines are in the order those runs came, the same in every
// line. A set's place is handed each key, as a one-key place is, when it
// is first in that key's line (see handOff in line.lua); the set keeps
// what it was handed while it waits for the rest, and has the lock when it
// has them all. A waiter holds keys only where it was first in line, so it
// waits only for places earlier than its own, or for holders who wait for
// nothing: the earliest place of all that wait is first in each of its
// lines, and gets its keys once their holders release them or their leases
// end. Across slots, every set takes the slots in the same order and holds
// none of a later slot while it waits for an earlier one, so no cycle of
// waiters forms (a caller that nests its own locks in another order can
// still make one). No starvation: a set's place is first in the line of a
// key until it is handed it, and nobody overtakes the first in line.

// MaxKeys is the most keys ObtainMulti takes.
const MaxKeys = 64

// ObtainMulti acquires the locks on keys for ttl as one lock, waiting until
// ctx is done or WithWait's wait ends, as Obtain does: with
// context.Background() and no WithWait, as long as a key is held.
// (bsm/redislock's ObtainMulti with nil options makes one attempt: that is
// TryObtainMulti here.) It returns holding every key, or none. The Lock it returns
// holds them all with one token and one lease (Key is the first of keys,
// Keys all of them, Fences a fence per key with WithFencing); Release,
// Refresh, TTL, Until, KeepAlive and Context act on them all, and losing
// one of them is losing the lock. A set waits in the line of each of its
// keys, in its turn, and never deadlocks with other sets or single keys
// (see docs/lock-family.md, "Sets of keys").
//
// On a Redis Cluster, the keys of one hash slot are taken by one command,
// all at once; keys of several slots are taken slot by slot (a round trip
// per slot, and a line per slot to wait in), in the order of the slots:
// while it waits for a later slot, the call holds the keys of the earlier
// ones, and gives them back if it fails or gives up. Elsewhere every key
// is taken at once.
//
// keys must be 1 to MaxKeys distinct valid keys; WithPermits does not
// apply (ErrInvalidOption), nor does a quorum Locker. Its errors are those
// of Obtain. A ctx that carries a lock of all of keys joins it; of some of
// them, fails with ErrInvalidOption (it would wait for itself).
func (l *Locker) ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := l.opts.apply(opts, true)
	r := o.request(keys, ttl, true)
	return l.obtain(ctx, &r, ttl, o.bad(false))
}

// TryObtainMulti makes a single attempt to acquire the locks on keys as one
// lock (see ObtainMulti), as TryObtain does for one key.
func (l *Locker) TryObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := l.opts.apply(opts, true)
	o.wait = 0
	r := o.request(keys, ttl, true)
	return l.obtain(ctx, &r, ttl, o.bad(false))
}

// WithLockMulti is WithLock for a set of keys (see ObtainMulti).
func (l *Locker) WithLockMulti(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	if err := l.usable(); err != nil {
		return err
	}
	o := l.opts.apply(opts, true)
	r := o.request(keys, o.ttl, true)
	return l.withLock(ctx, &r, fn, o.bad(true))
}

// Resume holds again the lock on keys that token holds: a lock that another
// process or host took (a job started on one machine and finished on
// another, an operator clearing a stuck lock), whose token it was given
// (Lock.Token, Inspect's Holder.Token). It checks with Redis that token
// holds every key, in one mode (exclusive, shared or a permit: as found),
// and makes the lock this Lock's from then on: it sets the lease to ttl and
// issues new fences (Fence, Fences: higher than every fence before, so
// SetFenced refuses the writes of the process that took it from then on),
// with commands of a generation above that process's, so that no late
// command of its changes the lease. Release, Refresh, TTL, KeepAlive and
// Context then work as for a lock this Locker took; a Release hands the
// key to the next in line, as any does.
//
// The lock is then held by two Locks with one token in Redis: the process
// that took it must stop using its Lock (not Release it, nor keep it
// alive: its Release, or a give-back after it finds the lock lost, would
// release the lock for both). A key not held by token returns ErrNotHeld,
// naming it, and changes nothing. keys are one key, or a set's (see
// ObtainMulti); bad input returns ErrInvalidKey or ErrInvalidTTL before
// anything is sent. The Locker's WithReplicas applies.
func (l *Locker) Resume(ctx context.Context, keys []string, token string, ttl time.Duration) (*Lock, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	o := l.calls[0]
	o.fencing = true
	r := o.request(keys, ttl, true)
	r.Set = len(keys) != 1
	if err := l.check(ctx, &r, ttl, o.err); err != nil {
		return nil, err
	}
	if !scripts.IsToken(token) {
		return nil, fmt.Errorf("%w: %q is not a token of this library (Lock.Token)", ErrInvalidOption, token)
	}
	if err := ctx.Err(); err != nil {
		return nil, scripts.Failed("resume", r.Key(), scripts.CtxErr(ctx))
	}
	h, err := l.backend.Resume(ctx, &r, token)
	if err != nil {
		return nil, err
	}
	return &Lock{locker: l, h: h, keys: r.Keys}, nil
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

// check validates a call's input before any I/O: bad is the first invalid
// option of the call, ttl the lease it asked for.
func (l *Locker) check(ctx context.Context, r *lease.Request, ttl time.Duration, bad error) error {
	if bad != nil {
		return bad
	}
	if err := l.opts.err; err != nil {
		return err
	}
	switch {
	case r.Set && len(r.Keys) == 0:
		return fmt.Errorf("%w: no keys", ErrInvalidKey)
	case len(r.Keys) > MaxKeys:
		return fmt.Errorf("%w: %d keys: at most %d", ErrInvalidKey, len(r.Keys), MaxKeys)
	case r.Set && r.Mode.Permits > 0:
		return fmt.Errorf("%w: WithPermits: a semaphore is one key, not a set", ErrInvalidOption)
	}
	for i, key := range r.Keys {
		if err := scripts.CheckKey(key); err != nil {
			return err
		}
		if slices.Contains(r.Keys[:i], key) {
			return fmt.Errorf("%w: %s given twice", ErrInvalidKey, scripts.QuoteKey(key))
		}
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: must be at least 1ms (got %v)", ErrInvalidTTL, ttl)
	}
	if err := l.backend.Check(r); err != nil {
		return err
	}
	return l.checkUpgrade(ctx, r)
}

// bad returns the first invalid option of a call with options o: WithTTL
// too, for a call that takes its lease as an argument (withTTL false).
func (o *options) bad(withTTL bool) error {
	if o.err == nil && o.ttlSet && !withTTL {
		return fmt.Errorf("%w: WithTTL sets WithLock's lease; Obtain and TryObtain take theirs as the ttl argument", ErrInvalidOption)
	}
	return o.err
}

// Shutdown waits until the clean-up that the Locker does in the background
// has reached Redis, or ctx ends (it then returns ctx's error): releases
// that go on after Release returned (its ctx had ended), places in line
// given up by Obtains that ended, and locks that acquisitions abandoned at
// their deadline took and give back. Without it, a process that exits right
// after an Obtain gave up may leave its place in line for up to a second
// (see docs/how-it-works.md), and be handed the key meanwhile
// for that long. It also ends the Locker's pub/sub subscriptions, once no
// Obtain waits (within 100 ms, or once go-redis gives up on a network that
// does not answer), and waits for them, so that no goroutine of the Locker
// is left when it returns nil (but for the idle ones of New's note, which
// end within 20 ms). Call it before the process exits, after the
// last Release, with a deadline: each piece of clean-up goes on until Redis
// answers or go-redis gives up on it, which with a master that does not
// answer takes as long as go-redis may take with a command and its
// retries, and a second (at least 5 s; 15 s with go-redis v9.0's default
// options, more with later releases' longer default timeouts). The Locker
// stays usable; leases kept alive are not touched.
func (l *Locker) Shutdown(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := l.env.Background.Wait(ctx); err != nil {
		return err
	}
	return l.backend.Shutdown(ctx)
}

// Inspect reports who holds key, with their leases, the fence counter
// and how many wait, for a lock of any mode, in one round trip (two when
// Redis does not have the script yet, after a restart or SCRIPT FLUSH: it
// is sent once more in full). It changes nothing. A key that holds data
// this library did not write is reported as ModeForeign (a string) or
// ModeOther. On a quorum Locker it reports the holders a majority of the
// masters report, as soon as the replies decide them: at the fastest
// majority when those agree; when they differ it waits for more replies
// (an error if ctx ends first), then reads the first ones again, so that a
// holder it reports was on a majority at one moment, with the lease left
// then. An empty key returns ErrInvalidKey.
func (l *Locker) Inspect(ctx context.Context, key string) (Info, error) {
	if err := l.usable(); err != nil {
		return Info{}, err
	}
	if err := l.opts.err; err != nil {
		return Info{}, err
	}
	if err := scripts.CheckKey(key); err != nil {
		return Info{}, err
	}
	l.env.Background.Begin()
	info, err := scripts.Bounded(ctx, false, func(ctx context.Context) (scripts.Info, error) {
		defer l.env.Background.End()
		return l.backend.Inspect(ctx, key)
	}, nil)
	if err != nil {
		return Info{}, scripts.Failed("inspect", key, err)
	}
	return infoOf(key, info), nil
}
