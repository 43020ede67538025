// Package line is the layer of redislock that waits: how a Locker waits
// for a key that another holder has.
//
// Each Locker keeps, per key it waits for, one line: its Obtains, first come
// first served. The line has at most one place in the key's queue in Redis,
// under a token of its own, kept by its first waiter (the head). Lockers
// (processes) take turns in the order of their places; within a Locker,
// waiters take turns in the order they came.
//
//   - Direct hand-off. A release that finds places in line gives the key to
//     the first of them in the same script (release.lua): the key then
//     holds that line's token, and the hand-off is announced on the wake
//     channel of the line's Locker, or, for the releasing Locker's own line,
//     in the release's reply. The head already holds the lock when it hears
//     of it, and sends nothing to take it.
//   - Passes. A lock that a Locker holds (got through the line, or taken
//     without it while nobody waited: see Lines.Pass) is passed by Release
//     straight to the head of the Locker's line, without a round trip, for
//     a round of at most maxPasses passes and passSlice. Then the
//     key goes back to Redis, which hands it to the next place in line. So
//     another process waits, per Locker ahead of it, for one round: at most
//     maxPasses+1 critical sections, and none that starts after passSlice.
//     A fenced waiter is never passed a lock (each acquisition has a fence
//     of its own), and neither is a waiter whose ttl the rest of the lease
//     does not fit (between ttl/2 and ttl), nor while a command that sets
//     the lease is in flight (it could leave a lease shorter than the one
//     passed on).
//   - Nothing depends on a message. The head renews its place every
//     placeRenew, and earlier when the holder's lease ends (an expiry
//     announces nothing); an attempt that finds the key handed to it takes
//     it. While the Locker's subscription is not confirmed the head polls,
//     with jittered backoff (WithBackoff). Attempts run in the background
//     (lines.attempted takes in their outcome): a waiter waits for the line,
//     never for a reply, so a lock passed to the head while its attempt is
//     stuck is taken at once. A renewal not answered within a quarter of
//     what is left of the place is sent again (on another connection, as
//     the keeper hedges renewals of leases): one dead connection does not
//     cost the place.
//   - Nothing is orphaned. A line whose waiters all gave up withdraws its
//     place at once, or releases the key if it was handed it (which hands
//     it on). If a command carrying its token may still run (one is in
//     flight, or go-redis may have sent one twice: see
//     scripts.Timing.MayResend), the withdrawal also marks the token spent,
//     and a spent token's attempts take nothing (see spend.lua), so that no
//     late command puts the place back. A waiter that dies (killed, or
//     gone without Shutdown) keeps its place until the place lapses,
//     placeLease after its last renewal, and a hand-off to it meanwhile
//     holds the key until then at most: a hand-off gives a place's waiter
//     its lease only up to the place's deadline (see handOff in line.lua),
//     the time it proved it was alive for. So a dead waiter costs the line
//     at most placeLease and a round trip, never its ttl; a live one claims
//     its ttl before its Obtain returns (below).
//
// The lease of a handed-over lock is measured from base: when the latest
// command that confirmed the line's place was sent. A token takes a place
// once (its first attempt); its later attempts only renew it, and a
// hand-off removes it for good. So a reply that confirms the place comes
// from a command that ran before any hand-off to the token, at some E >=
// base, which set the place's deadline to E + placeLease (later renewals
// only move it later); the hand-off, at H > E, set the expiry to
// min(H + lease, deadline) >= base + min(lease, placeLease): Until = base +
// min(lease, placeLease) is never later than Redis's expiry, however late
// the announcement arrives. Replies for a token the line has left (it was
// granted, or spent) are ignored. A renewal that finds the place gone (it
// lapsed, or a hand-off to it went unheard until its lease ran out) spends
// the token: the line takes a new place with a new one, and a late
// announcement for the old one is ignored. A waiter that gets the lock with
// less than half its ttl left (its ttl is over 2*placeLease, the hand-off
// was long ago, or it woke late), or that wants another lease or a fence
// than the place asked for (the first waiter of the line changed), claims
// it before its Obtain returns: a renewal, the lease then measured from
// when it was sent (see lease.Hold.Claim).
package line

