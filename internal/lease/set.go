package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"time"

	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A Reply is the outcome of one command that sets a lease: Err when it
// failed (it may have run, or run later), else the code of renew.lua's
// reply: ReplyOK (the lease was set, with Fences when asked for),
// ReplySuperseded (held, but Redis had run a command of a later
// generation: not set) or ReplyNotOurs (not held: lost; Missing is the
// first key not held, by its place in the hold's keys from 1, 0 when not
// known).
type Reply struct {
	Code    int64
	Fences  []int64 // issued, one per key (when asked for)
	Missing int
	Err     error
}

func (r Reply) set() bool { return r.Err == nil && r.Code == scripts.ReplyOK }

// Lost reports that the reply found the hold not held.
func (r Reply) Lost() bool { return r.Err == nil && r.Code == scripts.ReplyNotOurs }

// outcome is the reply's outcome for the lease clock.
func (r Reply) outcome() outcome {
	switch {
	case r.Err != nil:
		return outcomeUnknown
	case r.Code == scripts.ReplyOK:
		return outcomeSet
	}
	return outcomeNotSet
}

// A Set is one command that sets a hold's lease: the one sequence by which
// every lease is set (an acquisition's claim, Refresh, the keeper's
// renewals, a quorum's acquisition). beginSet records it on the lease
// clock before it is sent; the Store sends it, alone (SetLease) or in a
// pipeline of the keeper's; done records its reply.
type Set struct {
	H    *Hold
	Args scripts.RefreshArgs // Keys: all of H's (the Store sends one per part)
	id   uint64
}

// beginSet records that a command setting h's lease to ttl (and issuing a
// fence, when fence) is sent now; ok is false when h is not Held: nothing
// may change its lease any more (a pass hands its lease on). It and done
// move the lost-lock timer of KeepAlive along with the lease. When a
// command shortens the lease (a Refresh to a shorter ttl), the next renewal
// is made due a third of that ttl later, so that the lease is renewed in
// time should the command never return (a dead connection).
func (h *Hold) beginSet(ttl time.Duration, fence bool) (s Set, ok bool) {
	h.mu.Lock()
	if h.state != Held || h.why != nil {
		h.mu.Unlock()
		return Set{}, false
	}
	sent := time.Now()
	id, gen, moved := h.clock.send(sent, ttl)
	h.generations = h.generations || gen > 0
	k := h.kept
	if moved {
		k.moveExpiry()
	}
	h.mu.Unlock()
	if moved && k != nil {
		h.env.keeper.hurry(k, sent, ttl)
	}
	return Set{H: h, id: id, Args: scripts.RefreshArgs{Keys: h.Keys, Token: h.Token, Mode: h.Mode, TTL: ttl, Gen: gen, Fenced: fence, Described: h.Described}}, true
}

// done records r, the reply to s, on the lease clock, and the fences it
// issued.
func (s Set) done(r Reply) {
	h := s.H
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.clock.record(s.id, r.outcome(), time.Now()) {
		h.kept.moveExpiry()
	}
	if r.set() && s.Args.Fenced {
		h.fences = r.Fences
	}
}

// setLease sets h's lease to ttl from now, issuing a fence when fence,
// with one command bounded by ctx, and makes ttl the lease that renewals
// set. A reply that is Lost says that h does not hold a key (or is not
// Held any more: nothing was sent); the caller decides what that means
// (Refresh: lost; an acquisition's claim: the lease ran out).
func (h *Hold) setLease(ctx context.Context, ttl time.Duration, fence bool) (Reply, error) {
	s, ok := h.beginSet(ttl, fence)
	if !ok {
		return Reply{Code: scripts.ReplyNotOurs}, nil
	}
	h.env.Background.Begin()
	r, err := scripts.Bounded(ctx, false, func(ctx context.Context) (Reply, error) {
		defer h.env.Background.End()
		r := h.env.Store.Renew(ctx, []Set{s})[0]
		s.done(r)
		return r, r.Err
	}, nil)
	if err == nil && r.set() {
		h.env.keeper.reschedule(h)
	}
	return r, err
}

// Refresh sets h's lease to ttl from now if it is still held (see the root
// package's Lock.Refresh): ErrNotHeld when it is not, and h is lost.
func (h *Hold) Refresh(ctx context.Context, ttl time.Duration) error {
	r, err := h.setLease(ctx, ttl, false)
	switch {
	case err != nil:
		return scripts.Failed("refresh", h.Keys[0], err)
	case r.Lost() && h.State() == Held:
		return h.Lose(ctx, r.Missing)
	case r.Lost():
		return h.NotHeld()
	}
	return nil
}

