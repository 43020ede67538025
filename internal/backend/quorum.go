package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/line"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
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
// The lease clock (see the lease layer's clock) holds for the quorum: a command counts as
// setting the lease only when a majority set it, and then each of those
// nodes keeps the key at least as long as the clock says (the argument of
// the lease clock, node by node, with each node's generations), so until is
// never later than the expiry on a majority of nodes: nobody else can take
// a majority before it.
type Quorum struct {
	env   *lease.Env
	nodes []*scripts.Redis // one per master, for its client and its timeouts
}

// NewQuorum returns the Quorum of clients, one per master, with the
// library's keys under ns; env.Store becomes the Quorum.
func NewQuorum(clients []redis.UniversalClient, ns string, env *lease.Env) *Quorum {
	q := &Quorum{env: env}
	bound := scripts.WithdrawTimeout
	for _, c := range clients {
		r := scripts.NewRedis(c, ns)
		q.nodes = append(q.nodes, r)
		bound = max(bound, r.ReleaseBound())
	}
	env.Store, env.ReleaseBound = q, bound
	return q
}

// majority is how many nodes make a majority.
func (q *Quorum) majority() int { return len(q.nodes)/2 + 1 }

// minQuorumTTL is the shortest lease of a quorum lock: its drift
// allowance (see lease.Drift) must leave room for the round trips.
const minQuorumTTL = 10 * time.Millisecond

