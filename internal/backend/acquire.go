package backend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/line"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Acquire takes r's keys: a plain lock with one command when it can (see
// the note at the top of scripts.go), a single attempt when r.Try, and else
// waits in line (see line.Lines.Wait); a set across Cluster slots slot by
// slot (see acquireAcross). It also returns how many acquire commands it
// sent.
func (n *Node) Acquire(ctx context.Context, r *lease.Request) (*lease.Hold, int, error) {
	if n.R.Sharded && len(r.Keys) > 1 {
		if groups := slotGroups(r.Keys); len(groups) > 1 {
			return n.acquireAcross(ctx, r, groups)
		}
	}
	if r.Try {
		return n.try(ctx, r)
	}
	if !r.Plain() || n.Lines.Busy(r.Keys) {
		return n.Lines.Wait(ctx, r, nil)
	}
	h, res, err := n.once(ctx, r, true)
	switch {
	case h != nil:
		return h, 1, nil
	case scripts.IsAbandoned(err):
		return nil, 1, scripts.WaitFailed(r.Key(), ctx.Err(), n.R.LastFailure(errNoAnswer))
	case err != nil && ctx.Err() != nil:
		return nil, 1, scripts.WaitFailed(r.Key(), ctx.Err(), err)
	case err != nil && (scripts.Permanent(err) || errors.Is(err, scripts.ErrNotReplicated) || errors.Is(err, scripts.ErrInvalidTTL)):
		return nil, 1, err // waiting cannot cure it (a ttl too short for this Redis: see lease.Hold.Claim)
	}
	// Held by another owner, not plain, or a failure that waiting may
	// cure (the line tries again after its backoff): the line decides,
	// knowing that Redis answered when it did.
	var blocked *scripts.AttemptResult
	if err == nil && !res.NotPlain {
		blocked = &res
	}
	h, k, err := n.Lines.Wait(ctx, r, blocked)
	return h, k + 1, err
}

// errNoAnswer is the error of an acquisition whose attempt Redis did not
// answer before ctx ended.
var errNoAnswer = errors.New("Redis did not answer")

// try makes TryObtain's single attempt. It takes no place in line, and
// never takes a key while others wait for it: the Locker's own waiters are
// seen here (no command is sent then), those of other processes by the
// scripts. A plain lock is tried with take.lua, and with acquire.lua when
// the key turns out not to be plain. It also returns how many acquire
// commands it sent.
func (n *Node) try(ctx context.Context, r *lease.Request) (*lease.Hold, int, error) {
	if n.Lines.Busy(r.Keys) {
		return nil, 0, fmt.Errorf("%w: %s: this Locker holds it or waits for it", scripts.ErrNotObtained, scripts.QuoteKeys(r.Keys))
	}
	plain := r.Plain()
	h, res, err := n.once(ctx, r, plain)
	k := 1
	if plain && err == nil && h == nil && res.NotPlain {
		h, res, err = n.once(ctx, r, false)
		k = 2
	}
	if err == nil && h == nil {
		err = line.NotObtained(r.Keys, nil, res.PTTL)
	}
	return h, k, err
}

