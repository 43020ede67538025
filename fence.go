package redislock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// WithFencing makes acquisitions issue fencing tokens (see Lock.Fence). Give
// it to New to fence every acquisition of the Locker. Fenced acquisitions
// run a Lua script that sets the lock and increments a counter in one atomic
// step, instead of a plain SET.
//
// The counter is one per Redis Cluster hash slot, the key
// "{<slot tag>}:rl1:fence" (under the namespace, if any), shared by the
// lock keys of that slot. It has no expiry and is never reset, so fences
// keep growing across releases and expiries. Deleting it restarts the
// fences at 1: only do that together with the fences stored by the
// protected resources. One key's fences grow, but skip the values that
// the other keys of its slot took (and, rarely, one that an acquisition
// whose reply was lost took: see docs/fencing.md).
//
// Replication is asynchronous: after a failover the new primary may have
// missed the latest increments and issue a fence that was already issued.
// A resource that accepts fences equal to the highest it has seen (as
// SetFenced does) may then accept writes of two holders. Where that matters,
// run Redis with persistence and without automatic failover, or let the
// resource reject equal fences.
func WithFencing() Option {
	return func(o *options) { o.fencing = true }
}

// SetFenced writes value to the resource at key if fence is at least the
// highest fence the resource has been written with, and records fence as
// that highest one. Otherwise it returns an error wrapping ErrFenceRejected
// and writes nothing. The resource is a Redis hash with the fields "value"
// and "fence"; read it with HGET key value. fence must be at least 1 (a Fence
// of a Lock obtained WithFencing); key must not be empty.
//
// Fences are compared in Lua, whose numbers are exact up to 2^53: larger
// fences are rejected with ErrInvalidOption (Lockers issue fences up to
// 2^53-1). A key that holds anything else (a string, a list, a hash with
// other fields, or whose fence is not an integer, ...) is left as it is:
// the error wraps ErrWrongKind.
//
// SetFenced uses client directly: the resource may live on another Redis
// than the locks.
func SetFenced(ctx context.Context, client redis.UniversalClient, key, value string, fence int64) error {
	switch {
	case isNil(client):
		return ErrNilClient
	case key == "":
		return fmt.Errorf("%w: must be a non-empty string", ErrInvalidKey)
	case fence < 1 || fence > maxFence:
		return fmt.Errorf("%w: fence %d: obtain the lock WithFencing and pass Lock.Fence() (of a set, Lock.FenceOf(key))", ErrInvalidOption, fence)
	}
	type result struct {
		ok   bool
		seen int64
	}
	res, err := scripts.Bounded(ctx, scripts.TimingOf(client).Direct, func(ctx context.Context) (result, error) {
		ok, seen, err := scripts.FencedSet(ctx, client, key, value, fence)
		return result{ok, seen}, err
	}, nil)
	if err != nil {
		return scripts.Failed("write", key, err)
	}
	if !res.ok {
		return fmt.Errorf("%w (%s: fence %d < %d)", ErrFenceRejected, scripts.QuoteKey(key), fence, res.seen)
	}
	return nil
}

// maxFence is the largest fence SetFenced accepts: Lua numbers are doubles.
const maxFence = 1 << 53
