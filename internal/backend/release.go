package backend

import (
	"context"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Release finishes h's release, begun by its caller (see lease.Store): it
// passes h to the Locker's next waiting Obtain when it may (see
// line.Lines.Pass), and else frees h's keys in Redis, handing them to the
// next in line, and records the outcome on h (lease.Hold.Ended).
//
// The work in Redis is one piece, owned by the goroutine that runs it:
// when ctx ends first, Release returns an error saying that it goes on, and
// the release completes by itself, hand-off and events included (a plain
// lock that turns out not to be plain is released by release.lua all the
// same); when Redis fails it after the caller stopped waiting, it is tried
// again until the release bound (see scripts.Redis.ReleaseBound).
func (n *Node) Release(ctx context.Context, h *lease.Hold) error {
	passed, lined := n.Lines.Pass(h)
	if passed {
		n.HandOffs(ctx, h.Keys[0], true, 1)
		return nil
	}
	if ctx.Done() == nil { // cannot end: nothing goes on in the background
		handoffs, err := n.release(ctx, h, lined, func() bool { return false })
		n.HandOffs(ctx, h.Keys[0], false, handoffs)
		return err
	}
	if err := ctx.Err(); err != nil { // a request's, ended: `defer lock.Release(ctx)`
		n.giveBack(context.WithoutCancel(ctx), h, lined)
		return scripts.GoesOn(h.Keys, err)
	}
	n.Env.Background.Begin()
	handoffs, err := scripts.Detached(ctx, n.R.ReleaseBound(), func(dctx context.Context) (int, error) {
		defer n.Env.Background.End() // Shutdown waits for Redis, not for the hook
		return n.release(dctx, h, lined, func() bool { return scripts.Ended(ctx) })
	}, func(handoffs int, _ error) { n.HandOffs(ctx, h.Keys[0], false, handoffs) })
	if scripts.IsAbandoned(err) {
		return scripts.GoesOn(h.Keys, err)
	}
	n.HandOffs(ctx, h.Keys[0], false, handoffs)
	return err
}

// GiveBack is Release for a hold that no caller waits for (see
// lease.Store), bounded by the release bound; its hand-offs are reported
// once it is done.
func (n *Node) GiveBack(h *lease.Hold) <-chan struct{} {
	passed, lined := n.Lines.Pass(h)
	if passed {
		n.HandOffs(context.Background(), h.Keys[0], true, 1)
		done := make(chan struct{})
		close(done)
		return done
	}
	return n.giveBack(context.Background(), h, lined)
}

// giveBack runs h's release in the background (see GiveBack); ctx gives
// the hooks their context's values.
func (n *Node) giveBack(ctx context.Context, h *lease.Hold, lined bool) <-chan struct{} {
	done := make(chan struct{})
	n.Env.Background.Begin()
	go func() {
		rctx, cancel := context.WithTimeout(ctx, n.R.ReleaseBound())
		handoffs, _ := n.release(rctx, h, lined, func() bool { return true })
		cancel()
		n.Env.Background.End()
		close(done)
		n.HandOffs(ctx, h.Keys[0], false, handoffs)
	}()
	return done
}

// release runs h's release in Redis, bounded by ctx, records its outcome on
// h, and returns how many waiters it handed keys to. When Redis fails it
// (it may or may not have run) and nobody waits for it any more (left), it
// tries again, until ctx ends.
func (n *Node) release(ctx context.Context, h *lease.Hold, lined bool, left func() bool) (int, error) {
	for {
		handoffs, lost, resent, err := n.releaseOnce(ctx, h, lined)
		if err == nil || scripts.Refused(err) || scripts.Permanent(err) || !left() || scripts.Sleep(ctx, nil, lease.RenewRetry) != nil {
			return handoffs, h.Ended(lost, resent, err)
		}
	}
}

// releaseOnce frees h's keys once: with drop.lua, one compare and delete,
// while h is a plain lock that nobody waits for; else with release.lua,
// per part, which hands each key to the next in line, takes a place of the
// Locker that nobody waits in any more out of line, and marks h's token
// spent when a late copy of its acquisition may still run (see spend.lua).
// lost are the keys it did not find held by h.
func (n *Node) releaseOnce(ctx context.Context, h *lease.Hold, lined bool) (handoffs int, lost []string, resent bool, err error) {
	if !lined && h.Droppable() {
		keys, token := scripts.DropArgs(n.R.Keys, h.Keys, h.Token)
		start := time.Now()
		code, missing, err := scripts.ParseDrop(scripts.Drop.Run(ctx, n.R.Client, keys, token))
		n.R.NoteErr(err)
		resent := n.R.Timing.MayResend(time.Since(start))
		if err != nil || code != scripts.ReplyNotPlain {
			for _, i := range missing {
				lost = append(lost, h.Keys[i])
			}
			return 0, lost, resent, err
		} // not plain any more (someone waits, or a token may be spent)
	}
	if placing := n.Lines.Placing(h); placing != nil {
		// A waiter of this Locker is between two places in line: let its
		// place reach Redis first (a round trip), so that the key does not
		// go free for others to take meanwhile.
		scripts.Await(ctx, placing, n.R.Silence())
	}
	rel := n.Lines.PrepareRelease(h)
	for _, part := range h.Parts {
		a := scripts.ReleaseArgs{Keys: part, Token: h.Token, Mode: h.Mode, Withdraw: rel.Withdraw, Wake: n.Lines.Wake(part[0]), Clean: h.Clean()}
		if h.MayRunLate() {
			a.Spend = n.R.SpendFor()
		}
		res, err := n.R.Release(ctx, a)
		n.R.NoteErr(err)
		n.Lines.Released(part, rel, res, err)
		if err != nil {
			return handoffs, nil, false, err
		}
		for _, i := range res.Missing {
			lost = append(lost, part[i])
		}
		handoffs += res.Handoffs
		resent = resent || res.Resent
	}
	return handoffs, lost, resent, nil
}
