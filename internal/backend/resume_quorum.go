package backend

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Resume is Node.Resume for a quorum: the token must hold the key on a
// majority of the masters; the hold's lease is the one a majority still
// has (less the drift allowance), and its fence a new one, issued as an
// acquisition's is (see fence).
func (q *Quorum) Resume(ctx context.Context, r *lease.Request, token string) (*lease.Hold, error) {
	sent := time.Now()
	ch := make(chan scripts.Holding, len(q.nodes))
	for _, node := range q.nodes {
		go func() {
			f, err := scripts.Bounded(ctx, node.Timing.Direct, func(ctx context.Context) (scripts.Holding, error) {
				return node.Resume(ctx, r.Keys, token)
			}, nil)
			if err != nil || f.Mode != (scripts.Mode{}) {
				f.Missing = 1
			}
			ch <- f
		}()
	}
	var held []scripts.Holding
	for range q.nodes {
		if f := <-ch; f.Missing == 0 {
			held = append(held, f)
		}
	}
	if len(held) < q.majority() {
		return nil, fmt.Errorf("%w: %s is not held by this token on a majority of the masters (%d of %d)", scripts.ErrNotHeld, scripts.QuoteKey(r.Key()), len(held), len(q.nodes))
	}
	slices.SortFunc(held, func(a, b scripts.Holding) int { return int(b.Left - a.Left) })
	found := held[q.majority()-1] // the lease a majority still has
	for _, f := range held {
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
