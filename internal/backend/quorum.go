package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/line"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A Quorum holds each lock on a majority of independent Redis masters
// (NewQuorum): the same token, with the same lease, on at least
// len(nodes)/2+1 of them. Two majorities share a master, and a master
// holds a key for one token at a time, so no two quorum locks of a key are
// held at once, as long as no master forgets a lock it holds (see the
// restart rule in NewQuorum).
//
// Every operation is sent to every master at once (see ask) and decided as
// soon as the replies allow, without waiting for the rest; each method
// states its rule. The lease clock (see the lease layer's clock) holds for
// the quorum: a command counts as setting the lease only when a majority
// set it, and each of those masters keeps the key at least as long as the
// clock says (the clock's argument, master by master, with each one's
// generations), so until is never later than the expiry on a majority:
// nobody else can take a majority before it.
type Quorum struct {
	env   *lease.Env
	nodes []*scripts.Redis // one per master, for its client and its timeouts
	all   []int            // every master's index: 0, 1, ...
}

// NewQuorum returns the Quorum of clients, one per master, with the
// library's keys under ns; env.Store becomes the Quorum.
func NewQuorum(clients []redis.UniversalClient, ns string, env *lease.Env) *Quorum {
	q := &Quorum{env: env}
	env.Store, env.ReleaseBound = q, scripts.WithdrawTimeout
	for i, c := range clients {
		q.nodes, q.all = append(q.nodes, scripts.NewRedis(c, ns)), append(q.all, i)
		env.ReleaseBound = max(env.ReleaseBound, q.nodes[i].ReleaseBound())
	}
	return q
}

// majority is how many masters make a majority. enough reports whether c
// masters make one; blocks, whether c masters are so many that the others
// cannot. Each decision rule below is said with them.
func (q *Quorum) majority() int     { return len(q.nodes)/2 + 1 }
func (q *Quorum) enough(c int) bool { return c >= q.majority() }
func (q *Quorum) blocks(c int) bool { return c > len(q.nodes)-q.majority() }

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

// A reply is one master's answer to a call of ask.
type reply[T any] struct {
	node int // the master's index
	v    T
	err  error
}

// A tally is the replies to an operation so far: the values of those that
// said yes (who: their masters), how many said no, and the errors of the
// others, each naming its master.
type tally[T any] struct {
	ok   []T
	who  []int
	no   int
	errs []error
}

// add counts r: its error, or else yes (keeping its value) or no.
func (t *tally[T]) add(r reply[T], yes bool) {
	switch {
	case r.err != nil:
		t.errs = append(t.errs, fmt.Errorf("master %d: %w", r.node, r.err))
	case yes:
		t.ok, t.who = append(t.ok, r.v), append(t.who, r.node)
	default:
		t.no++
	}
}

// joined is t's errors, joined with cause, ctx's end, when it cut the
// replies short; failure, the error of an operation that fewer than a
// majority answered without an error.
func (t *tally[T]) joined(q *Quorum, cause error) error {
	if answered := len(t.ok) + t.no + len(t.errs); answered < len(q.nodes) && cause != nil {
		return errors.Join(append(t.errs, fmt.Errorf("%d of %d masters did not answer: %w", len(q.nodes)-answered, len(q.nodes), cause))...)
	}
	return errors.Join(t.errs...)
}

func (t *tally[T]) failure(q *Quorum, cause error) error {
	return fmt.Errorf("fewer than a majority (%d of %d) of the masters answered without an error: %w", q.majority(), len(q.nodes), t.joined(q, cause))
}

