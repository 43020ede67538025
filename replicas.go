package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is returned when fewer replicas than WithReplicas asks
// for acknowledged a lock's write in time: by Obtain, TryObtain and WithLock
// (the lock was released again: nothing is held), and by Refresh (the lease
// was set on the primary only, and is not counted on: Until did not move).
// A renewal of KeepAlive that is not acknowledged counts as failed: it is
// retried, and the lock is reported lost (ErrLockLost) if no renewal is
// acknowledged before the lease runs out. The error says how many replicas
// acknowledged. Check the replicas (INFO replication on the primary), or
// lower n; retrying helps when a replica was only slow.
var ErrNotReplicated = errors.New("redislock: not acknowledged by enough replicas")

// replicas is what WithReplicas asks for: n replicas to acknowledge each
// write of a lock within timeout. n == 0: none.
type replicas struct {
	n       int
	timeout time.Duration
}

// WithReplicas makes every write that gives or extends a lease wait until n
// replicas of the primary acknowledged it (Redis's WAIT), at most timeout:
// the acquisition (Obtain, TryObtain, WithLock), Refresh, and each renewal
// of KeepAlive. A write not acknowledged in time does not count: an
// acquisition releases the lock and returns ErrNotReplicated, a Refresh
// returns ErrNotReplicated, a renewal is retried (see ErrNotReplicated).
//
// So a lock survives the failover of its primary to any replica that
// acknowledged it: with n equal to the number of replicas, to any replica
// Sentinel or Cluster may promote. WAIT does not make Redis strongly
// consistent: a replica that acknowledged may lose the write when it
// restarts without persistence, and a failover may promote a replica that
// did not acknowledge (when n is lower than the number of replicas). Each
// acquisition costs the time the replicas take to acknowledge (about one
// round trip from the primary to them), and on a contended key one round
// trip more (see docs/fault-tolerance.md). A lock handed over or
// passed to a waiting Obtain is refreshed and acknowledged before Obtain
// returns it.
//
// n = 0 turns replica acknowledgement off (for a single call on a Locker
// that has it). It requires n >= 0 and, for n > 0, 1ms <= timeout <=
// ReadTimeout - max(200ms, ReadTimeout/10) of the client (4.5s with
// go-redis's default ReadTimeout of 5s): the reply to a WAIT that timed
// out comes after timeout, up to 100ms later (Redis notices at its next
// tick), and must come before go-redis stops reading. Not for a quorum Locker (NewQuorum),
// whose nodes are masters.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) {
		if n < 0 || (n > 0 && timeout < time.Millisecond) {
			o.invalid(ErrInvalidOption, "WithReplicas(%d, %v): need n >= 0 and a timeout of at least 1ms", n, timeout)
			return
		}
		o.replicas = replicas{n: n, timeout: timeout.Truncate(time.Millisecond)}
	}
}

// waitSlack is how much of a client's ReadTimeout read a WAIT's timeout
// must leave (see WithReplicas).
func waitSlack(read time.Duration) time.Duration { return max(200*time.Millisecond, read/10) }

// notReplicated is the error of a write that only acked replicas
// acknowledged within r.timeout; the caller names the key (see failed).
func notReplicated(r replicas, acked int64, what string) error {
	return fmt.Errorf("%w: %d of %d replicas acknowledged within %v; %s", ErrNotReplicated, acked, r.n, r.timeout, what)
}

