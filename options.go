package redislock

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// An Option configures a Locker (when given to New or NewQuorum) or a single
// call (when given to Obtain, TryObtain or WithLock). Options given to a
// call apply to that call only and take precedence over the Locker's.
// Some apply to a Locker only (WithHooks, WithSafetyMargin,
// WithNamespace): given to a call, they fail it with ErrInvalidOption. An
// invalid option is reported as an error wrapping ErrInvalidOption by every
// call that uses it (by every call of the Locker, when given to New);
// nothing is sent to Redis in that case. A nil Option does nothing (so
// that code written for bsm/redislock's Obtain(ctx, key, ttl, nil)
// compiles and works).
type Option func(*options)

// options is the resolved configuration of a Locker or of one call.
type options struct {
	ttl        time.Duration    // lease length for WithLock
	wait       time.Duration    // how long Obtain waits; < 0: until ctx is done
	minBackoff time.Duration    // first retry delay of Obtain
	maxBackoff time.Duration    // largest retry delay of Obtain
	fencing    bool             // issue fencing tokens on acquire
	mode       scripts.Mode     // exclusive, shared (WithShared) or a permit (WithPermits)
	safety     time.Duration    // see WithSafetyMargin
	hooks      Hooks            // see WithHooks
	replicas   scripts.Replicas // see WithReplicas
	holder     string           // see WithHolder
	namespace  string           // see WithNamespace
	modeSet    bool             // WithShared, WithPermits or WithExclusive came in this apply (see apply)
	ttlSet     bool             // WithTTL came in this apply
	call       bool             // the options are a call's (see lockerOnly)
	err        error            // first invalid option, reported by calls
}

// Defaults used when no Option says otherwise.
const (
	// DefaultTTL is the lease length WithLock uses without WithTTL.
	DefaultTTL = 30 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the jittered exponential
	// backoff between acquire attempts of Obtain.
	DefaultMinBackoff = 8 * time.Millisecond
	DefaultMaxBackoff = 256 * time.Millisecond
	// DefaultSafetyMargin is how late a timer may fire without KeepAlive's
	// lost-lock signal coming after the lease's end (see WithSafetyMargin).
	DefaultSafetyMargin = 50 * time.Millisecond
)

func defaultOptions() options {
	return options{
		ttl:        DefaultTTL,
		wait:       -1,
		minBackoff: DefaultMinBackoff,
		maxBackoff: DefaultMaxBackoff,
		safety:     DefaultSafetyMargin,
	}
}

// maxHolder bounds the length of a holder description, in bytes.
const maxHolder = 200

// WithHolder stores a description of the holder beside the lock, for
// Locker.Inspect and `redislock status` to report (and operators to read:
// "web-3 pid 4711", "job 8841"); without it, or with "", none is stored.
// Given to New, it describes every lock of the Locker; given to a call
// (Obtain, TryObtain, WithLock, the set calls, a quorum Locker's), that
// call's lock, in place of the Locker's. It is kept in a hash of the
// holders' descriptions by token (a side key of the lock, see
// docs/how-it-works.md), written by the script that gives the lock and
// gone with the hold, so it changes nothing of how a holder is told from
// another. Every Redis client that can read the key can read it: put no
// secrets in it. It costs each acquisition the full acquire script instead
// of the plain lock's SET. d must be valid UTF-8 of at most 200 bytes, and
// printable: one line of text, with no control or format characters (a
// newline, a tab, an escape, a direction override) and no spaces but ' '.
func WithHolder(d string) Option {
	return func(o *options) {
		if len(d) > maxHolder || !utf8.ValidString(d) || strings.ContainsFunc(d, notPrintable) {
			o.invalid(ErrInvalidOption, "WithHolder(%q): need printable UTF-8 text (no control or format characters) of at most %d bytes", cut(d), maxHolder)
			return
		}
		o.holder = d
	}
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// cut cuts s to a readable length for an error text.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// apply applies opts in order to a copy of o, as a call's options when
// call is true. The first invalid option is kept in the result's err
// field. A call's mode option (WithShared, WithPermits, WithExclusive)
// replaces the Locker's; two of them in one apply conflict.
func (o options) apply(opts []Option, call bool) options {
	o.modeSet, o.ttlSet, o.call = false, false, call
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// lockerOnly rejects an option of a Locker (named name) given to a call,
// and reports whether it did.
func (o *options) lockerOnly(name string) bool {
	if o.call {
		o.invalid(ErrInvalidOption, "%s applies to a Locker (give it to New), not to a single call", name)
	}
	return o.call
}

func (o *options) invalid(sentinel error, format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
	}
}

// WithTTL sets the lease length WithLock acquires the lock for and renews it
// to (default DefaultTTL), given to New (for every WithLock of the Locker)
// or to WithLock. Obtain and TryObtain take the lease as their ttl
// argument, and reject WithTTL (ErrInvalidOption): one call, one lease. A
// shorter lease frees the lock sooner after a holder crashes; a longer one
// survives longer Redis or network stalls. d must be at least one
// millisecond; it is truncated to whole milliseconds.
func WithTTL(d time.Duration) Option {
	return func(o *options) {
		if d < time.Millisecond {
			o.invalid(ErrInvalidTTL, "WithTTL(%v): must be at least 1ms", d)
			return
		}
		o.ttl, o.ttlSet = d.Truncate(time.Millisecond), true
	}
}

// WithWait bounds how long Obtain and WithLock wait for a contended lock.
// The acquire deadline is the earlier of the ctx deadline and now+d. Without
// WithWait they wait until ctx is done. WithWait(0) makes a single attempt,
// like TryObtain. d must not be negative.
func WithWait(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.invalid(ErrInvalidOption, "WithWait(%v): wait must not be negative", d)
			return
		}
		o.wait = d
	}
}

