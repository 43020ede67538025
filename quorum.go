package redislock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A quorum Locker holds each lock on a majority of independent Redis
// masters (NewQuorum): the same token, with the same lease, on at least
// len(nodes)/2+1 of them. Two majorities share a node, and a node holds a
// key for one token at a time, so no two quorum locks of a key are held at
// once, as long as no node forgets a lock it holds (see the restart rule in
// NewQuorum).
//
// Every operation is sent to every node at once and decided as soon as the
// replies allow it, without waiting for the rest:
//
//   - an acquisition holds the lock when a majority of nodes took the key;
//     it has failed when so many did not that a majority cannot, and is
//     then released on every node, also those that did not answer (when
//     their reply comes);
//   - a renewal or Refresh sets the lease when a majority set it, and finds
//     the lock lost when so many no longer hold it that a majority cannot;
//   - a release has released the lock when a majority released it, and
//     found it not held when so many did not hold it that a majority cannot
//     have released it; the releases on the other nodes go on;
//   - TTL is the lease that a majority still has.
//
// The lease clock (see leaseClock) holds for the quorum: a command counts as
// setting the lease only when a majority set it, and then each of those
// nodes keeps the key at least as long as the clock says (the argument of
// leaseClock, node by node, with each node's generations), so until is
// never later than the expiry on a majority of nodes: nobody else can take
// a majority before it.
type quorum struct {
	l          *Locker     // the quorum Locker
	nodes      []*Locker   // one per master, for its client and its timeouts
	background *background // the quorum Locker's, which its nodes share
}

// NewQuorum returns a Locker whose locks are held on a majority of the
// independent Redis masters clients (not replicas of each other, not nodes
// of one Cluster): an odd number, usually 3 or 5 (of n masters a majority
// is n/2+1, so a fourth master adds no tolerance to three). A lock
// survives the loss of a minority of them: with 5 masters, any 2 may be
// down, slow or partitioned away. The Locker has the API and contract of New's, with
// these differences (the details are in docs/fault-tolerance.md):
//
//   - Obtain polls with jittered backoff (WithBackoff) instead of waiting
//     in a line: waiting is not fair, and a release does not hand the key
//     over. WithShared, WithPermits and WithReplicas are refused
//     (ErrInvalidOption), and so are sets of keys (ObtainMulti,
//     TryObtainMulti, WithLockMulti; one key too).
//   - Each operation goes to every master at once and is decided by the
//     fastest majority: an attempt is contention (ErrNotObtained) when a
//     majority answered and fewer than a majority took the key, and a
//     failure (an error joining the masters' errors) only when so many
//     failed that a majority cannot answer. A release is decided by a
//     majority; the other masters' releases go on in the background until
//     each is answered or go-redis gives up on it, and Shutdown waits for
//     them.
//   - WithFencing's fences keep increasing across holders as long as no
//     master forgets its counter (see quorum.fence); a fenced acquisition
//     costs one or two more round trips.
//   - Until allows for the drift of the masters' clocks, as Redlock does:
//     ttl/100 + 2 ms less than the lease that a command set; a ttl below
//     10 ms is ErrInvalidTTL.
//
// The restart rule: a master that loses its data forgets the locks it
// held, and a second majority may form while they are held. Such a master
// must stay away for longer than the longest lease, or run with
// appendonly yes and appendfsync always. Fence counters never expire:
// masters that issue fences need appendfsync always.
//
// A nil client, or no client, is reported by every call (ErrNilClient).
func NewQuorum(clients []redis.UniversalClient, opts ...Option) *Locker {
	o := defaultOptions().apply(opts, false)
	if (len(clients) == 0 || slices.ContainsFunc(clients, isNil)) && o.err == nil {
		o.err = ErrNilClient
	}
	l := newLocker(nil, o)
	q := &quorum{l: l, background: l.background}
	l.backend = q
	for _, c := range clients {
		n := newLocker(c, options{namespace: o.namespace, holder: o.holder})
		n.backend = deployment{n}
		n.background = l.background // Shutdown waits for the masters' clean-up too
		q.nodes = append(q.nodes, n)
	}
	return l
}

