package redislock

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// An Option configures a Locker (when given to New or NewQuorum) or a single
// call (when given to Obtain, TryObtain or WithLock). Options given to a
// call apply to that call only and take precedence over the Locker's.
// Some apply to a Locker only (WithHooks, WithHolder, WithSafetyMargin,
// WithNamespace): given to a call, they fail it with ErrInvalidOption. An
// invalid option is reported as an error wrapping ErrInvalidOption by every
// call that uses it (by every call of the Locker, when given to New);
// nothing is sent to Redis in that case. A nil Option does nothing (so
// that code written for bsm/redislock's Obtain(ctx, key, ttl, nil)
// compiles and works).
type Option func(*options)

// options is the resolved configuration of a Locker or of one call.
type options struct {
	ttl        time.Duration // lease length for WithLock
	wait       time.Duration // how long Obtain waits; < 0: until ctx is done
	minBackoff time.Duration // first retry delay of Obtain
	maxBackoff time.Duration // largest retry delay of Obtain
	fencing    bool          // issue fencing tokens on acquire
	mode       lockMode      // exclusive, shared (WithShared) or a permit (WithPermits)
	safety     time.Duration // see WithSafetyMargin
	hooks      Hooks         // see WithHooks
	replicas   replicas      // see WithReplicas
	holder     string        // see WithHolder
	namespace  string        // see WithNamespace
	set        []string      // a set's keys (ObtainMulti), nil for one key
	multi      bool          // a call of ObtainMulti, TryObtainMulti or WithLockMulti, of one key too (see setOf)
	modeSet    bool          // WithShared, WithPermits or WithExclusive came in this apply (see apply)
	ttlSet     bool          // WithTTL came in this apply
	call       bool          // the options are a call's (see lockerOnly)
	err        error         // first invalid option, reported by calls
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

// WithHolder stores a description of the holder beside each lock of the
// Locker, for Locker.Inspect to report (and operators to read: "web-3 pid
// 4711"); without it, or with "", none is stored. It is kept in a hash of
// the holders' descriptions by token (a side key of the lock, see
// docs/how-it-works.md), written by the script that gives the lock and
// gone with the hold, so it changes nothing of how a holder is told from
// another. Every Redis client that can read the key can read it: put no
// secrets in it. It costs each acquisition the full acquire script instead
// of the plain lock's SET. It applies to a Locker (New), not to single
// calls. d must be valid UTF-8 of at most 200 bytes, and printable: one
// line of text, with no control or format characters (a newline, a tab,
// an escape, a direction override) and no spaces but ' '.
func WithHolder(d string) Option {
	return func(o *options) {
		if o.lockerOnly("WithHolder") {
			return
		}
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
