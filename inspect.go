package redislock

import (
	"time"

	"github.com/seed5e0b76d9/redislock/internal/scripts"
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

// infoOf is what the scripts found at key, as Inspect reports it.
func infoOf(key string, i scripts.Info) Info {
	info := Info{Key: key, Mode: ModeOther, Permits: i.Permits, Fence: i.Fence, Waiting: i.Waiting}
	switch i.Mode {
	case "":
		info.Mode = ModeFree
	case scripts.InfoExclusive:
		info.Mode = ModeExclusive
	case scripts.InfoShared:
		info.Mode = ModeShared
	case scripts.InfoSemaphore:
		info.Mode = ModeSemaphore
	case scripts.InfoForeign:
		info.Mode = ModeForeign
	}
	for _, h := range i.Holders {
		info.Holders = append(info.Holders, Holder(h))
	}
	return info
}