// majority is how many nodes make a majority.
func (q *quorum) majority() int { return len(q.nodes)/2 + 1 }

// minQuorumTTL is the shortest lease of a quorum lock: its drift
// allowance (quorumDrift) must leave room for the round trips.
const minQuorumTTL = 10 * time.Millisecond

// quorumDrift is how much earlier than its ttl a quorum lock's lease ends
// on the local clock (see leaseClock.lease), Redlock's allowance: 1% of
// the lease for the masters' clocks, which measure it, running faster than
// this process's; and 2ms for Redis's millisecond resolution (the scripts
// read Redis's clock cut to the millisecond, and Redis expires keys by a
// millisecond clock).
//
// The lease clock's invariant (until never later than the expiry on a
// majority) holds with it: leaseClock's argument, node by node, only uses
// that a command sent at S that sets a lease of ttl, and that a node runs
// at E >= S, leaves the key there until at least E + ttl on the local
// clock. With the masters' clocks running at most 1% fast, and their
// millisecond resolution costing at most 2ms, it leaves the key there
// until at least E + ttl - quorumDrift(ttl) instead: the argument goes
// through with every lease of ttl counted as ttl - quorumDrift(ttl), which
// is what the clock counts. That length grows with ttl (0.99 ttl - 2ms),
// so comparing leases by their ttl (as the clock's pruning does) still
// compares their lengths.
func quorumDrift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// newQuorumLock returns the lock on key held by token since a command
// sent at start set its lease to ttl on a majority: its lease clock allows
// for drift.
func newQuorumLock(l *Locker, key, token string, ttl time.Duration, start time.Time) *Lock {
	lk := newLock(l, key, token, lockMode{}, 0, ttl, start)
	lk.clock.drift = true
	lk.clock.until = start.Add(lk.clock.lease(ttl))
	return lk
}

// check refuses a lease shorter than minQuorumTTL, and the options a
// quorum Locker does not support.
func (q *quorum) check(o *options, ttl time.Duration) error {
	switch {
	case ttl < minQuorumTTL:
		return fmt.Errorf("%w: a quorum lock's must be at least %v (got %v)", ErrInvalidTTL, minQuorumTTL, ttl)
	case !o.mode.exclusive():
		return fmt.Errorf("%w: WithShared and WithPermits are not supported by a quorum Locker", ErrInvalidOption)
	case o.replicas.n > 0:
		return fmt.Errorf("%w: WithReplicas is not supported by a quorum Locker (its nodes are masters)", ErrInvalidOption)
	case o.multi:
		return fmt.Errorf("%w: a set of keys (ObtainMulti) is not supported by a quorum Locker", ErrInvalidOption)
	}
	return nil
}

// A reply is one node's answer to an operation sent to every node.
type reply[T any] struct {
	node int
	v    T
	err  error
}

// fanOut runs f on every node at once, with ctx, and returns a channel that
// receives each node's reply; it has room for all of them, so the calls
// never wait for a reader.
func fanOut[T any](ctx context.Context, q *quorum, f func(ctx context.Context, n *Locker) (T, error)) <-chan reply[T] {
	ch := make(chan reply[T], len(q.nodes))
	for i, n := range q.nodes {
		go func() {
			v, err := f(ctx, n)
			ch <- reply[T]{i, v, err}
		}()
	}
	return ch
}

