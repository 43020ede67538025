package redislock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Errors returned by this package. Test for them with errors.Is: an error may
// wrap several of them, and a context error (context.DeadlineExceeded,
// context.Canceled) is kept alongside when that was the reason.
//
// An error that is none of these comes from Redis or the network: Redis
// could not be reached, the client is closed, or Redis refused a command
// (an error reply). It wraps go-redis's error and names the operation and
// the key. The state of the lock is then unknown: do not treat it as "done
// elsewhere"; retry with backoff, and alert if it lasts.
var (
	// ErrNotObtained is returned by Obtain, TryObtain and WithLock when
	// another owner held the key until the acquire deadline (for TryObtain:
	// at the single attempt, or others wait for the key). Redis answered:
	// this is contention, not a failure. Retry later, wait longer (a longer
	// ctx deadline or WithWait), or skip the work if another process doing
	// it at the same time is enough (a lock only stops concurrent work; see
	// the README, "What it is for").
	ErrNotObtained = errors.New("redislock: lock not obtained")

	// ErrNotHeld is returned by Release, Refresh and TTL when the lock is no
	// longer held by this Lock: it was released, its lease expired, or another
	// holder owns the key now. Nothing was changed in Redis. Work done under
	// the lock since its last successful Refresh may have overlapped with
	// another holder: check what it wrote (fencing tokens, WithFencing, make
	// that safe), and alert if it happens often (leases too short for the
	// work, or pauses longer than the lease).
	ErrNotHeld = errors.New("redislock: lock not held")

	// ErrInvalidKey is returned when the lock key is empty, or names a key
	// that the library keeps beside locks (it contains "}:rl1:": see
	// docs/how-it-works.md). Nothing is sent to Redis.
	ErrInvalidKey = errors.New("redislock: invalid key")

	// ErrInvalidTTL is returned when a lease ttl is shorter than one
	// millisecond (zero, negative or sub-millisecond): Redis expiries have
	// millisecond resolution and a lock without expiry is never created.
	// A quorum Locker's locks need at least 10 milliseconds (see NewQuorum).
	// Nothing is sent to Redis. An acquisition also returns it when the ttl
	// proved too short for the round trips to Redis: renewed 3 times in a
	// row, less than half of it was left each time the reply came (see
	// Obtain); the lock was given back. Use a longer ttl.
	ErrInvalidTTL = errors.New("redislock: invalid ttl")

	// ErrInvalidOption is returned when an Option given to New or to a call
	// has an invalid value (a negative wait, a backoff whose bounds are out
	// of order, ...), or is given where it does not apply (a Locker's option
	// given to a call, WithTTL given to Obtain, two modes). The error text names the option. When
	// the option was given to New, every call on that Locker returns it.
	// Nothing is sent to Redis.
	ErrInvalidOption = errors.New("redislock: invalid option")

	// ErrNilClient is returned by every call on a Locker made with a nil
	// client. Pass a go-redis v9 client (*redis.Client, *redis.ClusterClient,
	// redis.UniversalClient, ...) to New.
	ErrNilClient = errors.New("redislock: nil redis client passed to New")

	// ErrNilFunc is returned by WithLock when fn is nil. Nothing is sent to
	// Redis.
	ErrNilFunc = errors.New("redislock: nil fn passed to WithLock")
)

// ErrWrongKind is returned by Obtain, TryObtain and WithLock when the key
// holds another kind of lock than the call asks for, or data this library
// did not write: a semaphore's permits on a lock's key or the other way
// round, a reader on a semaphore, any lock on a Redis list, hash or set, or
// data of another version of this library (another data layout: see the
// CHANGELOG). The error names both kinds. Nothing was changed in Redis,
// and waiting cannot cure it: use another key. SetFenced returns it for a
// resource key that holds something else than what SetFenced writes. (A string the library did
// not write is not such data for a lock or a reader: it is held, as a lock
// of another owner, and waited for; see ErrNotObtained. A semaphore
// refuses it with ErrWrongKind, as it refuses this library's locks.)
var ErrWrongKind = errors.New("redislock: the key holds another kind of lock or data")

// wrongKind is the error of an acquisition in mode m of a key that holds
// what (see acquire.lua); the caller names the key (see failed).
func wrongKind(what string, m lockMode) error {
	return fmt.Errorf("%w: %s, where this call asks for %s", ErrWrongKind, kindName(what), m)
}

