package scripts

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The errors of the library: the root package exports each under the same
// name, with what it means for a caller and what to do.
var (
	ErrNotObtained   = errors.New("redislock: lock not obtained")
	ErrNotHeld       = errors.New("redislock: lock not held")
	ErrLockLost      = errors.New("redislock: lock lost")
	ErrInvalidKey    = errors.New("redislock: invalid key")
	ErrInvalidTTL    = errors.New("redislock: invalid ttl")
	ErrInvalidOption = errors.New("redislock: invalid option")
	ErrNilClient     = errors.New("redislock: nil redis client passed to New")
	ErrNilFunc       = errors.New("redislock: nil fn passed to WithLock")
	ErrWrongKind     = errors.New("redislock: the key holds another kind of lock or data")
	ErrNotReplicated = errors.New("redislock: not acknowledged by enough replicas")
	ErrFenceRejected = errors.New("redislock: write rejected: a newer lock holder has written with a higher fence")
)

// ErrFenceNotIssued is the error of an acquisition whose fence could not
// be issued: the fence counter holds something else than an integer, or is
// at its maximum. Nothing is held.
var ErrFenceNotIssued = errors.New("the fence could not be issued")

// wrongKind is ErrWrongKind for a key that holds what (as acquire.lua
// names it: EXCLUSIVE, SHARED, "permits:<n>", "string", "layout<n>", or a
// Redis type), where a call asks for m.
func wrongKind(what string, m Mode) error {
	return fmt.Errorf("%w: %s, where this call asks for %s", ErrWrongKind, kindName(what), m)
}

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

// Failed is the error of an operation (op, on key) that failed with err,
// which it wraps. An error that says Redis does not know a command or an
// option gets a hint: the library needs Redis 7.0.
func Failed(op, key string, err error) error {
	e := &opError{op: op, key: key, err: err}
	if msg := err.Error(); strings.Contains(msg, "unknown command") || strings.Contains(msg, "syntax error") ||
		strings.Contains(msg, "Unknown Redis command") {
		e.hint = " (redislock needs Redis 7.0 or newer)"
	}
	return e
}

// CtxErr is ctx's error, with its cause when that is another.
func CtxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// WaitFailed is the error of a wait for key that ctx's end (cause) ended
// while its last attempt had failed with last: it wraps both.
func WaitFailed(key string, cause, last error) error {
	var op *opError
	if errors.As(last, &op) && op.key == key {
		last = op.err // the key is named once
	}
	return &waitError{key: key, cause: cause, last: last}
}

type waitError struct {
	key         string
	cause, last error
}

func (e *waitError) Error() string {
	return "redislock: waiting for " + QuoteKey(e.key) + ": " + e.cause.Error() + "; the last attempt failed: " + strings.TrimPrefix(e.last.Error(), "redislock: ")
}

func (e *waitError) Unwrap() []error { return []error{e.cause, e.last} }

// An opError names the operation and the key of an error from Redis, once:
// "redislock: <op> <key>: <err>".
type opError struct {
	op, key, hint string
	err           error
}

func (e *opError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "redislock: ")
	if loc := scriptSuffix.FindStringIndex(msg); loc != nil {
		msg = msg[:loc[0]] + msg[loc[1]:] // Redis's note on where in a script: no news to a caller
	}
	return "redislock: " + e.op + " " + QuoteKey(e.key) + ": " + msg + e.hint
}

// scriptSuffix is what Redis appends to an error raised in a script.
var scriptSuffix = regexp.MustCompile(` script: (?:[0-9a-f]{40}, )?on @user_script:\d+\.?`)

func (e *opError) Unwrap() error { return e.err }

// QuoteKey quotes key for an error text, cut to 64 bytes.
func QuoteKey(key string) string {
	const keep = 64
	if len(key) <= keep {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:keep]) + fmt.Sprintf("... (%d bytes)", len(key))
}

// QuoteKeys quotes keys for an error text: one key, or "one of the keys"
// and all of them.
func QuoteKeys(keys []string) string {
	if len(keys) == 1 {
		return QuoteKey(keys[0])
	}
	return "one of the keys " + QuoteAll(keys)
}

// QuoteAll quotes each of keys, joined by commas.
func QuoteAll(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = QuoteKey(k)
	}
	return strings.Join(quoted, ", ")
}

// Permanent reports whether err, of a call to Redis, is one that waiting
// cannot cure: a closed client, or an error reply that is not transient
// (NOPERM, WRONGTYPE, an ErrWrongKind...).
func Permanent(err error) bool {
	var r Refusal
	if errors.Is(err, redis.ErrClosed) || errors.As(err, &r) {
		return true
	}
	if !Refused(err) {
		return false
	}
	for _, transient := range []string{"LOADING", "BUSY", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "NOREPLICAS", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, transient) {
			return false
		}
	}
	return true
}

// A Refusal is an error of ours for a reply that Redis gave: the command
// ran, or did not run, and nothing is unknown about it (see Refused).
type Refusal struct{ error }

func (r Refusal) Unwrap() error { return r.error }

// Refused reports whether err is Redis's answer (an error reply, or a
// Refusal): the command's outcome is known, unlike that of a network error.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	var r Refusal
	return errors.As(err, &r) || errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

// IsCtxErr reports whether err is a context's end.
func IsCtxErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// Redirected reports whether err is a Cluster's redirection (MOVED, ASK):
// the node does not serve the key now. go-redis follows it by itself, but
// not for a command sent to one node's client (see the backend's writer).
func Redirected(err error) bool {
	return Moved(err) || redis.HasErrorPrefix(err, "ASK")
}

// Moved reports whether err is MOVED: the key's slot has another master
// (a failover), which the slot map will name once reloaded. (ASK, a slot
// being migrated, changes no map until the migration ends: a write
// WithReplicas then fails; see docs/fault-tolerance.md.)
func Moved(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED")
}

// Refuse marks err as Redis's answer (see Refusal).
func Refuse(err error) error { return Refusal{err} }

// ErrBackground marks the error of a release that goes on in the
// background (see GoesOn).
var ErrBackground = errors.New("goes on in the background")

// GoesOn is the error of a release of keys that goes on in the background:
// its caller's ctx ended (err) first.
func GoesOn(keys []string, err error) error {
	return fmt.Errorf("redislock: release %s %w: %w", QuoteAll(keys), ErrBackground, err)
}

// IsBackground reports whether err says that a release goes on in the
// background.
func IsBackground(err error) bool { return errors.Is(err, ErrBackground) }
