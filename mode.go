package redislock

import (
	"fmt"
	"strconv"
)

// The lock family: a key is held exclusively (Obtain, TryObtain, WithLock),
// shared (WithShared: the readers of a read-write lock, whose writer is an
// exclusive holder of the same key), or as one of a semaphore's permits
// (WithPermits). Every holder has its own token, lease, fence and
// lost-lock signal; they wait in the key's one line, and a release hands
// the key to the first in line as far as it fits (see scripts.go).

// A lockMode is how a lock holds its key: exclusive (the zero mode: a plain
// lock, or the writer of a read-write lock), shared (a reader; WithShared),
// or as one of a semaphore's permits (WithPermits).
type lockMode struct {
	shared  bool
	permits int
}

func (m lockMode) exclusive() bool { return !m.shared && m.permits == 0 }

// String names the mode for an error text.
func (m lockMode) String() string {
	switch {
	case m.shared:
		return "a reader's lock (WithShared)"
	case m.permits > 0:
		return fmt.Sprintf("a permit of a semaphore of %d (WithPermits)", m.permits)
	}
	return "an exclusive lock"
}

// arg is the mode as scripts take it: markExclusive, markShared, or the
// number of permits.
func (m lockMode) arg() string {
	switch {
	case m.shared:
		return markShared
	case m.permits > 0:
		return strconv.Itoa(m.permits)
	}
	return markExclusive
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
	return func(o *options) { o.setMode(lockMode{shared: true}, "WithShared") }
}

// WithExclusive makes an acquisition exclusive: the default mode, a plain
// lock or the writer of a read-write lock. Give it to a call of a Locker
// made with WithShared or WithPermits to take an exclusive lock with it.
func WithExclusive() Option {
	return func(o *options) { o.setMode(lockMode{}, "WithExclusive") }
}

// setMode sets the mode m, named name, unless another came in this apply.
func (o *options) setMode(m lockMode, name string) {
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
		o.setMode(lockMode{permits: n}, "WithPermits")
	}
}