// WithBackoff sets the bounds of the jittered exponential backoff between
// acquire attempts: the first delay is about min, each later one is drawn at
// random up to three times the previous, never above max (defaults
// DefaultMinBackoff and DefaultMaxBackoff). It requires 0 < min <= max.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) {
		if min <= 0 || max < min {
			o.invalid(ErrInvalidOption, "WithBackoff(%v, %v): need 0 < min <= max", min, max)
			return
		}
		o.minBackoff, o.maxBackoff = min, max
	}
}

// WithSafetyMargin sets how long before the end of a kept lease (see
// Lock.KeepAlive) its context is cancelled, on top of ttl/100 for clock
// rates: the time the lost-lock timer may fire late by, on a busy machine
// (default DefaultSafetyMargin; at most a quarter of the lease is used). A
// larger margin keeps the signal in time under heavier load, and ends the
// lock's useful life that much sooner: a kept 300 ms lease is reported lost
// 53 ms before it ends by default. It applies to a Locker (New), not to
// single calls. d must not be negative.
func WithSafetyMargin(d time.Duration) Option {
	return func(o *options) {
		if o.lockerOnly("WithSafetyMargin") {
			return
		}
		if d < 0 {
			o.invalid(ErrInvalidOption, "WithSafetyMargin(%v): must not be negative", d)
			return
		}
		o.safety = d
	}
}

// WithNamespace puts every key and channel the Locker uses in Redis under
// prefix: the lock on key is the Redis key prefix+key, the keys kept beside
// it start with prefix (then a hash tag: see docs/how-it-works.md), and so
// do the channels hand-offs are announced on. A Redis ACL user limited to
// prefix (~prefix* and &prefix*) can then use it with the commands of
// @scripting, @read, @write and @pubsub, and TIME and WAIT (its scripts'
// commands are checked against the user's ACL too). Lock.Key and errors name the key without the
// prefix. Lockers (processes) that share locks must use the same namespace.
// It applies to a Locker (New, NewQuorum), not to single calls. prefix
// must be printable UTF-8 of at most 200 bytes, with no spaces.
func WithNamespace(prefix string) Option {
	return func(o *options) {
		if o.lockerOnly("WithNamespace") {
			return
		}
		if len(prefix) > maxHolder || !utf8.ValidString(prefix) || strings.ContainsFunc(prefix, func(r rune) bool { return r == ' ' || notPrintable(r) }) {
			o.invalid(ErrInvalidOption, "WithNamespace(%q): need printable UTF-8 text without spaces, of at most %d bytes", cut(prefix), maxHolder)
			return
		}
		o.namespace = prefix
	}
}

// WithShared makes an acquisition shared: the reader of a read-write lock.
// Any number of shared holders may hold a key at once, each with its own
// lease, token and fence; an ordinary (exclusive) holder of the same key is
// the writer, and holds it alone. A writer that waits stops new readers from
// taking the key (they line up behind it), so writers are not starved; when
// the writer releases, the key goes to every reader in line up to the next
// writer. Release, Refresh, TTL and KeepAlive work on a shared lock as on
// any other, for its holder alone: a reader that dies frees its share at
// the end of its own lease. Given to New, it makes every call of the
// Locker a reader's, unless the call names another mode (WithExclusive,
// WithPermits). A call names at most one mode.
func WithShared() Option {
	return func(o *options) { o.setMode(scripts.Mode{Shared: true}, "WithShared") }
}

