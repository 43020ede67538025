package redislock

import (
	"context"
	"time"
)

// Info is what Locker.Inspect found at a lock key.
type Info struct {
	Key     string
	Mode    string   // ModeExclusive, ModeShared, ModeSemaphore, ModeOther, or "" when nobody holds the key
	Holders []Holder // who holds the key: one for ModeExclusive
	Permits int      // a semaphore's number of permits (WithPermits); 0 for other modes
	Fence   int64    // the latest fence issued for the key (WithFencing), 0 if none
	// Waiting counts the places in the key's line in Redis. A place is
	// one waiting Obtain, or for exclusive waiters the Obtains of one
	// Locker (process): at least that many wait.
	Waiting int
}

// The modes Info reports.
const (
	ModeExclusive = "exclusive" // a plain lock, or the writer of a read-write lock
	ModeShared    = "shared"    // the readers of a read-write lock (WithShared)
	ModeSemaphore = "semaphore" // the permits of a semaphore (WithPermits)
	ModeOther     = "other"     // data of another kind (a list, a hash, ...): no lock can take the key
)

// A Holder is a holder of a lock key.
type Holder struct {
	Token       string        // the holder's token (see Lock.Token)
	Description string        // who holds it (see WithHolder); "" when none was stored
	TTL         time.Duration // the lease left, as Redis sees it; negative for a key with no expiry (not this library's lock)
}

// Inspect reports who holds key, with their leases, the latest fence issued
// and how many wait, for a lock of any mode, in one round trip (two when
// Redis does not have the script yet, after a restart or SCRIPT FLUSH: it
// is sent once more in full). It changes nothing. A key that is not a lock
// of this library is reported as far as it can be read: an exclusive
// holder for a string, permits for a sorted set, ModeOther for data of
// another kind (an acquisition of the key fails with Redis's WRONGTYPE
// error). An empty key returns ErrInvalidKey.
func (l *Locker) Inspect(ctx context.Context, key string) (Info, error) {
	if err := l.check(key, time.Millisecond, &l.opts); err != nil {
		return Info{}, err
	}
	info, err := call(ctx, l, func(ctx context.Context) (Info, error) {
		if l.quorum != nil {
			return l.quorum.inspect(ctx, key)
		}
		return runInspect(ctx, l.client, key)
	})
	if err != nil {
		return Info{}, failed("inspect", key, err)
	}
	return info, nil
}