// ask runs call on each of masters at once, each in a goroutine of its own,
// and hands each reply, as it comes, to count, which adds it to the tally
// (see tally.add) and reports whether the replies decide the operation. It
// returns the tally once they do, every master replied, or ctx ends. The
// calls that had not replied go on, each until its own context ends (the
// channel has room for every reply: none waits for a reader); when after
// is not nil, it runs once they all replied, as background work (see
// Shutdown).
func ask[T any](ctx context.Context, q *Quorum, masters []int, call func(*scripts.Redis) (T, error), count func(*tally[T], reply[T]) bool, after func()) *tally[T] {
	ch := make(chan reply[T], len(masters))
	for _, m := range masters {
		go func() {
			v, err := call(q.nodes[m])
			ch <- reply[T]{m, v, err}
		}()
	}
	t, got := &tally[T]{}, 0
	for decided := false; !decided && got < len(masters); {
		select {
		case r := <-ch:
			got++
			decided = count(t, r)
		case <-ctx.Done():
			decided = true
		}
	}
	if after != nil {
		q.env.Background.Go(func() {
			for range len(masters) - got {
				<-ch
			}
			after()
		})
	}
	return t
}

// bounded is f bounded by ctx (see scripts.Bounded), as a call for ask.
func bounded[T any](ctx context.Context, f func(context.Context, *scripts.Redis) (T, error)) func(*scripts.Redis) (T, error) {
	return func(n *scripts.Redis) (T, error) {
		return scripts.Bounded(ctx, n.Timing.Direct, func(ctx context.Context) (T, error) { return f(ctx, n) }, nil)
	}
}