import (
	"context"
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

const (
	// placeLease is how long a place in line is kept after the command that
	// took or renewed it: how long a dead waiter can hold up a line.
	placeLease = time.Second
	// placeRenew is how often the head renews its place: three times per
	// placeLease, so that one late or lost renewal costs nothing.
	placeRenew = placeLease / 3
	// maxPasses and passSlice bound a round: a hold is passed at most
	// maxPasses times, and not after passSlice. A slice of a few critical
	// sections of a few hundred microseconds each saves most hand-offs,
	// which cost a round trip and a wake-up of another process each, and
	// keeps others' waits short when critical sections are long.
	maxPasses = 16
	passSlice = 10 * time.Millisecond
)

// errNoAnswer is the error of a wait that no attempt of its line answered.
var errNoAnswer = errors.New("Redis did not answer")

// Lines are the lines of one Locker on one deployment. One mutex guards
// every line, every waiter's outcome and the subscriptions. Lock order:
// Lines.mu before any hold's, never after.
type Lines struct {
	r   *scripts.Redis
	env *lease.Env
	id  string // names the Locker's wake channels and its places in line

	mu           sync.Mutex
	lines        map[lineID]*line         // every line that may still hear of its place (see lineID)
	subs         map[string]*subscription // by channel: started when a line takes a place; retires when idle
	started      []*subscription          // those started, retired or not, that may not have ended
	shuttingDown bool                     // Shutdown waits: subscriptions retire once idle, without lingering
}

// A lineID finds a line in Lines.lines: the line of a key's exclusive
// waiters by its key; a line of one waiter (a shared, permit or set
// waiter: see Lines.enter) by its token.
type lineID struct{ key, token string }

// New returns the lines of a Locker, whose id names its wake channels, on
// the deployment r; the holds they get share env.
func New(r *scripts.Redis, env *lease.Env, id string) *Lines {
	return &Lines{r: r, env: env, id: id, lines: map[lineID]*line{}, subs: map[string]*subscription{}}
}

// placeState is what a line knows of its place in Redis.
type placeState int

const (
	noPlace      placeState = iota // the line's token is not in Redis
	placeUnknown                   // a command that could have placed it failed: it may be
	placed                         // a reply confirmed the place
)

// A line is the waiters of one Locker for one key, and its place in Redis.
// It lives while it has waiters, or a hold that it may pass on.
type line struct {
	keys    []string       // the keys it waits for: one, or a set's (one slot's)
	mode    scripts.Mode   // the mode its waiters want the keys in
	wake    scripts.Wakeup // where hand-offs to its places are announced
	own     bool           // a line of one waiter: a shared, permit or set waiter (see Lines.enter)
	fixed   string         // the token it must use (a part of a set across slots), or ""
	waiters []*waiter      // first in line first
	token   string         // the line's place, and the key's value once handed to it

	place        placeState
	base         time.Time                  // when the latest command that confirmed the place was sent
	holdEnd      time.Time                  // when the holder's lease ends, as the latest reply said; zero: unknown
	blockedFor   time.Duration              // the holder's lease left, as the latest reply said (see blockedFor)
	check        bool                       // a hand-off may have gone unheard: the head asks Redis
	freeFirst    bool                       // a set's first attempt left a key free with its place first (see handedTo)
	handed       map[string]scripts.Handoff // the keys handed to token, by key; applied once the place is confirmed, and a set's once it has them all
	inflight     int                        // attempts carrying token that have not returned
	sent         time.Time                  // when the latest attempt was sent
	firstSent    time.Time                  // when token's first attempt (which takes its place; later ones renew it) was sent; zero: not yet
	firstAttempt *lease.FirstAttempt        // token's first attempt
	pending      map[string]*time.Timer     // given-up tokens whose withdrawal waits for their first attempt's reply
	asked        time.Time                  // when the first attempt sent since the latest reply was sent; zero: none
	heard        time.Time                  // when the latest reply came (of any token of the line)
	placedc      chan struct{}              // closed when a reply for token comes, or the line leaves it (see Lines.Placing)
	gaveUp       string                     // the latest token whose place the line gave up (see replaceToken)
	lastErr      error                      // the error of the latest attempt; nil when it found the key held

	hold   *lease.Hold // this Locker's hold of the key, got through the line
	passes int         // passes left for hold
	round  time.Time   // when the hold was got from Redis
	expiry *time.Timer // drops a line kept for its hold alone when the hold's lease ends
}

// id is where ln is found in Lines.lines while it is there.
func (ln *line) id() lineID {
	if ln.own {
		return lineID{token: ln.token}
	}
	return lineID{key: ln.keys[0]}
}

// inRedis reports whether ln's token may have a place in Redis's line: a
// place was confirmed or may have been taken, or a command that may take
// one may still run.
func (ln *line) inRedis() bool {
	return ln.place != noPlace || ln.inflight > 0 || ln.firstAttempt.MayRun()
}

// A waiter is one Obtain in a line.
type waiter struct {
	req      *lease.Request
	deadline time.Time     // when its Obtain ends; zero: no deadline
	wake     chan struct{} // something changed for the waiter
	poll     time.Duration // next polling (or retry) delay, while it is the head
	retryAt  time.Time     // after a failed attempt: not before then

	// set once, under Lines.mu
	hold  *lease.Hold // the hold, handed or passed to the waiter
	claim bool        // hold must be claimed before it is returned
	err   error       // the line failed the waiter
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// fail ends w's wait with err.
func (w *waiter) fail(err error) {
	w.err = err
	w.poke()
}

// enter puts a waiter for r, whose Obtain ends at deadline (zero: none),
// at the end of its line. Exclusive waiters of a Locker share a line per
// key; a shared, permit or set waiter has a line of its own, since each
// holder has its own token in Redis (and passes are only between exclusive
// waiters of one key). A line that nobody waits in has no place in Redis
// (see update): a waiter that comes back later is in line behind those that
// came meanwhile. blocked, when not nil, is what an attempt made before
// found (a plain lock's: see the backend's Acquire): the key held, and
// Redis answering; the line takes it as its latest reply until one of its
// own comes.
func (ls *Lines) enter(r *lease.Request, deadline time.Time, blocked *scripts.AttemptResult) (*line, *waiter) {
	w := &waiter{req: r, deadline: deadline, wake: make(chan struct{}, 1), poll: r.MinBackoff}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.shuttingDown = false
	ln := ls.lineFor(r.Keys, r.Mode, r.Token, !r.Mode.Exclusive() || len(r.Keys) > 1 || r.Token != "")
	ln.waiters = append(ln.waiters, w)
	if blocked != nil && ln.heard.IsZero() {
		ln.heard, ln.lastErr, ln.blockedFor = time.Now(), nil, blocked.PTTL
	}
	return ln, w
}

// reenter puts w, whose lock was lost before it could claim it, back at the
// front of its line (a new line, for a shared, permit or set waiter).
func (ls *Lines) reenter(ln *line, w *waiter) *line {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	w.hold, w.claim = nil, false
	ln = ls.lineFor(ln.keys, ln.mode, ln.fixed, ln.own)
	ln.waiters = append([]*waiter{w}, ln.waiters...)
	return ln
}

// lineFor returns the line of keys' exclusive waiters, made if there is
// none; or, own, a new line of one waiter in mode m, with token when it
// must use that one.
func (ls *Lines) lineFor(keys []string, m scripts.Mode, token string, own bool) *line {
	if ln := ls.lines[lineID{key: keys[0]}]; ln != nil && !own {
		return ln
	}
	ln := &line{keys: keys, mode: m, wake: ls.r.Keys.Wake(ls.id, keys[0], ls.r.Sharded), own: own, fixed: token, lastErr: errNoAnswer, pending: map[string]*time.Timer{}}
	ls.freshToken(ln)
	ls.lines[ln.id()] = ln
	return ln
}

// Busy reports whether the Locker waits for one of keys or holds it
// through its line: a TryObtain then fails at once.
func (ls *Lines) Busy(keys []string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, key := range keys {
		if ln := ls.lines[lineID{key: key}]; ln != nil && (len(ln.waiters) > 0 || hasHold(ln)) {
			return true
		}
	}
	return false
}

// hasHold reports whether ln's hold is still held, with a lease.
func hasHold(ln *line) bool { return ln.hold != nil && ln.hold.Passable() }

// step is what a waiter does next (see Lines.next).
type step struct {
	hold  *lease.Hold // the hold is the waiter's (after a claim if claim)
	claim bool        //
	err   error       // the line failed the waiter
	sent  bool        // the waiter, the head, sent an attempt for the line
	wait  time.Duration
}

// next says what w does next: take its hold, or wait until woken or for
// step.wait (0: until woken); or, as the head, it sends an attempt for the
// line (see send) when it is due: a renewal of the place every placeRenew,
// or when the holder's lease ends, or when polling while the subscription
// is not confirmed; or a retry after its backoff.
//
// The last look: the head asks Redis once more two silences before the
// first of its line's waiters gives up, unless a reply came after that, so
// that a wait that ends has a reply at most 2 silences old, or an attempt
// unanswered for at least a silence (see quit).
//
// The hedge: while attempts of its line are in flight, the head waits for
// their replies, and sends the place's renewal again when it is not
// answered within a quarter of what is left of the place (at most
// lease.MaxInFlight at once). A first attempt is not sent again: it takes
// the place, which a hedge must not do twice.
func (ls *Lines) next(ln *line, w *waiter) step {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	now := time.Now()
	switch {
	case w.hold != nil:
		return step{hold: w.hold, claim: w.claim}
	case w.err != nil:
		return step{err: w.err}
	case ln.waiters[0] != w || ln.inflight > 0 && (ln.place != placed || ln.inflight >= lease.MaxInFlight):
		return step{}
	case ln.inflight > 0:
		if at := ln.sent.Add(max(ln.base.Add(placeLease).Sub(ln.sent)/4, lease.MinHedge)); at.After(now) {
			return step{wait: at.Sub(now)}
		}
		return ls.send(ln, w, now)
	}
	s := ls.subs[ln.wake.Channel]
	armed := s != nil && s.armed.Load()
	due := now
	if ln.place == placed && !ln.check {
		due = ln.base.Add(placeRenew)
		if !ln.holdEnd.IsZero() && ln.holdEnd.Before(due) {
			due = ln.holdEnd.Add(time.Millisecond)
		}
		if poll := ln.base.Add(w.poll); !armed && poll.Before(due) {
			due = poll
		}
		var first time.Time // the first deadline of the line's waiters
		for _, x := range ln.waiters {
			if !x.deadline.IsZero() && (first.IsZero() || x.deadline.Before(first)) {
				first = x.deadline
			}
		}
		if look := first.Add(-2 * ls.r.Silence()); !first.IsZero() && look.After(ln.heard) && look.Before(due) {
			due = look
		}
	}
	if w.retryAt.After(due) {
		due = w.retryAt
	}
	if due.After(now) {
		return step{wait: due.Sub(now)}
	}
	if !armed {
		w.poll = NextBackoff(w.poll, w.req.MinBackoff, w.req.MaxBackoff)
	}
	ln.check = false
	return ls.send(ln, w, now)
}

// send sends the line's next attempt for the head w, now, in the
// background. Its outcome updates the line (see attempted), which wakes the
// head: a waiter never waits for a reply, so that a stuck one holds up
// neither its deadline nor a lock passed to it. It is bounded as a release
// is (by go-redis's own timeouts and retries), not by the Obtain that sent
// it: its outcome matters to the line's other waiters.
func (ls *Lines) send(ln *line, w *waiter, now time.Time) step {
	ln.inflight++
	ln.sent = now
	if ln.asked.IsZero() {
		ln.asked = now
	}
	a := scripts.AttemptArgs{Keys: ln.keys, Token: ln.token, Holder: w.req.Holder, TTL: w.req.TTL, Fenced: w.req.Fenced, Mode: ln.mode, Place: placeLease, Renew: !ln.firstSent.IsZero(), Wake: ln.wake}
	var first *lease.FirstAttempt // set when a is its token's first attempt
	if !a.Renew {
		ln.firstSent, first = now, ln.firstAttempt
		first.Out.Store(true)
	}
	ls.env.Background.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ls.r.ReleaseBound())
		defer cancel()
		res, err := ls.r.Attempt(ctx, a)
		ls.attempted(ln, &a, first, now, res, err)
	})
	return step{sent: true}
}