// straggle returns the context for calls whose replies are wanted after
// the operation is decided (so that a lock is taken and renewed on every
// master that can, not only on the first majority): it is not cancelled
// with ctx, and ends at ctx's deadline or after d, whichever comes first.
// Cancel it once every call has ended (see finish).
func straggle(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// finish receives, in the background, the replies of ch that had not come
// (got of len(q.nodes) had), handing each to late (nil: none), and then
// calls done.
func finish[T any](q *quorum, ch <-chan reply[T], got int, late func(reply[T]), done func()) {
	q.background.run(func() {
		for range len(q.nodes) - got {
			r := <-ch
			if late != nil {
				late(r)
			}
		}
		done()
	})
}

// gather receives replies from ch until decide says the outcome is known,
// every node replied, or ctx ends. It returns the replies received.
func gather[T any](ctx context.Context, q *quorum, ch <-chan reply[T], decide func([]reply[T]) bool) []reply[T] {
	var got []reply[T]
	for len(got) < len(q.nodes) {
		select {
		case r := <-ch:
			got = append(got, r)
			if decide(got) {
				return got
			}
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// nodeErrors joins the errors of replies, each naming its node, and err
// (ctx's end, when the replies were cut short).
func (q *quorum) nodeErrors(errs []error, answered int, err error) error {
	if answered < len(q.nodes) && err != nil {
		errs = append(errs, fmt.Errorf("%d of %d masters did not answer: %w", len(q.nodes)-answered, len(q.nodes), err))
	}
	return fmt.Errorf("fewer than a majority (%d of %d) of the masters answered without an error: %w", q.majority(), len(q.nodes), errors.Join(errs...))
}

// An attemptOutcome is what one attempt found.
type attemptOutcome struct {
	taken    bool  // a majority took the key
	err      error // nil when a majority answered (taken, or contention); else it joins the masters' errors
	cut      bool  // ctx ended before the replies decided
	hopeless bool  // more than a minority failed for good (see permanent): a majority cannot answer again
}

// attempt makes one acquisition of lk's key, for its token and lease.
//
// It is decided as soon as the replies allow, and not before: taken when a
// majority took the key; contention (err == nil) when a majority answered
// and too few of them took it for a majority to; a failure when so many
// failed that a majority cannot answer. While a majority could still
// answer, or still take the key, it waits. When ctx ends first, err also
// names the masters that did not answer.
//
// Each node's call goes on after that, for at most ttl/2 (see straggle),
// and its outcome is dealt with, in the background (see Shutdown), once
// the attempt is decided and the outcome known (by bounded's late callback
// for a call abandoned at the deadline): a node that took the key, or may have (its outcome is
// unknown), gives it back when the attempt failed; and when it succeeded,
// if lk's release had begun when the node's outcome came in (late): that
// release may have run on the node before the attempt did, which would
// leave the key there for its lease. A node whose success came in before
// the release began needs nothing: the release was sent after the reply
// came, so it runs there after the attempt did. (Checking when the outcome
// is dealt with instead, after the decision, would give back the key on the
// nodes of the very majority that the release is about to count.)
func (q *quorum) attempt(ctx context.Context, lk *Lock) attemptOutcome {
	maj, n := q.majority(), len(q.nodes)
	ttl := lk.clock.ttl
	actx, cancel := straggle(ctx, max(ttl/2, time.Millisecond))
	var won bool
	decided := make(chan struct{}) // closed once won is set
	var open atomic.Int32          // nodes whose outcome finishNode has yet to see
	open.Store(int32(n))
	finishNode := func(node *Locker, res attemptResult, err error, late bool) {
		<-decided
		if (res.ours || err != nil && !refused(err)) && (!won || late) {
			q.giveBack(node, lk.key, lk.token)
		}
		if open.Add(-1) == 0 {
			cancel()
		}
		q.background.end()
	}
	ch := make(chan reply[attemptResult], n)
	for i, node := range q.nodes {
		q.background.begin() // ended by settleNode
		go func() {
			a := attemptArgs{key: lk.key, token: lk.token, holder: lk.locker.opts.holder, ttl: ttl}
			res, err := bounded(actx, node.direct, func(ctx context.Context) (attemptResult, error) {
				return runAttempt(ctx, node.client, node.keys, a)
			}, func(res attemptResult, err error) { finishNode(node, res, err, releaseBegun(lk)) })
			late := releaseBegun(lk) // before the reply can count for the lock
			ch <- reply[attemptResult]{i, res, err}
			if !isAbandoned(err) {
				finishNode(node, res, err, late)
			}
		}()
	}

	var ours, other, lost int // lost: failed for good
	var errs []error
	done := func() bool {
		answered, failed := ours+other, len(errs)
		return ours >= maj || failed > n-maj || (answered >= maj && other+failed > n-maj)
	}
	gather(ctx, q, ch, func(got []reply[attemptResult]) bool {
		r := got[len(got)-1]
		switch {
		case r.err != nil && isCtxErr(r.err) && ended(ctx):
			return true // the caller's deadline: that says nothing about the master
		case r.err != nil:
			errs = append(errs, fmt.Errorf("master %d: %w", r.node, r.err))
			if permanent(r.err) {
				lost++
			}
		case r.v.ours:
			ours++
		default:
			other++
		}
		return done()
	})
	won = ours >= maj
	close(decided)

	out := attemptOutcome{taken: won, cut: !done(), hopeless: lost > n-maj}
	if ours+other < maj {
		cause := ctx.Err()
		if out.cut && cause == nil {
			cause = context.DeadlineExceeded // its timer has yet to fire
		}
		out.err = q.nodeErrors(errs, ours+other+len(errs), cause)
	}
	return out
}

// giveBack releases key on node if token holds it there, and marks the
// token spent there, in the background: the attempt of token on node may
// have run, or may run later (a late copy), and takes nothing after that.
// It tries again until it reaches the master (or its client is closed),
// for as long as go-redis may take with a command: a master that was
// frozen when the attempt was given up runs the attempt when it thaws, and
// must see the give-back too.
func (q *quorum) giveBack(node *Locker, key, token string) {
	q.background.run(func() {
		ctx, cancel := context.WithTimeout(context.Background(), node.releaseBound())
		defer cancel()
		for {
			_, err := runRelease(ctx, node.client, node.keys, releaseArgs{key: key, token: token, spend: node.spendFor()})
			if err == nil || refused(err) || errors.Is(err, redis.ErrClosed) || sleep(ctx, nil, renewRetry) != nil {
				return
			}
		}
	})
}

// acquire is Locker.acquire for a quorum Locker: it makes attempts, with
// jittered backoff between them (o.wait == 0: one), until one takes the key
// on a majority, ctx ends, or trying again cannot help: more than a
// minority of the masters failed for good (a closed client, an error reply
// that is not transient: see permanent), so a majority cannot answer. It
// also returns how many attempts it made.
//
// An attempt that ctx cut short says nothing about Redis: when the wait
// ends, the verdict is that of the last attempt the replies decided
// (contention: ErrNotObtained), or the cut one's when it was the first.
func (q *quorum) acquire(ctx context.Context, key string, ttl time.Duration, o *options) (*Lock, int, error) {
	l := q.l
	backoff := o.minBackoff
	var last error // the last decided attempt's error: nil for contention
	for attempts := 1; ; attempts++ {
		lk := newQuorumLock(l, key, newToken(), ttl, time.Now())
		a := q.attempt(ctx, lk)
		if a.taken {
			if err := q.claim(ctx, lk, ttl, o.fencing); err != nil {
				return nil, attempts, err
			}
			return lk, attempts, nil
		}
		if !a.cut || attempts == 1 {
			last = a.err
		}
		if last != nil && (o.wait == 0 || a.hopeless) {
			return nil, attempts, failed("acquire", key, last)
		}
		if o.wait == 0 {
			return nil, attempts, notObtained(quoteKey(key), nil, leaseUnknown*time.Millisecond)
		}
		if sleep(ctx, nil, backoff) != nil || ctx.Err() != nil {
			if last != nil {
				return nil, attempts, waitFailed(key, ctx.Err(), last)
			}
			return nil, attempts, notObtained(quoteKey(key), ctx.Err(), leaseUnknown*time.Millisecond)
		}
		backoff = nextBackoff(backoff, o.minBackoff, o.maxBackoff)
	}
}

// claim finishes an acquisition that took the key on a majority: it issues
// the fence when fenced (see fence: not by the renewal, which would take
// one from each master's counter), and then makes the lease fit ttl as any
// acquisition's (see Locker.claim). On failure the key is given back.
func (q *quorum) claim(ctx context.Context, lk *Lock, ttl time.Duration, fenced bool) error {
	if fenced {
		fence, err := q.fence(ctx, lk.key)
		if err != nil {
			await(ctx, q.l.releaseLater(lk), withdrawWait)
			return failed("acquire", lk.key, err)
		}
		lk.fence = fence
	}
	return q.l.claim(ctx, lk, ttl, false, false)
}

// fence issues the fence of an acquisition that holds key on a majority.
//
// Fences increase across holders: let A hold the key, then B. A's fence fA
// is, when A's acquisition returns, at least the counter on a majority WA of
// the masters (they returned fA, or took it from the second step below),
// and A returns only while it still holds the key on a majority (its lease
// has not run out: claim). B takes the key on a majority, which shares a
// master with A's, where the key was free for B only after A's hold there
// ended: after A's fence was in place. B then increments the counter on
// every master and takes the highest value from a majority, which shares a
// master with WA: that master's counter was at least fA, so B's fence is at
// least fA + 1. Counters only grow (INCR, or raised to a value), so nothing
// a failed or slow acquisition does can lower them, as long as no master
// loses its counter (see NewQuorum).
//
// The first step increments every counter and takes the highest value f
// from the first majority that answers; when fewer than a majority returned
// f, the second step raises the counters to f on a majority.
func (q *quorum) fence(ctx context.Context, key string) (int64, error) {
	maj := q.majority()
	incr := gatherAll(ctx, q, func(ctx context.Context, n *Locker) (int64, error) {
		return runFenceStep(ctx, n.client, n.keys, key, 0)
	}, majorityOK[int64](q))
	if len(incr.ok) < maj {
		return 0, fmt.Errorf("issue the fence: %w", q.nodeErrors(incr.errs, incr.answered, ctx.Err()))
	}
	f := slices.Max(incr.ok)
	if count(incr.ok, f) >= maj {
		return f, nil
	}
	raise := gatherAll(ctx, q, func(ctx context.Context, n *Locker) (int64, error) {
		return runFenceStep(ctx, n.client, n.keys, key, f)
	}, majorityOK[int64](q))
	if len(raise.ok) < maj {
		return 0, fmt.Errorf("issue the fence: %w", q.nodeErrors(raise.errs, raise.answered, ctx.Err()))
	}
	return f, nil
}

// count returns how many of vs equal v.
func count(vs []int64, v int64) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

// results are the replies of an operation sent to every node, until enough
// succeeded.
type results[T any] struct {
	ok       []T     // the successful replies
	errs     []error // the errors, each naming its master
	answered int
}

// gatherAll runs f on every node and gathers the replies until decided
// says they are enough, every node replied, or ctx ends. Each call is
// bounded by ctx.
func gatherAll[T any](ctx context.Context, q *quorum, f func(ctx context.Context, n *Locker) (T, error), decided func(results[T]) bool) results[T] {
	ch := fanOut(ctx, q, func(ctx context.Context, n *Locker) (T, error) {
		return bounded(ctx, n.direct, func(ctx context.Context) (T, error) { return f(ctx, n) }, nil)
	})
	var res results[T]
	gather(ctx, q, ch, func(got []reply[T]) bool {
		r := got[len(got)-1]
		res.answered++
		if r.err != nil {
			res.errs = append(res.errs, fmt.Errorf("master %d: %w", r.node, r.err))
		} else {
			res.ok = append(res.ok, r.v)
		}
		return decided(res)
	})
	return res
}

// majorityOK is gatherAll's decided for an operation that needs a majority
// of successful replies.
func majorityOK[T any](q *quorum) func(results[T]) bool {
	return func(r results[T]) bool { return len(r.ok) >= q.majority() }
}

// renew renews each lease of calls on every node, in one pipeline per
// node, and returns a reply per lease once the replies decide it: 1 when a
// majority set the lease, 0 (lost) when so many no longer hold it that a
// majority cannot, 2 when a majority holds it but not a majority set it (a
// later command had run), -1 (failed) otherwise. (A quorum Locker's locks
// take no WithReplicas: see check.)
func (q *quorum) renew(ctx context.Context, calls []refreshArgs, _ replicas) []renewReply {
	maj, n := q.majority(), len(q.nodes)
	sctx, cancel := straggle(ctx, time.Hour)
	ch := fanOut(sctx, q, func(ctx context.Context, node *Locker) ([]*redis.Cmd, error) {
		return bounded(ctx, node.direct, func(ctx context.Context) ([]*redis.Cmd, error) {
			run := make([]scriptCall, len(calls))
			for i, a := range calls {
				run[i] = a.call(node.keys)
			}
			cmds, _, _, err := runPipeline(ctx, node.client, run, replicas{})
			return cmds, err
		}, nil)
	})
	set, held, lost := make([]int, len(calls)), make([]int, len(calls)), make([]int, len(calls))
	errs := make([][]error, len(calls))
	decided := func() bool {
		for i := range calls {
			if set[i] < maj && lost[i] <= n-maj {
				return false
			}
		}
		return true
	}
	got := gather(ctx, q, ch, func(got []reply[[]*redis.Cmd]) bool {
		r := got[len(got)-1]
		for i := range calls {
			var code int64
			err := r.err
			if err == nil {
				code, _, err = parseRefresh(r.v[i])
			}
			switch {
			case err != nil:
				errs[i] = append(errs[i], fmt.Errorf("master %d: %w", r.node, err))
			case code == replyOK:
				set[i]++
				held[i]++
			case code == replySuperseded:
				held[i]++
			default:
				lost[i]++
			}
		}
		return decided()
	})
	finish(q, ch, len(got), nil, cancel)
	replies := make([]renewReply, len(calls))
	for i, a := range calls {
		switch {
		case set[i] >= maj:
			replies[i] = renewReply{code: replyOK}
		case lost[i] > n-maj:
			replies[i] = renewReply{code: replyNotOurs}
		case held[i] >= maj:
			replies[i] = renewReply{code: replySuperseded}
		default:
			replies[i] = renewReply{err: failed("renew", a.key, q.nodeErrors(errs[i], len(got), ctx.Err()))}
		}
	}
	return replies
}

// pttl returns the lease that a majority of nodes still has for lk: the
// majority-th longest of their leases; leaseNotHeld when so many nodes no
// longer hold it that a majority cannot.
func (q *quorum) pttl(ctx context.Context, lk *Lock) (time.Duration, error) {
	maj, n := q.majority(), len(q.nodes)
	ch := fanOut(ctx, q, func(ctx context.Context, node *Locker) (time.Duration, error) {
		return bounded(ctx, node.direct, func(ctx context.Context) (time.Duration, error) {
			return runPTTL(ctx, node.client, []string{node.keys.lock(lk.key)}, lk.token, lockMode{})
		}, nil)
	})
	var left []time.Duration
	var errs []error
	var lost int
	got := gather(ctx, q, ch, func(got []reply[time.Duration]) bool {
		r := got[len(got)-1]
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("master %d: %w", r.node, r.err))
		case r.v == leaseNotHeld*time.Millisecond:
			lost++
		default:
			left = append(left, r.v)
		}
		return len(left) >= maj || lost > n-maj
	})
	switch {
	case len(left) >= maj:
		slices.Sort(left)
		return left[len(left)-maj], nil
	case lost > n-maj:
		return leaseNotHeld * time.Millisecond, nil
	}
	return 0, q.nodeErrors(errs, len(got), ctx.Err())
}

// release releases lk on every node and returns as soon as the replies
// decide: released when a majority released it (a node whose release
// go-redis sent again, and that answered before Until that it did not hold
// the key, counts as one that did: see Lock.releasedBy); notHeld (false,
// nil) when so many did not hold it that a majority cannot have released
// it; an error when neither can be known any more (too many failed), or,
// marked abandoned (the releases go on), when ctx ended first.
//
// Each node's release goes on after that, in the background (see Shutdown), until
// it is answered or go-redis gives up on it, with a deadline of the node's
// releaseBound: not with ctx, which a client that stops at deadlines
// (ContextTimeoutEnabled) would abandon at the caller's deadline, leaving
// the lock on that node for its lease.
func (q *quorum) release(ctx context.Context, lk *Lock) (lost []string, _ int, err error) {
	maj, n := q.majority(), len(q.nodes)
	ch := make(chan reply[releaseResult], n)
	for i, node := range q.nodes {
		q.background.run(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), node.releaseBound())
			defer cancel()
			// spend: the token is spent also on a master it held nothing on,
			// so that a late copy of its attempt takes nothing there.
			res, err := runRelease(rctx, node.client, node.keys, releaseArgs{key: lk.key, token: lk.token, spend: node.spendFor()})
			ch <- reply[releaseResult]{i, res, err}
		})
	}
	var ok, notHeld int
	var errs []error
	gather(ctx, q, ch, func(got []reply[releaseResult]) bool {
		r := got[len(got)-1]
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("master %d: %w", r.node, r.err))
		case r.v.released, r.v.resent && lk.releasedBy(false, true):
			ok++
		default:
			notHeld++
		}
		left := n - len(got)
		return ok >= maj || notHeld > n-maj || (ok+left < maj && notHeld+left <= n-maj)
	})
	switch {
	case ok >= maj:
		return nil, 0, nil
	case notHeld > n-maj:
		return []string{lk.key}, 0, nil
	}
	err = errors.Join(errs...)
	if answered := ok + notHeld + len(errs); answered < n {
		err = errors.Join(err, fmt.Errorf("%d of %d masters did not answer: %w", n-answered, n, ctx.Err()))
	}
	err = fmt.Errorf("%d of %d masters released the lock and %d did not hold it, too few to decide (a majority is %d): %w", ok, n, notHeld, maj, err)
	if ctx.Err() != nil {
		return nil, 0, abandonedError{err} // the releases go on
	}
	return nil, 0, err
}

