package redislock

import (
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// An Option configures a Locker (when given to New) or a single call (when
// given to Obtain, TryObtain or WithLock). Options given to a call apply to
// that call only and take precedence over the Locker's. An invalid option is
// reported as an error wrapping ErrInvalidOption by the first call that uses
// it; nothing is sent to Redis in that case.
type Option func(*options)

// options is the resolved configuration of a Locker or of one call.
type options struct {
	ttl        time.Duration // lease length for WithLock
	wait       time.Duration // how long Obtain waits; < 0: until ctx is done
	minBackoff time.Duration // first retry delay of Obtain
	maxBackoff time.Duration // largest retry delay of Obtain
	fencing    bool          // issue fencing tokens on acquire
	mode       mode          // exclusive, shared (WithShared) or a permit (WithPermits)
	safety     time.Duration // see WithSafetyMargin
	hooks      Hooks         // see WithHooks
	replicas   replicas      // see WithReplicas
	holder     string        // see WithHolder
	modeSet    bool          // WithShared or WithPermits came in this apply (see apply)
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
		holder:     defaultHolder,
	}
}

// defaultHolder is the holder description of a Locker without WithHolder:
// the host name and the process id.
var defaultHolder = func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host"
	}
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}()

// maxHolder bounds the length of a holder description, in bytes.
const maxHolder = 200

// WithHolder sets the description of the holder that Locker.Inspect
// reports for the locks of this Locker (default: the host name and process
// id, "web-3 pid 4711"); "" stores none. It is stored beside the lock, in a
// hash of the holders' descriptions by token ({…}:redislock:holders:<key>),
// written by the script that gives the lock, so it changes nothing of how a
// holder is told from another. It applies to the Locker it is given
// to (New), not to single calls. d must be valid UTF-8 of at most 200
// bytes, and printable: one line of text, with no control or format
// characters (a newline, a tab, an escape, a direction override) and no
// spaces but ' '.
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

// apply applies opts in order to a copy of o. The first invalid option is
// kept in the result's err field. A call's mode option (WithShared,
// WithPermits) replaces the Locker's; two of them in one apply conflict.
func (o options) apply(opts []Option) options {
	o.modeSet = false
	for _, opt := range opts {
		if opt == nil {
			o.invalid(ErrInvalidOption, "nil Option")
			continue
		}
		opt(&o)
	}
	return o
}

func (o *options) invalid(sentinel error, format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
	}
}

// WithTTL sets the lease length WithLock acquires the lock for and renews it
// to (default DefaultTTL). A shorter lease frees the lock sooner after a
// holder crashes; a longer one survives longer Redis or network stalls. d
// must be at least one millisecond; it is truncated to whole milliseconds.
func WithTTL(d time.Duration) Option {
	return func(o *options) {
		if d < time.Millisecond {
			o.invalid(ErrInvalidTTL, "WithTTL(%v): must be at least 1ms", d)
			return
		}
		o.ttl = d.Truncate(time.Millisecond)
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
// 53 ms before it ends by default. It applies to the Locker it is given to
// (New), not to single calls. d must not be negative.
func WithSafetyMargin(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.invalid(ErrInvalidOption, "WithSafetyMargin(%v): must not be negative", d)
			return
		}
		o.safety = d
	}
}
