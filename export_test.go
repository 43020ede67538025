package redislock

// Internals the tests of package redislock_test look at.
var (
	AcquireScriptHash = acquireScript.Hash()
	ReleaseScriptHash = releaseScript.Hash()
	RefreshScriptHash = refreshScript.Hash()
)

// The line's timing (see line.go).
const (
	PlaceLease = placeLease
	MaxPasses  = maxPasses
)

// SideKey is sideKey, for the tests that look at a key's line in Redis.
func SideKey(key, kind string) string { return sideKey(key, kind) }

// WakeChannel is the channel a Locker's subscription listens on.
func WakeChannel(l *Locker) string { return wakeChannel(l.id) }
