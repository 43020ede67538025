package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A backend is where a Locker's locks live, and what is done there: the
// seam between the Locker (options, reentrancy, the lease clock, the
// keeper, hooks: the same for every Locker) and Redis. New's Locker has a
// deployment (one node, a Sentinel's primary, or a Cluster, through one
// client); NewQuorum's has a quorum: a majority of independent masters to
// win, each of them a deployment of its own.
type backend interface {
	// check refuses, before anything is sent, a call that the backend does
	// not support: o its options, ttl its lease.
	check(o *options, ttl time.Duration) error
	// acquire obtains the lock on key for ttl: waiting until ctx ends, or
	// with a single attempt when o.wait == 0. It also returns how many
	// acquire commands it sent.
	acquire(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error)
	// renew sets the leases of calls, all served by one node (see keeper),
	// acknowledged by r's replicas, and returns a reply each (see
	// leaseSet).
	renew(ctx context.Context, calls []refreshArgs, r replicas) []renewReply
	// release releases lk, whose release has begun, bounded by ctx: lost
	// are the keys it did not find held by lk (nil when it released them
	// all), handoffs to how many waiters it handed them. A release that ctx
	// cuts short goes on in the background (see Lock.end), and reports its
	// hand-offs itself.
	release(ctx context.Context, lk *Lock) (lost []string, handoffs int, err error)
	// pttl returns lk's lease left, leaseNotHeld when lk does not hold the key.
	pttl(ctx context.Context, lk *Lock) (time.Duration, error)
	// inspect reports who holds key.
	inspect(ctx context.Context, key string) (Info, error)
}

// A deployment is one Redis deployment, reached through one go-redis
// client: a single node, the primary of a Sentinel setup, or the masters of
// a Cluster (go-redis routes each key to its own). Its Locker waits in line
// for keys held by others (see line.go), and keeps the data described at
// the top of scripts.go; a plain lock is one key. Its acquire is in
// acquire.go.
type deployment struct{ l *Locker }

func (d deployment) check(o *options, _ time.Duration) error {
	l := d.l
	if o.replicas.n > 0 && l.read > 0 && o.replicas.timeout > l.read-waitSlack(l.read) {
		return fmt.Errorf("%w: WithReplicas timeout %v: must leave %v of the client's ReadTimeout (%v): Redis answers a WAIT that timed out up to 100ms late, and go-redis would stop reading first",
			ErrInvalidOption, o.replicas.timeout, waitSlack(l.read), l.read)
	}
	return nil
}

// renew runs renew.lua (renew_shared.lua) for each of calls in one
// pipeline, acknowledged by replicas as r asks.
//
// With replicas on a Cluster whose slot moved (a failover), the renewals the
// old master answered MOVED ran nowhere (go-redis does not follow MOVED for
// one master's client): they are sent once more, when the slot map names
// the new master (see Locker.acked).
func (d deployment) renew(ctx context.Context, calls []refreshArgs, r replicas) []renewReply {
	return d.renewOn(ctx, calls, r, r.n > 0)
}

// renewOn is renew, which sends the renewals answered MOVED again when
// reroute is true.
func (d deployment) renewOn(ctx context.Context, calls []refreshArgs, r replicas, reroute bool) []renewReply {
	l := d.l
	replies := make([]renewReply, len(calls))
	rkey := l.keys.lock(calls[0].key)
	c, err := l.writer(ctx, rkey, r)
	if err != nil {
		for i := range replies {
			replies[i] = renewReply{err: failed("renew", calls[i].key, err)}
		}
		return replies
	}
	run := make([]scriptCall, len(calls))
	for i, a := range calls {
		run[i] = a.call(l.keys)
	}
	cmds, _, acked, err := runPipeline(ctx, c, run, r)
	l.noteErr(err)
	var again []refreshArgs
	var at []int
	for i, cmd := range cmds {
		if reroute && moved(cmd.Err()) {
			again, at = append(again, calls[i]), append(at, i)
			continue
		}
		replies[i] = renewReplyOf(cmd, calls[i].key, r, acked)
	}
	if len(again) > 0 {
		l.noteErr(cmds[at[0]].Err()) // err may be another command's
		l.rerouted(ctx, rkey, c)
		for j, reply := range d.renewOn(ctx, again, r, false) {
			replies[at[j]] = reply
		}
	}
	return replies
}

func (d deployment) pttl(ctx context.Context, lk *Lock) (time.Duration, error) {
	return runPTTL(ctx, d.l.client, lk.redisKeys(), lk.token, lk.mode)
}

func (d deployment) inspect(ctx context.Context, key string) (Info, error) {
	return runInspect(ctx, d.l.client, d.l.keys, key)
}

// renewReplyOf is the reply to a renewal of key that answered cmd, in a
// pipeline that acked replicas acknowledged (r asks for r.n).
func renewReplyOf(cmd *redis.Cmd, key string, r replicas, acked int64) renewReply {
	code, fences, err := parseRefresh(cmd)
	switch {
	case err != nil:
		return renewReply{err: failed("renew", key, err)}
	case code == replyOK && int(acked) < r.n:
		return renewReply{err: failed("renew", key, notReplicated(r, acked, "the renewal does not count"))}
	}
	if code == replyNotOurs && len(fences) > 0 {
		return renewReply{code: code, missing: int(fences[0])}
	}
	return renewReply{code: code, fences: fences}
}

// release releases lk with release.lua, which hands the key to the next
// in line, takes a place of the Locker that nobody waits in any more out of
// line, and marks lk's token spent when a copy of its acquisition may still
// run (see spend.lua). (A plain lock is dropped before it comes to this:
// see Lock.end.) When ctx ends first, the release goes on in the background
// (see detached), and its hand-offs are reported when it is done.
func (d deployment) release(ctx context.Context, lk *Lock) (lost []string, handoffs int, err error) {
	l := d.l
	if placing := l.lines.placing(lk); placing != nil {
		// A waiter of this Locker is between two places in line: let its
		// place reach Redis first (a round trip), so that the key does not
		// go free for others to take meanwhile.
		await(ctx, placing, l.silence())
	}
	ln, withdraw := l.lines.prepareRelease(lk)
	a := releaseArgs{key: lk.key, set: lk.set, token: lk.token, mode: lk.mode, withdraw: withdraw, wake: l.wakeFor(lk.key).channel}
	lk.mu.Lock()
	if lk.resent || lk.firstAttempt.mayRun() {
		a.spend = l.spendFor()
	}
	lk.mu.Unlock()
	run := func(ctx context.Context) (releaseResult, error) {
		res, err := runRelease(ctx, l.client, l.keys, a)
		l.noteErr(err)
		l.lines.releaseDone(l, keysOf(lk.key, lk.set), ln, res, err)
		return res, err
	}
	var res releaseResult
	if ctx.Done() == nil { // cannot end: nothing goes on in the background
		res, err = run(ctx)
	} else {
		l.background.begin()
		res, err = detached(ctx, l.releaseBound(), func(ctx context.Context) (releaseResult, error) {
			defer l.background.end() // it goes on when the caller stops waiting
			return run(ctx)
		}, func(res releaseResult, err error) {
			if err == nil { // the caller stopped waiting: reported when it is done
				l.handedOff(ctx, lk.key, false, res.handoffs)
			}
		})
	}
	if err != nil {
		return nil, 0, err
	}
	keys := keysOf(lk.key, lk.set)
	if !res.released && !(len(res.missing) == len(keys) && lk.releasedBy(false, res.resent)) {
		for _, i := range res.missing {
			lost = append(lost, keys[i])
		}
	}
	return lost, res.handoffs, nil
}