// attempted updates the line with the outcome of its attempt a, sent at
// start; first is the attempt's FirstAttempt when it was the token's first.
func (ls *Lines) attempted(ln *line, a *scripts.AttemptArgs, first *lease.FirstAttempt, start time.Time, res scripts.AttemptResult, err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln.inflight--
	ls.r.NoteErr(err)
	ln.heard = time.Now()
	first.Returned(res, err)
	if a.Token != ln.token {
		// The line has left the token (it was granted the key, or spent):
		// nothing of this reply applies, but to a withdrawal that waits for it.
		if t := ln.pending[a.Token]; t != nil && first != nil && t.Stop() {
			delete(ln.pending, a.Token)
			spend := first.MayRun()
			ls.env.Background.Go(func() { ls.Withdraw(ln.keys, a.Token, ln.mode, spend) })
			ls.env.Background.End() // the wait for the reply
		}
		ls.update(ln)
		return
	}
	now := ln.heard
	if err == nil {
		ls.r.Answered(now.Sub(start))
	}
	ln.asked = time.Time{}
	ln.unblock()
	ln.lastErr = err
	if err != nil && len(ln.waiters) > 0 {
		h := ln.waiters[0] // waits for its backoff before the next attempt
		h.retryAt = now.Add(h.poll)
		h.poll = NextBackoff(h.poll, h.req.MinBackoff, h.req.MaxBackoff)
	}
	switch {
	case err == nil && res.Ours:
		ln.handed = nil
		if len(ln.waiters) == 0 {
			ln.handed = map[string]scripts.Handoff{ln.keys[0]: {Token: a.Token}} // for the withdrawal
			break
		}
		ls.grant(ln, ls.env.NewHold(ln.waiters[0].req, a.Token, res.Fences, start, a.TTL), a.TTL)
	case err == nil && res.NoPlace:
		// The place lapsed, or a hand-off to it went unheard and its lease
		// ran out: the token is spent. Take a new place with a new one.
		ln.place = noPlace
		ls.replaceToken(ln)
	case err == nil:
		// The place is confirmed. Replies of hedged renewals may come in
		// any order: base is the latest.
		ln.place = placed
		if start.After(ln.base) {
			ln.base = start
		}
		ln.holdEnd, ln.blockedFor = time.Time{}, res.PTTL
		if res.PTTL >= 0 {
			ln.holdEnd = time.Now().Add(res.PTTL)
		}
		ls.subscribe(ln.wake)
		ln.freeFirst = ln.freeFirst || res.FreeFirst
	case scripts.Permanent(err):
		// Waiting longer would not help: every waiter reports it. An
		// error reply means the attempt did not run; a closed client
		// sends nothing any more.
		for _, w := range ln.waiters {
			w.fail(err)
		}
	case scripts.Refused(err):
		// Redis did not run it (it is loading, failing over, ...):
		// nothing changed; the head tries again after its backoff.
	default:
		ln.place = placeUnknown
	}
	ls.update(ln)
}

