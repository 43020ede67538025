package redislock

import "strconv"

// The lock family: a key is held exclusively (Obtain, TryObtain, WithLock),
// shared (WithShared: the readers of a read-write lock, whose writer is an
// exclusive holder of the same key), or as one of a semaphore's permits
// (WithPermits). Every holder has its own token, lease, fence and
// lost-lock signal; they wait in the key's one line, and a release hands
// the key to the first in line as far as it fits (see scripts.go).

// A mode is how a lock holds its key: exclusive (the zero mode: a plain
// lock, or the writer of a read-write lock), shared (a reader; WithShared),
// or as one of a semaphore's permits (WithPermits).
type mode struct {
	shared  bool
	permits int
}

func (m mode) exclusive() bool { return !m.shared && m.permits == 0 }

// arg is the mode as scripts take it: "x", "s", or the number of permits.
func (m mode) arg() string {
	switch {
	case m.shared:
		return "s"
	case m.permits > 0:
		return strconv.Itoa(m.permits)
	}
	return "x"
}

// WithShared makes an acquisition shared: the reader of a read-write lock.
// Any number of shared holders may hold a key at once, each with its own
// lease, token and fence; an ordinary (exclusive) holder of the same key is
// the writer, and holds it alone. A writer that waits stops new readers from
// taking the key (they line up behind it), so writers are not starved; when
// the writer releases, the key goes to every reader in line up to the next
// writer. Release, Refresh, TTL and KeepAlive work on a shared lock as on
// any other, for its holder alone: a reader that dies frees its share at
// the end of its own lease. It cannot be used with WithPermits in the same
// call (or New). Given to New, it makes every call of the Locker a
// reader's, unless the call names WithPermits: take the writer's locks with
// another Locker.
func WithShared() Option {
	return func(o *options) {
		if o.modeSet && o.mode.permits > 0 {
			o.invalid(ErrInvalidOption, "WithShared with WithPermits: a key is a read-write lock or a semaphore")
			return
		}
		o.mode, o.modeSet = mode{shared: true}, true
	}
}

// WithPermits makes the key a semaphore of n permits: at most n holders at
// once, each with its own lease, token and fence, renewed and lost-signalled
// like any lock (KeepAlive), and a holder that dies frees its permit at the
// end of its own lease. Waiters get permits in the order they came. Every
// acquisition of a key must name the same n: while a semaphore has holders
// or waiters, an acquisition with another n fails with an error wrapping
// ErrInvalidOption, and changes nothing. The key holds the permits (a Redis
// sorted set), so an ordinary lock on the same key fails with Redis's
// WRONGTYPE error, and so do permits asked for on a key that a lock's
// holders (readers too) or waiters use, and a reader on a semaphore's key.
// n must be at least 1.
func WithPermits(n int) Option {
	return func(o *options) {
		switch {
		case n < 1:
			o.invalid(ErrInvalidOption, "WithPermits(%d): need at least 1 permit", n)
		case o.modeSet && o.mode.shared:
			o.invalid(ErrInvalidOption, "WithPermits with WithShared: a key is a read-write lock or a semaphore")
		default:
			o.mode, o.modeSet = mode{permits: n}, true
		}
	}
}