// once sends a single attempt at r's keys (take.lua when plain), which
// takes no place in line, bounded by ctx, and returns the hold when it took
// the keys. When it did not, it returns the attempt's result; when it
// failed, an error saying so. Either way nothing of it is left behind: a
// call abandoned at ctx's end, or whose outcome is unknown, gives the keys
// back if it took them (and the call's late reply too), and a token of
// which go-redis may run a late copy is marked spent, so that the copy
// takes nothing.
func (n *Node) once(ctx context.Context, r *lease.Request, plain bool) (*lease.Hold, scripts.AttemptResult, error) {
	token := r.Token
	if token == "" {
		token = scripts.NewToken()
	}
	a := scripts.AttemptArgs{Keys: r.Keys, Token: token, Holder: r.Holder, TTL: r.TTL, Fenced: r.Fenced, Mode: r.Mode, Plain: plain}
	start := time.Now()
	var res scripts.AttemptResult
	var err error
	if ctx.Done() == nil && r.Replicas.N == 0 { // it can neither be abandoned nor need acknowledging
		res, err = n.R.Attempt(ctx, a)
		n.R.NoteErr(err)
	} else {
		res, err = n.sendOnce(ctx, a, r.Replicas)
	}
	if err == nil {
		n.R.Answered(time.Since(start))
	}
	switch {
	case err == nil && res.Ours:
		h := n.Env.NewHold(r, token, res.Fences, start, r.TTL)
		h.Plain, h.Resent = plain, res.Resent
		if err := h.Claim(ctx, r, false); err != nil {
			return nil, res, err
		}
		return h, res, nil
	case err == nil:
		if res.Resent {
			n.withdrawLater(ctx, &a, true, lease.WithdrawWait) // a first copy may still run
		}
		return nil, res, nil
	case errors.Is(err, scripts.ErrNotReplicated):
		// It took the key: nothing is held once ErrNotReplicated returns.
		err = lease.GivenBack(err, n.withdrawLater(ctx, &a, res.Resent, n.R.ReleaseBound()))
	case !scripts.Refused(err) && !scripts.IsAbandoned(err):
		// The attempt may have run: if it took the key, give it back.
		n.withdrawLater(ctx, &a, true, lease.WithdrawWait)
	}
	return nil, res, scripts.Failed("acquire", r.Key(), err)
}

// sendOnce sends the single attempt a, waited for until ctx ends (see
// scripts.Detached), and acknowledged by rep's replicas (see attemptAcked).
// An attempt abandoned at ctx's end cleans up after itself when its
// outcome comes: it withdraws its token (and marks it spent, when it may
// have a late copy) unless its outcome is sure (a reply, and no late copy)
// and it took nothing.
func (n *Node) sendOnce(ctx context.Context, a scripts.AttemptArgs, rep scripts.Replicas) (scripts.AttemptResult, error) {
	if ctx.Done() == nil { // cannot be abandoned
		res, err := n.attemptAcked(ctx, a, rep)
		n.R.NoteErr(err)
		return res, err
	}
	// The attempt goes on when ctx ends (bounded as a release is), so that
	// its outcome is a reply or a failure, never ctx's end: a call cut
	// short would leave it unknown whether it ran.
	n.Env.Background.Begin() // ended when the attempt's outcome is known
	res, err := scripts.Detached(ctx, n.R.ReleaseBound(), func(ctx context.Context) (scripts.AttemptResult, error) {
		res, err := n.attemptAcked(ctx, a, rep)
		n.R.NoteErr(err)
		return res, err
	}, func(res scripts.AttemptResult, err error) {
		defer n.Env.Background.End()
		if sure := err == nil && !res.Resent; !sure || res.Ours {
			n.withdrawLater(context.Background(), &a, !sure, 0)
		}
	})
	if !scripts.IsAbandoned(err) {
		n.Env.Background.End()
	}
	return res, err
}

// withdrawLater withdraws a's token (see line.Lines.Withdraw) in the
// background: it releases the keys if the token holds them (handing them on
// to the next in line), takes it out of line, and with spend marks it
// spent, so that a late copy of the attempt takes nothing. It ignores the
// outcome: a lease that is left expires by itself. It waits for it at most
// wait, and not past the end of ctx, and reports whether it is done.
func (n *Node) withdrawLater(ctx context.Context, a *scripts.AttemptArgs, spend bool, wait time.Duration) bool {
	done := make(chan struct{})
	n.Env.Background.Go(func() {
		defer close(done)
		n.Lines.Withdraw(a.Keys, a.Token, a.Mode, spend)
	})
	return scripts.Await(ctx, done, wait)
}

// slotGroups returns keys grouped by Redis Cluster hash slot, in the order
// of the slots (the same for every caller: see acquireAcross), each group
// in the order of keys.
func slotGroups(keys []string) [][]string {
	bySlot := map[uint16][]string{}
	for _, key := range keys {
		s := scripts.Slot(scripts.HashPart(key))
		bySlot[s] = append(bySlot[s], key)
	}
	var slots []uint16
	for s := range bySlot {
		slots = append(slots, s)
	}
	slices.Sort(slots)
	groups := make([][]string, len(slots))
	for i, s := range slots {
		groups[i] = bySlot[s]
	}
	return groups
}