// kindName names what a key holds, as acquire.lua reports it.
func kindName(what string) string {
	switch {
	case what == markExclusive:
		return "an exclusive lock"
	case what == markShared:
		return "a read-write lock's readers"
	case strings.HasPrefix(what, "permits:"):
		return "a semaphore of " + strings.TrimPrefix(what, "permits:") + " permits"
	case what == "string":
		return "a string this library did not write (another owner's lock)"
	case strings.HasPrefix(what, "layout"):
		return "the data of another version of redislock (layout " + strings.TrimPrefix(what, "layout") + "; this one writes layout 1)"
	}
	return "a Redis " + what + " (data this library did not write)"
}

// failed is the error of an operation on key that Redis did not carry out:
// it could not be reached, or it refused (an error reply), or ctx ended
// first. It says which operation, cuts long keys, says what a server too
// old for this library answered, and keeps err in the chain.
func failed(op, key string, err error) error {
	e := &opError{op: op, key: key, err: err}
	if msg := err.Error(); strings.Contains(msg, "unknown command") || strings.Contains(msg, "syntax error") ||
		strings.Contains(msg, "Unknown Redis command") {
		e.hint = " (redislock needs Redis 7.0 or newer)"
	}
	return e
}

// ctxErr is ctx's error, with its cause beside it when that is another
// (ErrLockLost: an outer lock's loss ended it).
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// waitFailed is the error of a wait for key that ctx ended (cause: ctx's
// error) after its last attempt had failed with last: both stay in the
// chain.
func waitFailed(key string, cause, last error) error {
	var op *opError
	if errors.As(last, &op) && op.key == key {
		last = op.err // the key is named once
	}
	return &waitError{key: key, cause: cause, last: last}
}

// A waitError is waitFailed's error.
type waitError struct {
	key         string
	cause, last error
}

func (e *waitError) Error() string {
	return "redislock: waiting for " + quoteKey(e.key) + ": " + e.cause.Error() + "; the last attempt failed: " + strings.TrimPrefix(e.last.Error(), "redislock: ")
}

func (e *waitError) Unwrap() []error { return []error{e.cause, e.last} }

// An opError is failed's error: "redislock: <op> <key>: <err>", with one
// "redislock:" however many of this package's errors err wraps.
type opError struct {
	op, key, hint string
	err           error
}

func (e *opError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "redislock: ")
	if loc := scriptSuffix.FindStringIndex(msg); loc != nil {
		msg = msg[:loc[0]] + msg[loc[1]:] // Redis's note on where in a script: no news to a caller
	}
	return "redislock: " + e.op + " " + quoteKey(e.key) + ": " + msg + e.hint
}

// scriptSuffix is what Redis adds to an error reply raised in a script:
// " script: <sha1>, on @user_script:<line>." (Valkey 9: without the sha1).
var scriptSuffix = regexp.MustCompile(` script: (?:[0-9a-f]{40}, )?on @user_script:\d+\.?`)

func (e *opError) Unwrap() error { return e.err }

// quoteKey quotes key for an error text, cut to a readable length.
func quoteKey(key string) string {
	const keep = 64
	if len(key) <= keep {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:keep]) + fmt.Sprintf("... (%d bytes)", len(key))
}

// permanent reports whether err means that trying again will not help: a
// closed client, a script's refusal (see refusal), or an error reply other
// than those Redis gives while it loads, fails over or is busy (NOPERM, a
// script error, ...).
func permanent(err error) bool {
	var r refusal
	if errors.Is(err, redis.ErrClosed) || errors.As(err, &r) {
		return true
	}
	if !refused(err) {
		return false
	}
	for _, transient := range []string{"LOADING", "BUSY", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "NOREPLICAS", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, transient) {
			return false
		}
	}
	return true
}

// A refusal is the error of a script that ran and changed nothing because
// the key's state forbids what was asked (another kind of data, a
// semaphore of another n, a fence counter that cannot issue): waiting will
// not cure it.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

// refused reports whether err says that Redis did not carry out the command:
// an error reply (wrong type at the key, out of memory, ...), or a script's
// refusal. Any other error (a reset connection, a timeout) leaves the
// outcome unknown.
func refused(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	var r refusal
	return errors.As(err, &r) || errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}