// WithExclusive makes an acquisition exclusive: the default mode, a plain
// lock or the writer of a read-write lock. Give it to a call of a Locker
// made with WithShared or WithPermits to take an exclusive lock with it.
func WithExclusive() Option {
	return func(o *options) { o.setMode(scripts.Mode{}, "WithExclusive") }
}

// setMode sets the mode m, named name, unless another came in this apply.
func (o *options) setMode(m scripts.Mode, name string) {
	if o.modeSet && o.mode != m {
		o.invalid(ErrInvalidOption, "%s with another mode (WithShared, WithPermits, WithExclusive): a call names one", name)
		return
	}
	o.mode, o.modeSet = m, true
}

// WithPermits makes the key a semaphore of n permits: at most n holders at
// once, each with its own lease, token and fence, renewed and lost-signalled
// like any lock (KeepAlive), and a holder that dies frees its permit at the
// end of its own lease. Waiters get permits in the order they came. Every
// acquisition of a key must name the same n: while a semaphore has holders
// or waiters, an acquisition with another n fails with an error wrapping
// ErrInvalidOption, and changes nothing. A key is a semaphore's or a
// lock's: an exclusive or shared lock on a semaphore's key fails with
// ErrWrongKind, and so do permits asked for on a key that a lock's holders
// (readers too) or waiters use. n must be at least 1.
func WithPermits(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.invalid(ErrInvalidOption, "WithPermits(%d): need at least 1 permit", n)
			return
		}
		o.setMode(scripts.Mode{Permits: n}, "WithPermits")
	}
}

// WithReplicas makes every write that gives or extends a lease wait until n
// replicas of the primary acknowledged it (Redis's WAIT), at most timeout:
// the acquisition (Obtain, TryObtain, WithLock), Refresh, and each renewal
// of KeepAlive. A write not acknowledged in time does not count: an
// acquisition releases the lock and returns ErrNotReplicated, a Refresh
// returns ErrNotReplicated, a renewal is retried (see ErrNotReplicated).
//
// So a lock survives the failover of its primary to any replica that
// acknowledged it: with n equal to the number of replicas, to any replica
// Sentinel or Cluster may promote. WAIT does not make Redis strongly
// consistent: a replica that acknowledged may lose the write when it
// restarts without persistence, and a failover may promote a replica that
// did not acknowledge (when n is lower than the number of replicas). Each
// acquisition costs the time the replicas take to acknowledge (about one
// round trip from the primary to them), and on a contended key one round
// trip more (see docs/fault-tolerance.md). A lock handed over or
// passed to a waiting Obtain is refreshed and acknowledged before Obtain
// returns it.
//
// n = 0 turns replica acknowledgement off (for a single call on a Locker
// that has it). It requires n >= 0 and, for n > 0, 1ms <= timeout <=
// ReadTimeout - max(200ms, ReadTimeout/10) of the client: 2.7s with
// go-redis's default ReadTimeout of 3s (before v9.22), 4.5s with its
// default of 5s (v9.22 and later); a longer timeout is ErrInvalidOption.
// The reply to a WAIT that timed out comes after timeout, up to 100ms later
// (Redis notices at its next tick), and must come before go-redis stops
// reading. Not for a quorum Locker (NewQuorum), whose nodes are masters.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) {
		if n < 0 || (n > 0 && timeout < time.Millisecond) {
			o.invalid(ErrInvalidOption, "WithReplicas(%d, %v): need n >= 0 and a timeout of at least 1ms", n, timeout)
			return
		}
		o.replicas = scripts.Replicas{N: n, Timeout: timeout.Truncate(time.Millisecond)}
	}
}

// request returns the acquisition that a call with options o makes of keys
// for ttl: the one value every layer below takes (see lease.Request).
func (o *options) request(keys []string, ttl time.Duration, set bool) lease.Request {
	r := lease.Request{Keys: keys, Set: set, Mode: o.mode, TTL: ttl.Truncate(time.Millisecond), Fenced: o.fencing, Holder: o.holder,
		Replicas: o.replicas, Try: o.wait == 0, Wait: max(o.wait, 0), MinBackoff: o.minBackoff, MaxBackoff: o.maxBackoff}
	if set {
		r.Keys = slices.Clip(append([]string{}, keys...)) // the caller's slice is the caller's
	}
	return r
}