// inspect is Locker.Inspect for a quorum Locker: the holders that a
// majority of the masters report, each with the lease a majority of them
// still has; the highest fence any reports. Nobody waits in a line.
//
// It returns as soon as the replies decide every holder (see decidedBy).
// When the answers agree that is the fastest majority. When they differ (a
// write still on its way to one of them, a lock on a minority being given
// back) it waits for more, and ctx's end before they decide is an error,
// not a guess. Answers that came that far apart are not of one moment: a
// token read early on one master and late on another may never have been
// on both at once (a failing acquisition's, given back on the first before
// it reached the second). So the masters that answered before the last
// are read again: a token is on a master for one stretch of time (a spent
// token takes nothing again), so one read there before the last answer and
// one after it show it was there when the last answer was read; and the
// leases are those of the new reads.
func (q *quorum) inspect(ctx context.Context, key string) (Info, error) {
	maj, n := q.majority(), len(q.nodes)
	read := func(ctx context.Context, node *Locker) (nodeInfo, error) {
		info, err := runInspect(ctx, node.client, node.keys, key)
		return nodeInfo{node, info}, err
	}
	waited := false
	all := gatherAll(ctx, q, read, func(r results[nodeInfo]) bool {
		decided := len(r.ok) >= maj && decidedBy(r.ok, n, maj)
		waited = waited || len(r.ok) >= maj && !decided
		return decided
	})
	if len(all.ok) < maj {
		return Info{}, q.nodeErrors(all.errs, all.answered, ctx.Err())
	}
	if !decidedBy(all.ok, n, maj) {
		return Info{}, fmt.Errorf("the masters that answered (%d of %d) disagree on who holds %q, and a majority is %d: %w",
			len(all.ok), n, key, maj, errors.Join(append(all.errs, ctx.Err())...))
	}
	answers := all.ok
	if waited {
		last := len(answers) - 1
		again, err := readAgain(ctx, answers[:last], read)
		if err != nil {
			return Info{}, fmt.Errorf("the masters disagreed on who holds %q, and reading them again failed: %w", key, err)
		}
		answers = append(again, answers[last])
	}
	return infoOf(key, answers, maj), nil
}