// grant gives h, which the line's token holds now with a lease of ttl, to
// the head: a new hold, which starts a round of passes. It must be claimed
// when its lease does not fit the head's request (another length, no
// fence, less than half of it left). The line takes a new token for its
// next place.
func (ls *Lines) grant(ln *line, h *lease.Hold, ttl time.Duration) {
	w := ln.waiters[0]
	ln.waiters = ln.waiters[1:]
	h.Lined, h.First = true, ln.firstAttempt
	w.claim = ttl != w.req.TTL || (w.req.Fenced && h.Fences()[0] == 0) || time.Until(h.Until()) < w.req.TTL/2
	w.hold = h
	w.poke()
	ln.hold, ln.passes, ln.round = h, maxPasses, time.Now()
	if ln.fixed != "" {
		ls.detach(ln) // the token is the hold's now
		ln.token, ln.place, ln.handed = "", noPlace, nil
		return
	}
	ls.freshToken(ln)
}

// replaceToken gives ln a new token, and takes the old one out of Redis's
// line if it may have a place there (see withdrawToken). A line that must
// use its token fails its waiter with ErrSpent instead.
func (ls *Lines) replaceToken(ln *line) {
	if ln.inRedis() {
		ln.gaveUp = ln.token
		ls.withdrawToken(ln)
	}
	if ln.fixed != "" {
		ls.detach(ln)
		ln.token, ln.place = "", noPlace
		for _, w := range ln.waiters {
			w.fail(ErrSpent)
		}
		return
	}
	ls.freshToken(ln)
}