// Check refuses a lease shorter than minQuorumTTL, and the options a
// quorum Locker does not support.
func (q *Quorum) Check(r *lease.Request) error {
	switch {
	case r.TTL < minQuorumTTL:
		return fmt.Errorf("%w: a quorum lock's must be at least %v (got %v)", scripts.ErrInvalidTTL, minQuorumTTL, r.TTL)
	case !r.Mode.Exclusive():
		return fmt.Errorf("%w: WithShared and WithPermits are not supported by a quorum Locker", scripts.ErrInvalidOption)
	case r.Replicas.N > 0:
		return fmt.Errorf("%w: WithReplicas is not supported by a quorum Locker (its nodes are masters)", scripts.ErrInvalidOption)
	case r.Set:
		return fmt.Errorf("%w: a set of keys (ObtainMulti) is not supported by a quorum Locker", scripts.ErrInvalidOption)
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
func fanOut[T any](ctx context.Context, q *Quorum, f func(ctx context.Context, n *scripts.Redis) (T, error)) <-chan reply[T] {
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
func finish[T any](q *Quorum, ch <-chan reply[T], got int, late func(reply[T]), done func()) {
	q.env.Background.Go(func() {
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
func gather[T any](ctx context.Context, q *Quorum, ch <-chan reply[T], decide func([]reply[T]) bool) []reply[T] {
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
func (q *Quorum) nodeErrors(errs []error, answered int, err error) error {
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
	hopeless bool  // more than a minority failed for good (see scripts.Permanent): a majority cannot answer again
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
func (q *Quorum) attempt(ctx context.Context, r *lease.Request, h *lease.Hold) attemptOutcome {
	maj, n := q.majority(), len(q.nodes)
	ttl := r.TTL
	begun := func() bool { return h.State() != lease.Held }
	actx, cancel := straggle(ctx, max(ttl/2, time.Millisecond))
	var won bool
	decided := make(chan struct{}) // closed once won is set
	var open atomic.Int32          // nodes whose outcome finishNode has yet to see
	open.Store(int32(n))
	finishNode := func(node *scripts.Redis, res scripts.AttemptResult, err error, late bool) {
		<-decided
		if (res.Ours || err != nil && !scripts.Refused(err)) && (!won || late) {
			q.giveBack(node, h.Keys, h.Token)
		}
		if open.Add(-1) == 0 {
			cancel()
		}
		q.env.Background.End()
	}
	ch := make(chan reply[scripts.AttemptResult], n)
	for i, node := range q.nodes {
		q.env.Background.Begin() // ended by finishNode
		go func() {
			a := scripts.AttemptArgs{Keys: h.Keys, Token: h.Token, Holder: r.Holder, TTL: ttl}
			res, err := scripts.Bounded(actx, node.Timing.Direct, func(ctx context.Context) (scripts.AttemptResult, error) {
				return node.Attempt(ctx, a)
			}, func(res scripts.AttemptResult, err error) { finishNode(node, res, err, begun()) })
			late := begun() // before the reply can count for the lock
			ch <- reply[scripts.AttemptResult]{i, res, err}
			if !scripts.IsAbandoned(err) {
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
	gather(ctx, q, ch, func(got []reply[scripts.AttemptResult]) bool {
		r := got[len(got)-1]
		switch {
		case r.err != nil && scripts.IsCtxErr(r.err) && scripts.Ended(ctx):
			return true // the caller's deadline: that says nothing about the master
		case r.err != nil:
			errs = append(errs, fmt.Errorf("master %d: %w", r.node, r.err))
			if scripts.Permanent(r.err) {
				lost++
			}
		case r.v.Ours:
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
func (q *Quorum) giveBack(node *scripts.Redis, keys []string, token string) {
	q.env.Background.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), node.ReleaseBound())
		defer cancel()
		for {
			_, err := node.Release(ctx, scripts.ReleaseArgs{Keys: keys, Token: token, Spend: node.SpendFor()})
			if err == nil || scripts.Refused(err) || errors.Is(err, redis.ErrClosed) || scripts.Sleep(ctx, nil, lease.RenewRetry) != nil {
				return
			}
		}
	})
}

// Acquire is Node.Acquire for a quorum: it makes attempts, with
// jittered backoff between them (o.wait == 0: one), until one takes the key
// on a majority, ctx ends, or trying again cannot help: more than a
// minority of the masters failed for good (a closed client, an error reply
// that is not transient: see scripts.Permanent), so a majority cannot answer. It
// also returns how many attempts it made.
//
// An attempt that ctx cut short says nothing about Redis: when the wait
// ends, the verdict is that of the last attempt the replies decided
// (contention: ErrNotObtained), or the cut one's when it was the first.
func (q *Quorum) Acquire(ctx context.Context, r *lease.Request) (*lease.Hold, int, error) {
	backoff := r.MinBackoff
	var last error // the last decided attempt's error: nil for contention
	for attempts := 1; ; attempts++ {
		h := q.env.NewQuorumHold(r, scripts.NewToken(), time.Now())
		a := q.attempt(ctx, r, h)
		if a.taken {
			if err := q.claim(ctx, r, h); err != nil {
				return nil, attempts, err
			}
			return h, attempts, nil
		}
		if !a.cut || attempts == 1 {
			last = a.err
		}
		if last != nil && (r.Try || a.hopeless) {
			return nil, attempts, scripts.Failed("acquire", r.Key(), last)
		}
		if r.Try {
			return nil, attempts, line.NotObtained(r.Keys, nil, scripts.LeaseUnknown)
		}
		if scripts.Sleep(ctx, nil, backoff) != nil || ctx.Err() != nil {
			if last != nil {
				return nil, attempts, scripts.WaitFailed(r.Key(), ctx.Err(), last)
			}
			return nil, attempts, line.NotObtained(r.Keys, ctx.Err(), scripts.LeaseUnknown)
		}
		backoff = line.NextBackoff(backoff, r.MinBackoff, r.MaxBackoff)
	}
}

// claim finishes an acquisition that took the key on a majority: it issues
// the fence when fenced (see fence: not by the renewal, which would take
// one from each master's counter), and then makes the lease fit ttl as any
// acquisition's (see lease.Hold.Claim). On failure the key is given back.
func (q *Quorum) claim(ctx context.Context, r *lease.Request, h *lease.Hold) error {
	if r.Fenced {
		fence, err := q.fence(ctx, r.Key())
		if err != nil {
			scripts.Await(ctx, h.GiveBack(), lease.WithdrawWait)
			return scripts.Failed("acquire", r.Key(), err)
		}
		h.SetFences([]int64{fence})
	}
	unfenced := *r
	unfenced.Fenced = false
	return h.Claim(ctx, &unfenced, false)
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
func (q *Quorum) fence(ctx context.Context, key string) (int64, error) {
	maj := q.majority()
	incr := gatherAll(ctx, q, func(ctx context.Context, n *scripts.Redis) (int64, error) {
		return n.FenceStep(ctx, key, 0)
	}, majorityOK[int64](q))
	if len(incr.ok) < maj {
		return 0, fmt.Errorf("issue the fence: %w", q.nodeErrors(incr.errs, incr.answered, ctx.Err()))
	}
	f := slices.Max(incr.ok)
	if count(incr.ok, f) >= maj {
		return f, nil
	}
	raise := gatherAll(ctx, q, func(ctx context.Context, n *scripts.Redis) (int64, error) {
		return n.FenceStep(ctx, key, f)
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
func gatherAll[T any](ctx context.Context, q *Quorum, f func(ctx context.Context, n *scripts.Redis) (T, error), decided func(results[T]) bool) results[T] {
	ch := fanOut(ctx, q, func(ctx context.Context, n *scripts.Redis) (T, error) {
		return scripts.Bounded(ctx, n.Timing.Direct, func(ctx context.Context) (T, error) { return f(ctx, n) }, nil)
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
func majorityOK[T any](q *Quorum) func(results[T]) bool {
	return func(r results[T]) bool { return len(r.ok) >= q.majority() }
}

// Renew renews each lease of sets on every node, in one pipeline per
// node, and returns a reply per lease once the replies decide it: 1 when a
// majority set the lease, 0 (lost) when so many no longer hold it that a
// majority cannot, 2 when a majority holds it but not a majority set it (a
// later command had run), -1 (failed) otherwise. (A quorum Locker's locks
// take no WithReplicas: see check.)
func (q *Quorum) Renew(ctx context.Context, calls []lease.Set) []lease.Reply {
	maj, n := q.majority(), len(q.nodes)
	sctx, cancel := straggle(ctx, time.Hour)
	ch := fanOut(sctx, q, func(ctx context.Context, node *scripts.Redis) ([]*redis.Cmd, error) {
		return scripts.Bounded(ctx, node.Timing.Direct, func(ctx context.Context) ([]*redis.Cmd, error) {
			run := make([]scripts.Call, len(calls))
			for i, s := range calls {
				run[i] = s.Args.Call(node.Keys)
			}
			cmds, _, err := scripts.Pipeline(ctx, node.Client, run, scripts.Replicas{})
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
				code, _, _, err = scripts.ParseRefresh(r.v[i])
			}
			switch {
			case err != nil:
				errs[i] = append(errs[i], fmt.Errorf("master %d: %w", r.node, err))
			case code == scripts.ReplyOK:
				set[i]++
				held[i]++
			case code == scripts.ReplySuperseded:
				held[i]++
			default:
				lost[i]++
			}
		}
		return decided()
	})
	finish(q, ch, len(got), nil, cancel)
	replies := make([]lease.Reply, len(calls))
	for i, s := range calls {
		switch {
		case set[i] >= maj:
			replies[i] = lease.Reply{Code: scripts.ReplyOK, Fences: make([]int64, 1)}
		case lost[i] > n-maj:
			replies[i] = lease.Reply{Code: scripts.ReplyNotOurs}
		case held[i] >= maj:
			replies[i] = lease.Reply{Code: scripts.ReplySuperseded}
		default:
			replies[i] = lease.Reply{Err: scripts.Failed("renew", s.H.Keys[0], q.nodeErrors(errs[i], len(got), ctx.Err()))}
		}
	}
	return replies
}

// PTTL returns the lease that a majority of nodes still has for h: the
// majority-th longest of their leases; scripts.LeaseNotHeld when so many
// nodes no longer hold it that a majority cannot.
func (q *Quorum) PTTL(ctx context.Context, h *lease.Hold) (time.Duration, error) {
	maj, n := q.majority(), len(q.nodes)
	ch := fanOut(ctx, q, func(ctx context.Context, node *scripts.Redis) (time.Duration, error) {
		return scripts.Bounded(ctx, node.Timing.Direct, func(ctx context.Context) (time.Duration, error) {
			return node.PTTL(ctx, h.Keys, h.Token, scripts.Mode{})
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
		case r.v == scripts.LeaseNotHeld:
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
		return scripts.LeaseNotHeld, nil
	}
	return 0, q.nodeErrors(errs, len(got), ctx.Err())
}

// Release releases h on every node and returns as soon as the replies
// decide (see lease.Store): released when a majority released it (a node
// whose release go-redis may have sent twice, and that answered before
// Until that it did not hold the key, counts as one that did: see
// lease.Hold.Ended); not held when so many did not hold it that a majority
// cannot have released it; an error when neither can be known any more
// (too many failed), or, saying that the releases go on, when ctx ended
// first.
//
// Each node's release goes on after that, in the background (see Shutdown), until
// it is answered or go-redis gives up on it, with a deadline of the node's
// releaseBound: not with ctx, which a client that stops at deadlines
// (ContextTimeoutEnabled) would abandon at the caller's deadline, leaving
// the lock on that node for its lease.
func (q *Quorum) Release(ctx context.Context, h *lease.Hold) error {
	maj, n := q.majority(), len(q.nodes)
	ch := make(chan reply[scripts.ReleaseResult], n)
	for i, node := range q.nodes {
		q.env.Background.Go(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), node.ReleaseBound())
			defer cancel()
			// Spent: the token is spent also on a master it held nothing on,
			// so that a late copy of its attempt takes nothing there.
			res, err := node.Release(rctx, scripts.ReleaseArgs{Keys: h.Keys, Token: h.Token, Spend: node.SpendFor()})
			ch <- reply[scripts.ReleaseResult]{i, res, err}
		})
	}
	var ok, notHeld int
	var errs []error
	gather(ctx, q, ch, func(got []reply[scripts.ReleaseResult]) bool {
		r := got[len(got)-1]
		switch {
		case r.err != nil:
			errs = append(errs, fmt.Errorf("master %d: %w", r.node, r.err))
		case r.v.Released, r.v.Resent && h.MayHaveReleased():
			ok++
		default:
			notHeld++
		}
		left := n - len(got)
		return ok >= maj || notHeld > n-maj || (ok+left < maj && notHeld+left <= n-maj)
	})
	switch {
	case ok >= maj:
		return h.Ended(nil, false, nil)
	case notHeld > n-maj:
		return h.Ended(h.Keys, false, nil)
	}
	err := errors.Join(errs...)
	if answered := ok + notHeld + len(errs); answered < n {
		err = errors.Join(err, fmt.Errorf("%d of %d masters did not answer: %w", n-answered, n, ctx.Err()))
	}
	err = fmt.Errorf("%d of %d masters released the lock and %d did not hold it, too few to decide (a majority is %d): %w", ok, n, notHeld, maj, err)
	if ctx.Err() != nil {
		_ = h.Ended(nil, false, nil) // the releases go on: it is not held any more
		return scripts.GoesOn(h.Keys, err)
	}
	return h.Ended(nil, false, err)
}

// GiveBack is Release for a hold that no caller waits for (see
// lease.Store), bounded by the release bound.
func (q *Quorum) GiveBack(h *lease.Hold) <-chan struct{} {
	done := make(chan struct{})
	q.env.Background.Go(func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), q.env.ReleaseBound)
		defer cancel()
		_ = q.Release(ctx, h)
	})
	return done
}

// Batch returns "": the keeper renews a quorum's leases in one pipeline
// per master.
func (q *Quorum) Batch(*lease.Hold) string { return "" }

// Shutdown returns at once: a quorum has no lines, and its background work
// is its Locker's.
func (q *Quorum) Shutdown(context.Context) error { return nil }

// Inspect is Node.Inspect for a quorum: the holders that a
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
func (q *Quorum) Inspect(ctx context.Context, key string) (scripts.Info, error) {
	maj, n := q.majority(), len(q.nodes)
	read := func(ctx context.Context, node *scripts.Redis) (nodeInfo, error) {
		info, err := node.Inspect(ctx, key)
		return nodeInfo{node, info}, err
	}
	waited := false
	all := gatherAll(ctx, q, read, func(r results[nodeInfo]) bool {
		decided := len(r.ok) >= maj && decidedBy(r.ok, n, maj)
		waited = waited || len(r.ok) >= maj && !decided
		return decided
	})
	if len(all.ok) < maj {
		return scripts.Info{}, q.nodeErrors(all.errs, all.answered, ctx.Err())
	}
	if !decidedBy(all.ok, n, maj) {
		return scripts.Info{}, fmt.Errorf("the masters that answered (%d of %d) disagree on who holds %q, and a majority is %d: %w",
			len(all.ok), n, key, maj, errors.Join(append(all.errs, ctx.Err())...))
	}
	answers := all.ok
	if waited {
		last := len(answers) - 1
		again, err := readAgain(ctx, answers[:last], read)
		if err != nil {
			return scripts.Info{}, fmt.Errorf("the masters disagreed on who holds %q, and reading them again failed: %w", key, err)
		}
		answers = append(again, answers[last])
	}
	return infoOf(answers, maj), nil
}

// A nodeInfo is one master's answer to Inspect.
type nodeInfo struct {
	node *scripts.Redis
	scripts.Info
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
		if a.Other() {
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
func readAgain(ctx context.Context, answers []nodeInfo, read func(context.Context, *scripts.Redis) (nodeInfo, error)) ([]nodeInfo, error) {
	ch := make(chan reply[nodeInfo], len(answers))
	for i, a := range answers {
		go func() {
			v, err := scripts.Bounded(ctx, a.node.Timing.Direct, func(ctx context.Context) (nodeInfo, error) { return read(ctx, a.node) }, nil)
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
func infoOf(answers []nodeInfo, maj int) scripts.Info {
	var info scripts.Info
	held := map[string][]scripts.Holder{}
	modes := map[string]int{}
	for _, a := range answers {
		info.Fence = max(info.Fence, a.Fence)
		m := a.Mode
		if a.Other() {
			m = "other"
		}
		modes[m]++
		for _, h := range a.Holders {
			held[h.Token] = append(held[h.Token], h)
		}
	}
	for _, hs := range held {
		if len(hs) >= maj {
			slices.SortFunc(hs, func(a, b scripts.Holder) int { return cmp.Compare(a.TTL, b.TTL) })
			info.Holders = append(info.Holders, hs[len(hs)-maj]) // the lease a majority still has
		}
	}
	for m, c := range modes { // at most one mode has a majority
		if c >= maj && (len(info.Holders) > 0 || m == "other") {
			info.Mode = m
		}
	}
	return info
}