// A nodeInfo is one master's answer to Inspect.
type nodeInfo struct {
	node *Locker
	Info
}

// decidedBy says whether answers, of as many masters of n, decide every
// holder: each token they report (and data of another kind) is there on a
// majority (maj), or too few masters are left to make one (a master whose
// call failed counts as one left: it may hold it).
func decidedBy(answers []nodeInfo, n, maj int) bool {
	count, other := map[string]int{}, 0
	for _, a := range answers {
		for _, h := range a.Holders {
			count[h.Token]++
		}
		if a.Mode == ModeOther {
			other++
		}
	}
	open := func(c int) bool { return c < maj && c+n-len(answers) >= maj }
	for _, c := range count {
		if open(c) {
			return false
		}
	}
	return !open(other)
}

// readAgain reads the masters of answers again, at once, and returns their
// new answers, or the errors of those that failed.
func readAgain(ctx context.Context, answers []nodeInfo, read func(context.Context, *Locker) (nodeInfo, error)) ([]nodeInfo, error) {
	ch := make(chan reply[nodeInfo], len(answers))
	for i, a := range answers {
		go func() {
			v, err := bounded(ctx, a.node.direct, func(ctx context.Context) (nodeInfo, error) { return read(ctx, a.node) }, nil)
			ch <- reply[nodeInfo]{i, v, err}
		}()
	}
	again := make([]nodeInfo, 0, len(answers))
	var errs []error
	for range answers {
		if r := <-ch; r.err != nil {
			errs = append(errs, r.err)
		} else {
			again = append(again, r.v)
		}
	}
	return again, errors.Join(errs...)
}

// infoOf is what answers, one per master, say together of key: each token
// a majority (maj) report, with the lease a majority of them still has;
// the mode a majority report, when someone holds the key or it holds data
// of another kind; the highest fence.
func infoOf(key string, answers []nodeInfo, maj int) Info {
	info := Info{Key: key}
	held := map[string][]Holder{}
	modes := map[Mode]int{}
	for _, a := range answers {
		info.Fence = max(info.Fence, a.Fence)
		modes[a.Mode]++
		for _, h := range a.Holders {
			held[h.Token] = append(held[h.Token], h)
		}
	}
	for _, hs := range held {
		if len(hs) >= maj {
			slices.SortFunc(hs, func(a, b Holder) int { return cmp.Compare(a.TTL, b.TTL) })
			info.Holders = append(info.Holders, hs[len(hs)-maj]) // the lease a majority still has
		}
	}
	for m, c := range modes { // at most one mode has a majority
		if c >= maj && (len(info.Holders) > 0 || m == ModeOther) {
			info.Mode = m
		}
	}
	return info
}