// ErrSpent is the error of a wait with a token given (see
// lease.Request.Token) whose place lapsed: the token is spent, and the
// acquisition starts again with another.
var ErrSpent = errors.New("the place in line lapsed: its token is spent")

// withdrawToken withdraws ln's token, which the line leaves, from Redis
// (see Withdraw): at once, marking the token spent when its first attempt
// may run later (see lease.FirstAttempt); when that attempt is on its way,
// once its reply comes (see attempted), with no mark, since nothing of the
// token can run after it then — unless the reply takes longer than a
// silence (Redis stalls), after which it is done at once, with a mark, so
// that a hand-off to the token's place does not hold the key meanwhile.
func (ls *Lines) withdrawToken(ln *line) {
	token := ln.token
	if !ln.firstAttempt.Out.Load() {
		spend := ln.firstAttempt.MayRun()
		ls.env.Background.Go(func() { ls.Withdraw(ln.keys, token, ln.mode, spend) })
		return
	}
	ls.env.Background.Begin() // ended when the withdrawal is under way
	ln.pending[token] = time.AfterFunc(ls.r.Silence(), func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ln.pending[token] != nil {
			delete(ln.pending, token)
			ls.env.Background.Go(func() { ls.Withdraw(ln.keys, token, ln.mode, true) })
			ls.env.Background.End()
		}
	})
}