// Take sets the lease of h, resumed from another process's hold (see
// Env.ResumedHold), to ttl from now, issuing new fences when fence: the
// first command of its generation. ErrNotHeld, naming the key, when a key
// is not held by h's token any more; nothing is given back on failure: the
// hold is the other process's still.
func (h *Hold) Take(ctx context.Context, ttl time.Duration, fence bool) error {
	r, err := h.setLease(ctx, ttl, fence)
	switch {
	case err != nil:
		return scripts.Failed("resume", h.Keys[0], err)
	case r.Lost():
		return fmt.Errorf("%w: %s", scripts.ErrNotHeld, strings.TrimPrefix(h.Gone(r.Missing).Error(), scripts.ErrLockLost.Error()+": "))
	}
	return nil
}

// Claim makes the lease of h, just acquired, fit the request r: at least
// half of r.TTL left when it returns (a late reply, or a long wait for a
// hand-off, leaves less), and a fence per key when r.Fenced. With force it
// renews the lease at least once: a lock handed or passed over with
// another lease or no fence, or whose write replicas must acknowledge
// (WithReplicas). It renews the lease to r.TTL from now, at most maxClaims
// times: a ttl shorter than about two round trips to Redis never gets
// there, and must not loop for as long as ctx lasts. On failure h is given
// back (which hands it on) before Claim returns, as far as withdrawWait and
// ctx allow (for ErrNotReplicated, which says nothing is held, as far as
// ctx allows); ErrLeaseRanOut when it was no longer held.
func (h *Hold) Claim(ctx context.Context, r *Request, force bool) error {
	for try := 0; force || time.Until(h.Until()) < r.TTL/2 || r.Fenced && h.unfenced(); try++ {
		if try == maxClaims {
			scripts.Await(ctx, h.GiveBack(), WithdrawWait)
			return scripts.Failed("acquire", r.Key(), errTTLTooShort)
		}
		force = false
		rep, err := h.setLease(ctx, r.TTL, r.Fenced && h.unfenced())
		switch {
		case rep.Lost():
			h.lapse()
			h.GiveBack() // on a quorum, the masters of a minority may hold it still
			return scripts.Failed("acquire", r.Key(), ErrLeaseRanOut)
		case errors.Is(err, scripts.ErrNotReplicated):
			// Nothing is held once ErrNotReplicated returns.
			return scripts.Failed("acquire", r.Key(), GivenBack(err, scripts.Await(ctx, h.GiveBack(), h.env.ReleaseBound)))
		case err != nil:
			scripts.Await(ctx, h.GiveBack(), WithdrawWait)
			return scripts.Failed("acquire", r.Key(), err)
		}
	}
	return nil
}

// unfenced reports whether h has no fence yet.
func (h *Hold) unfenced() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fences[0] == 0
}

// SetFences gives h the fences of a quorum's acquisition (see the backend
// layer), before h is shared.
func (h *Hold) SetFences(fences []int64) { h.fences = fences }

// maxClaims bounds the renewals an acquisition makes to get half its ttl
// (see Claim).
const maxClaims = 3

// ErrLeaseRanOut is Claim's error when the lease ran out before it could
// be renewed: the lock is not held.
var ErrLeaseRanOut = errors.New("the lease ran out before the acquire's reply arrived: Redis or the network stalled")

// errTTLTooShort is an acquisition's error when maxClaims renewals in a row
// left less than half of the ttl by the time their replies came.
var errTTLTooShort = fmt.Errorf("%w: too short for this Redis: after 3 renewals in a row, less than half of it was left when the reply came (round trips take about half the ttl or more); use a longer ttl", scripts.ErrInvalidTTL)

// WithdrawWait bounds how long a failing acquisition waits for the give-back
// of what it took. The give-back goes on after the acquisition returned, and
// takes effect when Redis answers.
const WithdrawWait = 100 * time.Millisecond

// GivenBack is the error err of an acquisition whose lock was given back:
// when the release is done, and when it goes on.
func GivenBack(err error, done bool) error {
	if done {
		return fmt.Errorf("%w; the lock was released", err)
	}
	return fmt.Errorf("%w; the lock's release goes on in the background", err)
}