// straggle returns the context for calls whose replies are wanted after
// the operation is decided (so that a lock is taken and renewed on every
// master that can, not only on the first majority): it is not cancelled
// with ctx, and ends at ctx's deadline or after d, whichever comes first.
// Cancel it once every call has ended (ask's after).
func straggle(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// attempt makes one acquisition of h's key, for its token and lease.
//
// It is decided as soon as the replies allow, and not before: taken when a
// majority took the key; contention (err == nil) when a majority answered
// and too few of them took it for a majority to; a failure (err joins the
// masters' errors) when so many failed that a majority cannot answer.
// While a majority could still answer, or still take the key, it waits;
// cut reports that ctx ended first (err then also names the masters that
// did not answer). hopeless reports that more than a minority failed for
// good (see scripts.Permanent): a majority cannot answer again.
//
// Each master's call goes on after that, for at most ttl/2 (see straggle),
// and its outcome is settled in the background (see Shutdown) once the
// attempt is decided and the outcome known (by scripts.Bounded's late callback for
// a call abandoned at the deadline): a master that took the key, or may
// have (its outcome is unknown), gives it back when the attempt failed;
// and when it succeeded, if h's release had begun when that master's
// outcome came in (late): that release may have run there before the
// attempt did, which would leave the key there for its lease. A master
// whose success came in before the release began needs nothing: the
// release was sent after the reply came, so it runs there after the
// attempt did. (Checking when the outcome is settled instead, after the
// decision, would give back the key on the masters of the very majority
// that the release is about to count.)
func (q *Quorum) attempt(ctx context.Context, r *lease.Request, h *lease.Hold) (taken, cut, hopeless bool, err error) {
	actx, cancel := straggle(ctx, max(r.TTL/2, time.Millisecond))
	begun := func() bool { return h.State() != lease.Held }
	decided := make(chan struct{}) // closed once taken is set
	settle := func(node *scripts.Redis, res scripts.AttemptResult, err error, late bool) {
		defer q.env.Background.End()
		<-decided
		if (res.Ours || err != nil && !scripts.Refused(err)) && (!taken || late) {
			q.giveBack(node, h.Keys, h.Token)
		}
	}
	for range q.nodes {
		q.env.Background.Begin() // each ended by settle
	}
	lost := 0 // failed for good
	done := func(t *tally[scripts.AttemptResult]) bool {
		return q.enough(len(t.ok)) || q.blocks(len(t.errs)) || q.enough(len(t.ok)+t.no) && q.blocks(t.no+len(t.errs))
	}
	t := ask(ctx, q, q.all, func(node *scripts.Redis) (scripts.AttemptResult, error) {
		res, err := scripts.Bounded(actx, node.Timing.Direct, func(ctx context.Context) (scripts.AttemptResult, error) {
			return node.Attempt(ctx, scripts.AttemptArgs{Keys: h.Keys, Token: h.Token, Holder: r.Holder, TTL: r.TTL})
		}, func(res scripts.AttemptResult, err error) { settle(node, res, err, begun()) })
		if !scripts.IsAbandoned(err) {
			go settle(node, res, err, begun()) // begun: before the reply can count for the lock
		}
		return res, err
	}, func(t *tally[scripts.AttemptResult], r reply[scripts.AttemptResult]) bool {
		if r.err != nil && scripts.IsCtxErr(r.err) && scripts.Ended(ctx) {
			return true // the caller's deadline: that says nothing about the master
		}
		if t.add(r, r.v.Ours); r.err != nil && scripts.Permanent(r.err) {
			lost++
		}
		return done(t)
	}, cancel)
	taken = q.enough(len(t.ok))
	close(decided)
	cut, hopeless = !done(t), q.blocks(lost)
	if !q.enough(len(t.ok) + t.no) {
		cause := ctx.Err()
		if cut && cause == nil {
			cause = context.DeadlineExceeded // its timer has yet to fire
		}
		err = t.failure(q, cause)
	}
	return taken, cut, hopeless, err
}

// giveBack releases keys on node if token holds them there, and marks the
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

// Acquire is Node.Acquire for a quorum: it makes attempts, with jittered
// backoff between them (r.Try: one), until one takes the key on a
// majority, ctx ends, or trying again cannot help: more than a minority of
// the masters failed for good (a closed client, an error reply that is not
// transient: see scripts.Permanent), so a majority cannot answer. It also
// returns how many attempts it made.
//
// An attempt that ctx cut short says nothing about Redis: when the wait
// ends, the verdict is that of the last attempt the replies decided
// (contention: ErrNotObtained), or the cut one's when it was the first.
func (q *Quorum) Acquire(ctx context.Context, r *lease.Request) (*lease.Hold, int, error) {
	backoff := r.MinBackoff
	var last error // the last decided attempt's error: nil for contention
	for attempts := 1; ; attempts++ {
		h := q.env.NewQuorumHold(r, scripts.NewToken(), time.Now())
		taken, cut, hopeless, err := q.attempt(ctx, r, h)
		if taken {
			if err := q.claim(ctx, r, h); err != nil {
				return nil, attempts, err
			}
			return h, attempts, nil
		}
		if !cut || attempts == 1 {
			last = err
		}
		switch {
		case last != nil && (r.Try || hopeless):
			return nil, attempts, scripts.Failed("acquire", r.Key(), last)
		case r.Try:
			return nil, attempts, line.NotObtained(r.Keys, nil, scripts.LeaseUnknown)
		case scripts.Sleep(ctx, nil, backoff) == nil && ctx.Err() == nil:
			backoff = line.NextBackoff(backoff, r.MinBackoff, r.MaxBackoff)
		case last != nil:
			return nil, attempts, scripts.WaitFailed(r.Key(), ctx.Err(), last)
		default:
			return nil, attempts, line.NotObtained(r.Keys, ctx.Err(), scripts.LeaseUnknown)
		}
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
	var f int64 // 0: the first step increments; the second raises to f
	for second := false; ; second = true {
		to := f
		step := bounded(ctx, func(ctx context.Context, n *scripts.Redis) (int64, error) { return n.FenceStep(ctx, key, to) })
		t := ask(ctx, q, q.all, step, func(t *tally[int64], r reply[int64]) bool {
			t.add(r, true)
			return q.enough(len(t.ok))
		}, nil)
		switch {
		case !q.enough(len(t.ok)):
			return 0, fmt.Errorf("issue the fence: %w", t.failure(q, ctx.Err()))
		case second:
			return f, nil
		}
		slices.Sort(t.ok)
		if f = t.ok[len(t.ok)-1]; t.ok[len(t.ok)-q.majority()] == f {
			return f, nil // a majority returned f
		}
	}
}

// Renew renews each lease of sets on every master, in one pipeline per
// master, and returns a reply per lease once the replies decide it: 1 when
// a majority set the lease, 0 (lost) when so many no longer hold it that a
// majority cannot, 2 when a majority holds it but not a majority set it (a
// later command had run), -1 (failed) otherwise. The calls go on after
// that, until ctx's deadline (see straggle). (A quorum Locker's locks take
// no WithReplicas: see Check.)
func (q *Quorum) Renew(ctx context.Context, calls []lease.Set) []lease.Reply {
	sctx, cancel := straggle(ctx, time.Hour)
	votes := make([]tally[int64], len(calls)) // per lease: yes (its code) when held, no when not
	set := make([]int, len(calls))            // and how many of the yes set the lease
	ask(ctx, q, q.all, bounded(sctx, func(ctx context.Context, node *scripts.Redis) ([]*redis.Cmd, error) {
		run := make([]scripts.Call, len(calls))
		for i, s := range calls {
			run[i] = s.Args.Call(node.Keys)
		}
		cmds, _, err := scripts.Pipeline(ctx, node.Client, run, scripts.Replicas{})
		return cmds, err
	}), func(_ *tally[[]*redis.Cmd], r reply[[]*redis.Cmd]) bool {
		decided := true
		for i := range calls {
			v := reply[int64]{node: r.node, err: r.err}
			if v.err == nil {
				v.v, _, _, v.err = scripts.ParseRefresh(r.v[i])
			}
			votes[i].add(v, v.v == scripts.ReplyOK || v.v == scripts.ReplySuperseded)
			if v.err == nil && v.v == scripts.ReplyOK {
				set[i]++
			}
			decided = decided && (q.enough(set[i]) || q.blocks(votes[i].no))
		}
		return decided
	}, cancel)
	replies := make([]lease.Reply, len(calls))
	for i, v := range votes {
		switch {
		case q.enough(set[i]):
			replies[i] = lease.Reply{Code: scripts.ReplyOK, Fences: make([]int64, 1)}
		case q.blocks(v.no):
			replies[i] = lease.Reply{Code: scripts.ReplyNotOurs}
		case q.enough(len(v.ok)):
			replies[i] = lease.Reply{Code: scripts.ReplySuperseded}
		default:
			replies[i] = lease.Reply{Err: scripts.Failed("renew", calls[i].H.Keys[0], v.failure(q, ctx.Err()))}
		}
	}
	return replies
}

// PTTL returns the lease that a majority of masters still has for h: the
// majority-th longest of their leases; scripts.LeaseNotHeld when so many
// masters no longer hold it that a majority cannot.
func (q *Quorum) PTTL(ctx context.Context, h *lease.Hold) (time.Duration, error) {
	pttl := bounded(ctx, func(ctx context.Context, n *scripts.Redis) (time.Duration, error) {
		return n.PTTL(ctx, h.Keys, h.Token, scripts.Mode{})
	})
	t := ask(ctx, q, q.all, pttl, func(t *tally[time.Duration], r reply[time.Duration]) bool {
		t.add(r, r.v != scripts.LeaseNotHeld) // yes: its lease left
		return q.enough(len(t.ok)) || q.blocks(t.no)
	}, nil)
	switch {
	case q.enough(len(t.ok)):
		slices.Sort(t.ok)
		return t.ok[len(t.ok)-q.majority()], nil
	case q.blocks(t.no):
		return scripts.LeaseNotHeld, nil
	}
	return 0, t.failure(q, ctx.Err())
}

// Release releases h on every master and returns as soon as the replies
// decide (see lease.Store): released when a majority released it (a master
// whose release go-redis may have sent twice, and that answered before
// Until that it did not hold the key, counts as one that did: see
// lease.Hold.Ended); not held when so many did not hold it that a majority
// cannot have released it; an error when neither can be known any more
// (too many failed), or, saying that the releases go on, when ctx ended
// first.
//
// Each master's release goes on after that, in the background (see
// Shutdown), until it is answered or go-redis gives up on it, with a
// deadline of the master's ReleaseBound: not with ctx, which a client that
// stops at deadlines (ContextTimeoutEnabled) would abandon at the caller's
// deadline, leaving the lock on that master for its lease. The token is
// spent also on a master it held nothing on, so that a late copy of its
// attempt takes nothing there.
func (q *Quorum) Release(ctx context.Context, h *lease.Hold) error {
	for range q.nodes {
		q.env.Background.Begin() // each ended by its call
	}
	t := ask(ctx, q, q.all, func(node *scripts.Redis) (scripts.ReleaseResult, error) {
		defer q.env.Background.End()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), node.ReleaseBound())
		defer cancel()
		return node.Release(rctx, scripts.ReleaseArgs{Keys: h.Keys, Token: h.Token, Spend: node.SpendFor()})
	}, func(t *tally[scripts.ReleaseResult], r reply[scripts.ReleaseResult]) bool {
		t.add(r, r.err == nil && (r.v.Released || r.v.Resent && h.MayHaveReleased())) // no: did not hold it
		left := len(q.nodes) - len(t.ok) - t.no - len(t.errs)
		return q.enough(len(t.ok)) || q.blocks(t.no) || !q.enough(len(t.ok)+left) && !q.blocks(t.no+left)
	}, nil)
	switch {
	case q.enough(len(t.ok)):
		return h.Ended(nil, false, nil)
	case q.blocks(t.no):
		return h.Ended(h.Keys, false, nil)
	}
	err := fmt.Errorf("%d of %d masters released the lock and %d did not hold it, too few to decide (a majority is %d): %w",
		len(t.ok), len(q.nodes), t.no, q.majority(), t.joined(q, ctx.Err()))
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

// Inspect is Node.Inspect for a quorum: the holders that a majority of the
// masters report, each with the lease a majority of them still has; the
// highest fence any reports. Nobody waits in a line.
//
// It returns as soon as the replies decide every holder (see infoOf).
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
	read := bounded(ctx, func(ctx context.Context, node *scripts.Redis) (scripts.Info, error) { return node.Inspect(ctx, key) })
	waited, decided := false, false
	t := ask(ctx, q, q.all, read, func(t *tally[scripts.Info], r reply[scripts.Info]) bool {
		t.add(r, true)
		_, decided = q.infoOf(t.ok)
		waited = waited || q.enough(len(t.ok)) && !decided
		return q.enough(len(t.ok)) && decided
	}, nil)
	answers := t.ok
	switch {
	case !q.enough(len(answers)):
		return scripts.Info{}, t.failure(q, ctx.Err())
	case !decided:
		return scripts.Info{}, fmt.Errorf("the masters that answered (%d of %d) disagree on who holds %q, and a majority is %d: %w",
			len(answers), len(q.nodes), key, q.majority(), errors.Join(append(t.errs, ctx.Err())...))
	case waited:
		last := len(answers) - 1
		again := ask(context.WithoutCancel(ctx), q, t.who[:last], read, func(t *tally[scripts.Info], r reply[scripts.Info]) bool {
			t.add(r, true)
			return false // every reply: the calls end by ctx's end
		}, nil)
		if len(again.errs) > 0 {
			return scripts.Info{}, fmt.Errorf("the masters disagreed on who holds %q, and reading them again failed: %w", key, errors.Join(again.errs...))
		}
		answers = append(again.ok, answers[last])
	}
	info, _ := q.infoOf(answers)
	return info, nil
}

// infoOf is what answers, one per master, say together: each token a
// majority report, with the lease a majority of them still has; the mode a
// majority report, when someone holds the key or it holds data of another
// kind; the highest fence. decided says whether they decide every holder:
// each token they report (and data of another kind) is there on a
// majority, or too few masters are left to make one (a master whose call
// failed counts as one left: it may hold it).
func (q *Quorum) infoOf(answers []scripts.Info) (info scripts.Info, decided bool) {
	held, modes := map[string][]scripts.Holder{}, map[string]int{}
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
	open := func(c int) bool { return !q.enough(c) && q.enough(c+len(q.nodes)-len(answers)) }
	decided = !open(modes["other"])
	for _, hs := range held {
		decided = decided && !open(len(hs))
		if q.enough(len(hs)) {
			slices.SortFunc(hs, func(a, b scripts.Holder) int { return cmp.Compare(a.TTL, b.TTL) })
			info.Holders = append(info.Holders, hs[len(hs)-q.majority()]) // the lease a majority still has
		}
	}
	for m, c := range modes { // at most one mode has a majority
		if q.enough(c) && (len(info.Holders) > 0 || m == "other") {
			info.Mode = m
		}
	}
	return info, decided
}