// unblock closes placedc: a release waiting for the line's place waits no
// more (see Lines.Placing).
func (ln *line) unblock() {
	if ln.placedc != nil {
		close(ln.placedc)
		ln.placedc = nil
	}
}

// freshToken gives ln a new token, with no place yet (a line of one waiter
// is found by it).
func (ls *Lines) freshToken(ln *line) {
	if ln.own && ls.lines[ln.id()] == ln {
		delete(ls.lines, ln.id())
	}
	ln.token = ln.fixed
	if ln.token == "" {
		ln.token = scripts.NewToken()
	}
	if ln.own {
		ls.lines[ln.id()] = ln
	}
	ln.place, ln.firstSent, ln.check, ln.freeFirst, ln.handed, ln.holdEnd = noPlace, time.Time{}, false, false, nil, time.Time{}
	ln.firstAttempt = &lease.FirstAttempt{}
	ln.asked = time.Time{} // replies for the token left are not waited for
	ln.unblock()
}

// update brings the line up to date after a change: it applies a pending
// hand-off and wakes the head, and once nobody waits, keeps the line for
// its hold or detaches it and withdraws its place from Redis.
func (ls *Lines) update(ln *line) {
	if len(ln.handed) == len(ln.keys) && len(ln.waiters) > 0 {
		// The hand-offs ran after the command that took the place, the
		// token's first attempt, sent at ln.firstSent; base, when a reply
		// confirmed the place, is later still and as good. (A set's keys
		// handed before it are kept alive by its renewals: see acquire.lua.)
		base := ln.firstSent
		if ln.place == placed {
			base = ln.base
		}
		fences, lease := make([]int64, len(ln.keys)), time.Duration(math.MaxInt64)
		for i, key := range ln.keys {
			fences[i], lease = ln.handed[key].Fence, min(lease, ln.handed[key].Lease)
		}
		switch {
		case ln.firstSent.IsZero():
			ln.check = true // the base is unknown: the head asks Redis
		case slices.Min(fences) < 0:
			ln.handed, ln.place = nil, noPlace
			ln.waiters[0].fail(scripts.ErrFenceNotIssued)
		default:
			ln.handed = nil
			hold := ls.env.NewHold(ln.waiters[0].req, ln.token, fences, base, lease)
			hold.ShortenTo(base.Add(min(lease, placeLease))) // the place's deadline bounds it (see handOff in line.lua)
			ls.grant(ln, hold, lease)
		}
	}
	if len(ln.waiters) > 0 {
		ln.waiters[0].poke()
		return
	}
	if !ln.own && ls.lines[ln.id()] == ln && len(ln.handed) == 0 && hasHold(ln) {
		// Nobody waits: the line keeps its hold (for the Locker's next
		// Obtain to be passed it), not its place in Redis.
		if ln.inRedis() {
			ls.replaceToken(ln)
		}
		ls.keepFor(ln)
		return
	}
	ls.detach(ln)
	if ln.token != "" && (ln.inRedis() || len(ln.handed) > 0) {
		// Clean up (see withdrawToken); replies to come are for a token the
		// line has left.
		ls.withdrawToken(ln)
		ln.token, ln.place, ln.handed = "", noPlace, nil
	}
}