// acquireAcross takes a set whose keys are in several Cluster slots: the
// keys of each slot as one set (one script run takes them all), slot after
// slot in the order of the slots, with one token, keeping the leases of
// those it has while it waits for the next. Every set takes the slots in
// the same order and holds none of a later slot while it waits for an
// earlier one, so no cycle of waiters forms (see the root package's
// ObtainMulti). It gives back what it took when it fails or gives up, and
// when a part was lost meanwhile; a place that lapsed (its token is spent)
// starts it again with a new token. It also returns how many acquire
// commands it sent.
func (n *Node) acquireAcross(ctx context.Context, r *lease.Request, groups [][]string) (*lease.Hold, int, error) {
	attempts := 0
	for {
		token := scripts.NewToken()
		h, k, err := n.acquireParts(ctx, r, token, groups)
		attempts += k
		if !errors.Is(err, line.ErrSpent) || ctx.Err() != nil {
			return h, attempts, err
		}
	}
}

// acquireParts is acquireAcross with token.
func (n *Node) acquireParts(ctx context.Context, r *lease.Request, token string, groups [][]string) (*lease.Hold, int, error) {
	var parts []*lease.Hold
	keep, stop := context.WithCancel(context.Background())
	defer stop()
	// giveBack gives back the parts taken, and waits for it (WithdrawWait
	// at most, also past ctx's end), so that a call that returns has given
	// them back, or says that the release goes on.
	giveBack := func(err error) error {
		wctx, deadline, all := context.WithoutCancel(ctx), time.Now().Add(lease.WithdrawWait), true
		for _, p := range parts {
			all = scripts.Await(wctx, p.GiveBack(), time.Until(deadline)) && all
		}
		if !all {
			return fmt.Errorf("%w; the keys it held are released in the background", err)
		}
		return err
	}
	attempts := 0
	for _, g := range groups {
		gr := *r
		gr.Keys, gr.Token = g, token
		p, k, err := n.Acquire(ctx, &gr)
		attempts += k
		if err != nil {
			return nil, attempts, giveBack(err)
		}
		p.MarkPart()
		parts = append(parts, p)
		p.Keep(keep, false)
	}
	stop() // the parts' kept contexts end (context.Canceled)
	h, lost := n.Env.Combine(r, parts)
	if lost != nil {
		return nil, attempts, giveBack(scripts.Failed("acquire", lost.Keys[0], fmt.Errorf("%w while the set waited for the keys of later slots", lost.Gone(0))))
	}
	if err := h.Claim(ctx, r, false); err != nil {
		return nil, attempts, err
	}
	return h, attempts, nil
}

// Resume holds again the keys of r that token holds (see the root package's
// Locker.Resume): it reads how token holds them, per Cluster slot, and
// claims them (a new lease of r.TTL, and new fences), so that the hold is
// this process's from then on. ErrNotHeld, naming the key, when token does
// not hold one of them.
func (n *Node) Resume(ctx context.Context, r *lease.Request, token string) (*lease.Hold, error) {
	groups := [][]string{r.Keys}
	if n.R.Sharded {
		groups = slotGroups(r.Keys)
	}
	sent := time.Now()
	var found scripts.Holding
	for i, g := range groups {
		f, err := scripts.Bounded(ctx, n.R.Timing.Direct, func(ctx context.Context) (scripts.Holding, error) {
			return n.R.Resume(ctx, g, token)
		}, nil)
		switch {
		case err != nil:
			return nil, scripts.Failed("resume", r.Key(), err)
		case f.Missing > 0 || i > 0 && f.Mode != found.Mode:
			return nil, fmt.Errorf("%w: %s is not held by this token", scripts.ErrNotHeld, scripts.QuoteKey(g[max(f.Missing, 1)-1]))
		case i == 0 || f.Left < found.Left:
			f.Gen = max(f.Gen, found.Gen)
			found = f
		default:
			found.Gen = max(found.Gen, f.Gen)
		}
	}
	h := n.Env.ResumedHold(r, token, found, sent)
	h.Parts = groups
	return h, h.Take(ctx, r.TTL, true)
}
