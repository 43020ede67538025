package backend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Resume is Node.Resume for a quorum, decided as soon as the replies allow:
// the token must hold the key on a majority of the masters (ErrNotHeld
// when so many do not that a majority cannot; a failure when too many
// failed to tell). The hold's lease is the one a majority still has, less
// the drift allowance, its generation above any of theirs, and its fence a
// new one, issued as an acquisition's is (see fence).
func (q *Quorum) Resume(ctx context.Context, r *lease.Request, token string) (*lease.Hold, error) {
	sent := time.Now()
	resume := bounded(ctx, func(ctx context.Context, n *scripts.Redis) (scripts.Holding, error) {
		return n.Resume(ctx, r.Keys, token)
	})
	t := ask(ctx, q, q.all, resume, func(t *tally[scripts.Holding], rep reply[scripts.Holding]) bool {
		t.add(rep, rep.v.Missing == 0 && rep.v.Mode == scripts.Mode{})
		return q.enough(len(t.ok)) || q.blocks(t.no)
	}, nil)
	switch {
	case q.blocks(t.no):
		return nil, fmt.Errorf("%w: %s is not held by this token on a majority of the masters", scripts.ErrNotHeld, scripts.QuoteKey(r.Key()))
	case !q.enough(len(t.ok)):
		return nil, scripts.Failed("resume", r.Key(), t.failure(q, ctx.Err()))
	}
	slices.SortFunc(t.ok, func(a, b scripts.Holding) int { return int(b.Left - a.Left) })
	found := t.ok[q.majority()-1] // the lease a majority still has
	for _, f := range t.ok {
		found.Gen = max(found.Gen, f.Gen)
	}
	found.Left -= lease.Drift(found.Left)
	h := q.env.ResumedHold(r, token, found, sent)
	h.OnQuorum()
	fence, err := q.fence(ctx, r.Key())
	if err != nil {
		return nil, scripts.Failed("resume", r.Key(), err)
	}
	h.SetFences([]int64{fence})
	return h, h.Take(ctx, r.TTL, false)
}
