package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Internals the tests of package redislock_test look at.
var (
	AcquireScriptHash = acquireScript.Hash()
	ReleaseScriptHash = releaseScript.Hash()
	RefreshScriptHash = renewScript.Hash()
	TakeScriptHash    = takeScript.Hash()
	DropScriptHash    = dropScript.Hash()
)

// The line's timing (see line.go).
const (
	PlaceLease = placeLease
	MaxPasses  = maxPasses
)

// SideKey is the name of a side key of kind ("line", "places", "gens",
// "holders", "spent:<token>") of the lock on key, without a namespace.
func SideKey(key, kind string) string { return keyspace{}.side(key, key, kind) }

// FenceKey is the fence counter of the lock on key, without a namespace.
func FenceKey(key string) string { return keyspace{}.fence(key) }

// WakeChannel is the channel a Locker's subscription for key listens on.
func WakeChannel(l *Locker, key string) string { return l.wakeFor(key).channel }

// Renew runs an attempt of token that renews its place in key's line (a
// renewal, as the head of a line sends), and reports whether it holds the
// key and whether the token has no place.
func Renew(l *Locker, key, token string) (ours, noPlace bool, err error) {
	res, err := runAttempt(context.Background(), l.client, l.keys, attemptArgs{key: key, token: token, ttl: time.Minute, place: placeLease, renew: true, wake: l.wakeFor(key)})
	return res.ours, res.noPlace, err
}

// LoadScripts loads every script of the package into the Redis of c, so
// that tests that look for a script's SHA1 in what is sent find it (a
// script Redis does not have is sent with EVAL, in full).
func LoadScripts(ctx context.Context, c redis.Scripter) error {
	for _, s := range []*redis.Script{takeScript, dropScript, renewScript, pttlScript, acquireScript, releaseScript, holderRefreshScript, holderPTTLScript, inspectScript, fenceStepScript, fencedSetScript} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}