// keepFor keeps a line without waiters while its hold lasts, so that the
// Locker's next Obtain of the key can be passed the lock. A timer drops it
// when the hold's lease ends, if the hold was never released.
func (ls *Lines) keepFor(ln *line) {
	if ln.expiry != nil {
		ln.expiry.Stop()
	}
	ln.expiry = time.AfterFunc(time.Until(ln.hold.Until()), func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		ls.update(ln)
	})
}

// detach takes ln out of Lines.lines, for good: the line only withdraws
// what it left in Redis.
func (ls *Lines) detach(ln *line) {
	ln.unblock()
	if ln.expiry != nil {
		ln.expiry.Stop()
	}
	if ls.lines[ln.id()] == ln {
		delete(ls.lines, ln.id())
	}
}

// quit takes w, whose Obtain gives up, out of its line, and gives back a
// hold handed or passed to w meanwhile, which passes it on; neither waits
// for Redis. It returns the error of the line's latest attempt: nil when
// it found the key held (blocked is then the holder's lease left, as the
// latest reply said: see blockedFor in line.lua), unless an attempt sent
// since has gone unanswered for a silence (Redis stopped answering: that is
// no contention).
func (ls *Lines) quit(ln *line, w *waiter) (blocked time.Duration, last error) {
	ls.mu.Lock()
	if h := w.hold; h != nil {
		ls.mu.Unlock()
		h.GiveBack() // without ls.mu: it may pass h on (see Pass)
		return 0, nil
	}
	defer ls.mu.Unlock()
	ln.waiters = slices.DeleteFunc(ln.waiters, func(x *waiter) bool { return x == w })
	last = ln.lastErr
	if silent := time.Since(ln.asked); last == nil && !ln.asked.IsZero() && silent > ls.r.Silence() {
		last = fmt.Errorf("%w for %v", errNoAnswer, silent.Round(time.Millisecond))
	}
	if errors.Is(last, errNoAnswer) {
		last = ls.r.LastFailure(last)
	}
	blocked = ln.blockedFor
	ls.update(ln)
	return blocked, last
}

// Pass gives h, whose release has begun, to the head of its line without a
// round trip, if h is the line's hold and the head may have it (see the
// note at the top): passed reports that h is released, and the head has
// it. lined reports whether the Locker has a line for h's key: then its
// release goes through that line (see the backend's release), and is never
// a plain lock's drop.
//
// A hold taken without the line (a plain lock, or a single attempt: see
// the backend's Acquire) while the line has no hold is adopted: the Locker
// holds the key, and its round began when h was acquired. So a lock that
// nobody waited for when it was taken is passed like one the line got from
// Redis. A set's hold holds other keys too: it is never passed.
func (ls *Lines) Pass(h *lease.Hold) (passed, lined bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.lines[lineID{key: h.Keys[0]}]
	if ln == nil {
		return false, false
	}
	if len(ln.waiters) == 0 || ln.hold != h && (ln.hold != nil || h.Lined || !h.Mode.Exclusive() || len(h.Keys) > 1) {
		return false, true
	}
	if ln.hold != h { // adopted
		ln.hold, ln.passes, ln.round = h, maxPasses, h.Since
	}
	w := ln.waiters[0]
	if ln.passes == 0 || time.Since(ln.round) > passSlice || w.req.Fenced || w.hold != nil || w.err != nil {
		return false, true
	}
	next := h.Pass(w.req.TTL)
	if next == nil {
		return false, true
	}
	ln.waiters = ln.waiters[1:]
	w.hold = next
	w.poke()
	ln.hold = next
	ln.passes--
	ls.update(ln)
	return true, true
}

// Placing returns a channel that is closed when the line of h's key, whose
// waiters have no confirmed place in Redis (the line was just granted the
// key, and its first attempt with a new token is about to be sent, or on
// its way), gets a reply; nil when there is nothing to wait for. A release
// through Redis waits for it, so that the key is not free, for anyone to
// take, while this Locker's waiters are between two places.
func (ls *Lines) Placing(h *lease.Hold) <-chan struct{} {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.lines[lineID{key: h.Keys[0]}]
	if ln == nil || len(ln.waiters) == 0 || ln.place == placed {
		return nil
	}
	if ln.placedc == nil {
		ln.placedc = make(chan struct{})
	}
	return ln.placedc
}

