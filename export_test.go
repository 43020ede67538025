package redislock

import (
	"context"
	"time"
)

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

// Renew runs an attempt of token that renews its place in key's line (a
// renewal, as the head of a line sends), and reports whether it holds the
// key and whether the token has no place.
func Renew(l *Locker, key, token string) (ours, noPlace bool, err error) {
	res, err := runAttempt(context.Background(), l.client, attemptArgs{key: key, token: token, locker: l.id, ttl: time.Minute, mode: mode{}, place: placeLease, renew: true})
	return res.ours, res.noPlace, err
}
