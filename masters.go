package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// masters are the Redis masters that hold a Locker's locks, and what is
// done on them: the seam between the Locker (options, reentrancy, the
// lease clock, the keeper, hooks: the same for every Locker) and where its
// locks live. New's Locker has one deployment (a single node, a Sentinel's
// primary, a Cluster: see deployment); NewQuorum's has a majority of
// independent masters to win (see quorum), each of them a deployment.
type masters interface {
	// check refuses, before anything is sent, a call that these masters do
	// not support: o its options, ttl its lease.
	check(o *options, ttl time.Duration) error
	// acquire obtains the lock on key for ttl: waiting until ctx ends, or
	// with a single attempt when o.wait == 0. It also returns how many
	// acquire commands it sent.
	acquire(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error)
	// renew sets the leases of calls, all served by one node (see keeper),
	// acknowledged by r's replicas, and returns a reply each.
	renew(ctx context.Context, calls []refreshArgs, r replicas) []renewReply
	// release releases lk, whose release has begun, bounded by ctx: held
	// reports whether it held the key, handoffs to how many waiters it
	// handed the key. A release that ctx cuts short goes on in the
	// background (see Lock.end), and reports its hand-offs itself.
	release(ctx context.Context, lk *Lock) (held bool, handoffs int, err error)
	// pttl returns lk's lease left, negative when lk does not hold the key.
	pttl(ctx context.Context, lk *Lock) (time.Duration, error)
	// inspect reports who holds key.
	inspect(ctx context.Context, key string) (Info, error)
}

// A deployment is the masters of one Redis deployment, reached through one
// go-redis client: a single node, the primary of a Sentinel setup, or the
// masters of a Cluster (go-redis routes each key to its own). Its Locker
// waits in line for keys held by others (see line.go), and keeps the data
// described in scripts.go; a plain lock (see plain.go) is one key.
type deployment struct{ l *Locker }

func (d deployment) check(o *options, _ time.Duration) error {
	l := d.l
	if o.replicas.n > 0 && l.read > 0 && o.replicas.timeout > l.read-waitSlack(l.read) {
		return fmt.Errorf("%w: WithReplicas timeout %v: must leave %v of the client's ReadTimeout (%v): Redis answers a WAIT that timed out up to 100ms late, and go-redis would stop reading first",
			ErrInvalidOption, o.replicas.timeout, waitSlack(l.read), l.read)
	}
	return nil
}

// acquire takes a plain lock with one command when it can (see plain.go),
// and else waits in the key's line (see Locker.queue).
func (d deployment) acquire(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error) {
	l := d.l
	if o.wait == 0 {
		return l.try(ctx, key, ttl, o)
	}
	if !o.plain() || l.lines.busy(key) {
		return l.queue(ctx, key, ttl, o, nil)
	}
	lk, res, err := l.once(ctx, l.attemptArgs(key, ttl, o), o)
	switch {
	case lk != nil:
		return lk, 1, nil
	case isAbandoned(err):
		return nil, 1, waitFailed(key, ctx.Err(), l.lastFailure(errNoAnswer))
	case err != nil && ctx.Err() != nil:
		return nil, 1, waitFailed(key, ctx.Err(), err)
	case err != nil && (permanent(err) || errors.Is(err, ErrNotReplicated)):
		return nil, 1, err
	}
	// Held by another owner, not plain, or a failure that waiting may
	// cure (the line tries again after its backoff): the line decides,
	// knowing that Redis answered when it did.
	var held *attemptResult
	if err == nil && !res.notPlain {
		held = &res
	}
	lk, n, err := l.queue(ctx, key, ttl, o, held)
	return lk, n + 1, err
}

func (d deployment) renew(ctx context.Context, calls []refreshArgs, r replicas) []renewReply {
	return d.l.renewAll(ctx, calls, r)
}

func (d deployment) release(ctx context.Context, lk *Lock) (bool, int, error) {
	return d.l.releaseHeld(ctx, lk)
}

func (d deployment) pttl(ctx context.Context, lk *Lock) (time.Duration, error) {
	return runPTTL(ctx, d.l.client, lk.rkey, lk.token, lk.mode)
}

func (d deployment) inspect(ctx context.Context, key string) (Info, error) {
	return runInspect(ctx, d.l.client, d.l.keys, key)
}