// runPipeline runs calls in one pipeline on c: with EVALSHA, and once more
// with EVAL (which loads the script) for those that Redis answered NOSCRIPT.
// With r.n > 0, a WAIT follows the calls of each pipeline, and acked is the
// fewest replicas that acknowledged a pipeline: a WAIT covers the writes
// its connection made, and the writes made before them (it waits for a
// replication offset). n says, per call, how often go-redis wrote the
// command that ran (see counted).
func runPipeline(ctx context.Context, c redis.Cmdable, calls []scriptCall, r replicas) (cmds []*redis.Cmd, n []sends, acked int64, err error) {
	cmds, n = make([]*redis.Cmd, len(calls)), make([]sends, len(calls))
	acked = -1
	send := func(idx []int, sha bool) error {
		var wait *redis.Cmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				if sha {
					cmds[i] = calls[i].script.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
				} else {
					cmds[i] = calls[i].script.Eval(ctx, p, calls[i].keys, calls[i].args...)
				}
			}
			if r.n > 0 {
				wait = p.Do(ctx, "WAIT", r.n, r.timeout.Milliseconds())
			}
			return nil
		})
		if wait != nil {
			if n, werr := wait.Int64(); werr == nil && (acked < 0 || n < acked) {
				acked = n
			} else if werr != nil {
				acked = 0
			}
		}
		for _, i := range idx {
			n[i] = calls[i].sends()
		}
		return err
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	err = send(all, true)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		err = send(again, false)
	}
	for _, cmd := range cmds {
		if err != nil && cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(err) // never sent (older go-redis leaves it unset when the client is closed)
		}
	}
	return cmds, n, max(acked, 0), err
}

// writer returns the client to send the writes of the lock at Redis key
// rkey to when they are to be acknowledged by replicas: for a
// ClusterClient, the master that serves rkey (a WAIT has no key, and must
// go to that master on the same connection); else the Locker's client.
func (l *Locker) writer(ctx context.Context, rkey string, r replicas) (redis.Cmdable, error) {
	c, ok := l.client.(*redis.ClusterClient)
	if !ok || r.n == 0 {
		return l.client, nil
	}
	return c.MasterForKey(ctx, rkey)
}

// acked runs call, a write of the lock at Redis key rkey, on the
// connection of its writer, followed by a WAIT for r's replicas, and
// returns its reply, how often go-redis wrote it, and how many replicas
// acknowledged it.
//
// On a Cluster whose slot moved (a failover), the master the slot map named
// answers MOVED, which go-redis does not follow for one master's client: the
// write is sent again once the map names the new master (it ran nowhere).
func (l *Locker) acked(ctx context.Context, rkey string, call scriptCall, r replicas) (*redis.Cmd, sends, int64, error) {
	for try := 0; ; try++ {
		c, err := l.writer(ctx, rkey, r)
		if err != nil {
			return nil, 0, 0, err
		}
		cmds, n, acked, err := runPipeline(ctx, c, []scriptCall{call}, r)
		if try == 0 && moved(err) {
			l.noteErr(err)
			l.rerouted(ctx, rkey, c)
			continue
		}
		if err != nil {
			return nil, n[0], 0, err
		}
		return cmds[0], n[0], acked, nil
	}
}

// rerouted waits until the ClusterClient's slot map, reloading in the
// background, names another master for key than old, at most a second and
// not past ctx.
func (l *Locker) rerouted(ctx context.Context, key string, old redis.Cmdable) {
	cc, ok := l.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if n, err := cc.MasterForKey(ctx, key); err == nil && redis.Cmdable(n) != old {
			return
		}
		if sleep(ctx, nil, 20*time.Millisecond) != nil {
			return
		}
	}
}

// attemptAcked runs the acquire attempt a; when it takes the key, r's
// replicas must acknowledge it (else the error wraps ErrNotReplicated, and
// the caller must give the key back).
func (l *Locker) attemptAcked(ctx context.Context, a attemptArgs, r replicas) (attemptResult, error) {
	if r.n == 0 {
		return runAttempt(ctx, l.client, l.keys, a)
	}
	cmd, n, acked, err := l.acked(ctx, l.keys.lock(a.key), a.call(l.keys), r)
	if err != nil {
		return attemptResult{resent: n.resent(), unsent: n.unsent()}, err
	}
	res, err := parseAttempt(a, cmd)
	res.resent = n.resent()
	if err == nil && res.ours && int(acked) < r.n {
		return res, notReplicated(r, acked, "the write does not count")
	}
	return res, err
}