// A Release is a release of a hold through Redis, as the line prepared it
// (see Lines.PrepareRelease).
type Release struct {
	ln       *line
	Withdraw string // a place to take out of line in the same script, or ""
}

// PrepareRelease prepares the release of h through Redis. A hold that was
// the line's hold ends it; a line that nobody waits in any more withdraws
// its place in the same script (Withdraw: its token, whose outcome
// Released takes in).
func (ls *Lines) PrepareRelease(h *lease.Hold) Release {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.lines[lineID{key: h.Keys[0]}]
	if ln == nil || ln.hold != h {
		return Release{}
	}
	ln.hold = nil
	if len(ln.waiters) > 0 {
		return Release{}
	}
	if ln.place != noPlace && len(ln.handed) == 0 && ln.inflight == 0 && !ln.firstAttempt.MayRun() {
		ls.detach(ln)
		ln.inflight++ // the place goes in the release's script
		return Release{ln: ln, Withdraw: ln.token}
	}
	// The place the line last gave up goes in the release's script too,
	// should its own withdrawal not have reached Redis yet: the release must
	// not hand the key to it.
	withdraw := ln.gaveUp
	ls.update(ln) // detaches it, and withdraws what needs it
	return Release{Withdraw: withdraw}
}

// Released takes in a release's outcome: the place it withdrew for rel's
// line, and the hand-offs it made to lines of this Locker. When its outcome
// is unknown, a hand-off to a line of this Locker may have gone unheard:
// their heads ask Redis.
func (ls *Lines) Released(keys []string, rel Release, res scripts.ReleaseResult, err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case err == nil:
		for _, h := range res.Handed {
			ls.handedTo(keys[h.At], h)
		}
		if res.Resent || len(res.Missing) > 0 { // an earlier run's hand-offs may have gone with its lost reply
			ls.ask(keys)
		}
	case !scripts.Refused(err):
		ls.ask(keys)
	}
	if ln := rel.ln; ln != nil {
		ln.inflight--
		if err == nil {
			ln.place = noPlace
		} else if !scripts.Refused(err) {
			ln.place = placeUnknown
		}
		ls.update(ln)
	}
}

// handedTo records a hand-off of key to h.Token, if that is the token of
// one of our lines (a set's waits for all its keys); else it is not ours,
// or of a line that left: its withdrawal passes it on. ls.mu is held.
func (ls *Lines) handedTo(key string, h scripts.Handoff) {
	ln := ls.lines[lineID{key: key}]
	if ln == nil || ln.token != h.Token {
		if ln = ls.lines[lineID{token: h.Token}]; ln == nil || !slices.Contains(ln.keys, key) {
			return
		}
	}
	if ln.handed == nil {
		ln.handed = map[string]scripts.Handoff{}
	}
	ln.handed[key] = h
	if ln.freeFirst && len(ln.handed) < len(ln.keys) {
		// The set's other keys may be free with its place first in their
		// lines (see AttemptResult.FreeFirst), which no release will hand
		// on: its head asks Redis now (an attempt hands them), not at its
		// next renewal.
		ln.check = true
	}
	ls.update(ln)
}

// ask makes the heads of the lines of keys ask Redis whether a key was
// handed to them. ls.mu is held.
func (ls *Lines) ask(keys []string) {
	for _, ln := range ls.lines {
		if ln.place == placed && len(ln.waiters) > 0 && slices.ContainsFunc(ln.keys, func(k string) bool { return slices.Contains(keys, k) }) {
			ln.check = true
			ln.waiters[0].poke()
		}
	}
}

// NextBackoff returns the polling delay after prev: drawn at random from
// [floor, 3*prev], capped at ceiling ("decorrelated jitter"), so that
// polling waiters spread out instead of asking in lockstep.
func NextBackoff(prev, floor, ceiling time.Duration) time.Duration {
	hi := min(3*prev, ceiling)
	if hi <= floor {
		return floor
	}
	return floor + mathrand.N(hi-floor+1)
}
