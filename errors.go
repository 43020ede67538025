package redislock

import (
	"errors"
	"fmt"
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
	// the README on doing a job once).
	ErrNotObtained = errors.New("redislock: lock not obtained")

	// ErrNotHeld is returned by Release, Refresh and TTL when the lock is no
	// longer held by this Lock: it was released, its lease expired, or another
	// holder owns the key now. Nothing was changed in Redis. Work done under
	// the lock since its last successful Refresh may have overlapped with
	// another holder: check what it wrote (fencing tokens, WithFencing, make
	// that safe), and alert if it happens often (leases too short for the
	// work, or pauses longer than the lease).
	ErrNotHeld = errors.New("redislock: lock not held")

	// ErrInvalidKey is returned when the lock key is empty. Nothing is sent to
	// Redis.
	ErrInvalidKey = errors.New("redislock: invalid key: must be a non-empty string")

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
	// has an invalid value (a nil Option, a negative wait, a backoff whose
	// bounds are out of order, ...). The error text names the option. When
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

// failed is the error of an operation on key that Redis did not carry out:
// it could not be reached, or it refused (an error reply), or ctx ended
// first. It says which operation, cuts long keys, and says what a server
// too old for this library answered.
func failed(op, key string, err error) error {
	hint := ""
	if msg := err.Error(); strings.Contains(msg, "unknown command") || strings.Contains(msg, "syntax error") ||
		strings.Contains(msg, "Unknown Redis command") {
		hint = " (redislock needs Redis 7.0 or newer)"
	}
	return fmt.Errorf("redislock: %s %s: %w%s", op, quoteKey(key), err, hint)
}

// quoteKey quotes key for an error text, cut to a readable length.
func quoteKey(key string) string {
	const keep = 64
	if len(key) <= keep {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:keep]) + fmt.Sprintf("... (%d bytes)", len(key))
}

// permanent reports whether err means that trying again will not help: a
// closed client, or an error reply other than those Redis gives while it
// loads, fails over or is busy (WRONGTYPE, NOPERM, a script error, ...).
func permanent(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
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
