package redislock

import "github.com/seed5e0b76d9/redislock/internal/scripts"

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
	ErrNotObtained = scripts.ErrNotObtained

	// ErrNotHeld is returned by Release, Refresh and TTL when the lock is no
	// longer held by this Lock: it was released, its lease expired, or another
	// holder owns the key now. Nothing was changed in Redis. Work done under
	// the lock since its last successful Refresh may have overlapped with
	// another holder: check what it wrote (fencing tokens, WithFencing, make
	// that safe), and alert if it happens often (leases too short for the
	// work, or pauses longer than the lease).
	ErrNotHeld = scripts.ErrNotHeld

	// ErrInvalidKey is returned when the lock key is empty, or names a key
	// that the library keeps beside locks (it contains "}:rl1:": see
	// docs/how-it-works.md). Nothing is sent to Redis.
	ErrInvalidKey = scripts.ErrInvalidKey

	// ErrInvalidTTL is returned when a lease ttl is shorter than one
	// millisecond (zero, negative or sub-millisecond): Redis expiries have
	// millisecond resolution and a lock without expiry is never created.
	// A quorum Locker's locks need at least 10 milliseconds (see NewQuorum).
	// Nothing is sent to Redis. An acquisition also returns it when the ttl
	// proved too short for the round trips to Redis: renewed 3 times in a
	// row, less than half of it was left each time the reply came (see
	// Obtain); the lock was given back. Use a longer ttl.
	ErrInvalidTTL = scripts.ErrInvalidTTL

	// ErrInvalidOption is returned when an Option given to New or to a call
	// has an invalid value (a negative wait, a backoff whose bounds are out
	// of order, ...), or is given where it does not apply (a Locker's option
	// given to a call, WithTTL given to Obtain, two modes). The error text names the option. When
	// the option was given to New, every call on that Locker returns it.
	// Nothing is sent to Redis.
	ErrInvalidOption = scripts.ErrInvalidOption

	// ErrNilClient is returned by every call on a Locker made with a nil
	// client. Pass a go-redis v9 client (*redis.Client, *redis.ClusterClient,
	// redis.UniversalClient, ...) to New.
	ErrNilClient = scripts.ErrNilClient

	// ErrNilFunc is returned by WithLock when fn is nil. Nothing is sent to
	// Redis.
	ErrNilFunc = scripts.ErrNilFunc
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
var ErrWrongKind = scripts.ErrWrongKind

// ErrLockLost is the cause (see context.Cause) with which the context of a
// kept lease is cancelled when the lock is lost: a renewal found the key gone
// or owned by another token, or no renewal succeeded before the lease ran out
// (Redis or the network hung). The work done under the lock must stop; it may
// overlap with the next holder's from then on. WithLock's error wraps it too,
// and so does that of an Obtain, TryObtain or WithLock whose ctx carries a
// lost lock of the key (see Lock.Context).
var ErrLockLost = scripts.ErrLockLost

// ErrNotReplicated is returned when fewer replicas than WithReplicas asks
// for acknowledged a lock's write in time: by Obtain, TryObtain and WithLock
// (the lock was released again: nothing is held), and by Refresh (the lease
// was set on the primary only, and is not counted on: Until did not move).
// A renewal of KeepAlive that is not acknowledged counts as failed: it is
// retried, and the lock is reported lost (ErrLockLost) if no renewal is
// acknowledged before the lease runs out. The error says how many replicas
// acknowledged. Check the replicas (INFO replication on the primary), or
// lower n; retrying helps when a replica was only slow.
var ErrNotReplicated = scripts.ErrNotReplicated

// ErrFenceRejected is returned by SetFenced when the resource has already
// been written with a higher fence: a later holder of the lock has taken
// over, and this writer's lease has expired. The write did not happen.
var ErrFenceRejected = scripts.ErrFenceRejected
