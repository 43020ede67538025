package redislock

import (
	"context"
	"time"
)

// Info is what Locker.Inspect found at a lock key.
type Info struct {
	Key     string
	Mode    Mode     // how the key is held; ModeFree when nobody holds it
	Holders []Holder // who holds the key: one for ModeExclusive and ModeForeign
	Permits int      // a semaphore's number of permits (WithPermits); 0 for other modes
	// Fence is the value of the counter the key's fences come from
	// (WithFencing), 0 if none: at least the latest fence issued for the
	// key. The keys of one Redis Cluster hash slot share a counter.
	Fence int64
	// Waiting counts the places in the key's line in Redis. A place is
	// one waiting Obtain, or for exclusive waiters the Obtains of one
	// Locker (process): at least that many wait.
	Waiting int
}

// A Mode is how a key is held, as Inspect reports it. Its string is fit for
// a metric attribute.
type Mode string

// The modes Info reports.
const (
	ModeFree      Mode = ""          // nobody holds the key
	ModeExclusive Mode = "exclusive" // a plain lock, or the writer of a read-write lock
	ModeShared    Mode = "shared"    // the readers of a read-write lock (WithShared)
	ModeSemaphore Mode = "semaphore" // the permits of a semaphore (WithPermits)
	// ModeForeign is a string this library did not write (another
	// library's lock, an operator's manual block): it is held as a lock
	// of another owner, waited for, and never changed. Its one Holder has
	// the string as Token; a negative TTL says it has no expiry and will
	// not be released by itself.
	ModeForeign Mode = "foreign"
	// ModeOther is data of another kind that this library did not write
	// (a list, a hash, a sorted set without a lock's marks, data of
	// another version of the library): no lock can take the key (see
	// ErrWrongKind).
	ModeOther Mode = "other"
)

// A Holder is a holder of a lock key.
type Holder struct {
	Token       string        // the holder's token (see Lock.Token)
	Description string        // who holds it (see WithHolder); "" when none was stored
	TTL         time.Duration // the lease left, as Redis sees it; negative for a key with no expiry (ModeForeign)
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
	if err := checkKey(key); err != nil {
		return Info{}, err
	}
	info, err := call(ctx, l, func(ctx context.Context) (Info, error) {
		return l.backend.inspect(ctx, key)
	})
	if err != nil {
		return Info{}, failed("inspect", key, err)
	}
	return info, nil
}
