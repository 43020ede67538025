package redislock

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a Locker waits for a key that another holder has: the line.
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
//     without it while nobody waited: see adopt) is passed by Release
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
//     flight, or go-redis sent one twice: see counted), the withdrawal
//     also marks the token spent, and a spent token's attempts take nothing
//     (see spend.lua), so that no late command puts the place back. A
//     waiter that dies (killed, or gone without Shutdown) keeps its place
//     until the place lapses, placeLease after its last renewal, and a
//     hand-off to it meanwhile holds the key until then at most: a hand-off
//     gives a place's waiter its lease only up to the place's deadline (see
//     handOff in line.lua), the time it proved it was alive for. So a dead
//     waiter costs the line at most placeLease and a round trip, never its
//     ttl; a live one claims its ttl before its Obtain returns (below).
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
// when it was sent (see Locker.claim).
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
	// noAnswer is how long an attempt may go unanswered before a wait that
	// ends is put down to Redis (it did not answer) rather than to the
	// holder, on a link whose round trips take less than half of it (see
	// Locker.silence): a healthy Redis answers in well under a millisecond,
	// and a wrong "Redis failed" only makes a caller retry, while a wrong
	// "held by another owner" may make it skip work.
	noAnswer = 100 * time.Millisecond
)

// errNoAnswer is the error of a wait that no attempt of its line answered.
var errNoAnswer = errors.New("Redis did not answer")

// lines are the lines of one Locker, by key. One mutex guards every line,
// every waiter's outcome and the subscriptions. Lock order: lines.mu before
// any Lock.mu, never after.
type lines struct {
	mu           sync.Mutex
	byKey        map[string]*line         // the lines of exclusive waiters
	byToken      map[string]*line         // the lines of one shared or permit waiter each
	subs         map[string]*subscription // by channel: started when a line takes a place; retires when idle
	started      []*subscription          // those started, retired or not, that may not have ended
	shuttingDown bool                     // Shutdown waits: subscriptions retire once idle, without lingering
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
	key     string
	mode    lockMode  // the mode its waiters want the key in
	wake    wakeup    // where hand-offs to its places are announced
	own     bool      // a line of one waiter: a shared, permit or set waiter (see lines.enter)
	set     []string  // a set waiter's keys (key the first), nil for other lines
	waiters []*waiter // first in line first
	token   string    // the line's place, and the key's value once handed to it

	place        placeState
	placeSent    bool                   // an attempt to take a place with token was sent: later ones renew it
	base         time.Time              // when the latest command that confirmed the place was sent
	renewAt      time.Time              // when the head renews the place
	holdEnd      time.Time              // when the holder's lease ends, as the latest reply said; zero: unknown
	blockedFor   time.Duration          // the holder's lease left, as the latest reply said (see blockedFor)
	check        bool                   // a hand-off may have gone unheard: the head asks Redis
	handed       *handoff               // the key was handed to token; applied once the place is confirmed
	inflight     int                    // attempts carrying token that have not returned
	sent         time.Time              // when the latest attempt was sent
	firstSent    time.Time              // when token's first attempt (which took its place) was sent
	firstAttempt *firstAttempt          // token's first attempt
	pending      map[string]*time.Timer // given-up tokens whose withdrawal waits for their first attempt's reply
	asked        time.Time              // when the first attempt sent since the latest reply was sent; zero: none
	heard        time.Time              // when the latest reply came (of any token of the line)
	placedc      chan struct{}          // closed when a reply for token comes, or the line leaves it (see placing)
	gaveUp       string                 // the latest token whose place the line gave up (see replaceToken)
	lastErr      error                  // the error of the latest attempt; nil when it found the key held

	hold   *Lock       // this Locker's lock on the key, got through the line
	passes int         // passes left for hold
	round  time.Time   // when the hold was got from Redis
	expiry *time.Timer // drops a line kept for its hold alone when the hold's lease ends

	detached bool // out of byKey: the line only withdraws what it left in Redis
}

// A waiter is one Obtain in a line.
type waiter struct {
	ttl      time.Duration
	fenced   bool
	deadline time.Time     // when its Obtain ends; zero: no deadline
	wake     chan struct{} // something changed for the waiter
	min, max time.Duration // the bounds of its backoff (WithBackoff)
	poll     time.Duration // next polling (or retry) delay, while it is the head
	retryAt  time.Time     // after a failed attempt: not before then

	// set once, under lines.mu
	lock  *Lock // the lock, handed or passed to the waiter
	claim bool  // lock must be claimed before it is returned
	err   error // the line failed the waiter
}

// keys returns the keys ln waits for.
func (ln *line) keys() []string { return keysOf(ln.key, ln.set) }

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enter puts a waiter for key, whose Obtain ends at deadline (zero: none),
// at the end of its line. Exclusive waiters of a Locker share a line per
// key; a shared or permit waiter has a line of its own, since each holder
// has its own token in Redis (and passes are only between exclusive
// waiters). A line that nobody waits in has no place in Redis (see
// update): a waiter that comes back later is in line behind those that
// came meanwhile.
func (ls *lines) enter(key string, wake wakeup, ttl time.Duration, deadline time.Time, o *options) (*line, *waiter) {
	w := &waiter{ttl: ttl, fenced: o.fencing, deadline: deadline, wake: make(chan struct{}, 1), min: o.minBackoff, max: o.maxBackoff, poll: o.minBackoff}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.shuttingDown = false
	var ln *line
	if o.mode.exclusive() && o.set == nil {
		ln = ls.lineFor(key, wake)
	} else {
		ln = ls.ownLine(key, o.set, wake, o.mode)
	}
	ln.waiters = append(ln.waiters, w)
	return ln, w
}

// ownLine makes the line of one shared, permit or set waiter.
func (ls *lines) ownLine(key string, set []string, wake wakeup, m lockMode) *line {
	ln := &line{key: key, set: set, mode: m, wake: wake, own: true, lastErr: errNoAnswer}
	ls.freshToken(ln)
	return ln
}

// reenter puts w, whose lock was lost before it could claim it, back at the
// front of its line (a new line, for a shared or permit waiter).
func (ls *lines) reenter(ln *line, w *waiter) *line {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	w.lock, w.claim = nil, false
	if ln.own {
		ln = ls.ownLine(ln.key, ln.set, ln.wake, ln.mode)
	} else {
		ln = ls.lineFor(ln.key, ln.wake)
	}
	ln.waiters = append([]*waiter{w}, ln.waiters...)
	return ln
}

// lineFor returns key's line, making it if there is none.
func (ls *lines) lineFor(key string, wake wakeup) *line {
	ln := ls.byKey[key]
	if ln == nil {
		if ls.byKey == nil {
			ls.byKey = make(map[string]*line)
		}
		ln = &line{key: key, wake: wake, lastErr: errNoAnswer}
		ls.freshToken(ln)
		ls.byKey[key] = ln
	}
	return ln
}

// busy reports whether the Locker waits for one of keys or holds it
// through its line: a TryObtain then fails at once.
func (ls *lines) busy(keys ...string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, key := range keys {
		if ln := ls.byKey[key]; ln != nil && (len(ln.waiters) > 0 || hasHold(ln)) {
			return true
		}
	}
	return false
}

// hasHold reports whether ln's hold still has a lease.
func hasHold(ln *line) bool {
	if ln.hold == nil {
		return false
	}
	ln.hold.mu.Lock()
	defer ln.hold.mu.Unlock()
	return !ln.hold.released && time.Until(ln.hold.heldUntil()) > 0
}

// step is what a waiter does next (see lines.next).
type step struct {
	lock    *Lock        // the lock is the waiter's (after a claim if claim)
	claim   bool         //
	err     error        // the line failed the waiter
	attempt *attemptArgs // the head sends this attempt for the line
	wait    time.Duration
}

// next says what w does next: take its lock, send an attempt for the line,
// or wait until woken or for step.wait (0: until woken).
func (ls *lines) next(l *Locker, ln *line, w *waiter) step {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case w.lock != nil:
		return step{lock: w.lock, claim: w.claim}
	case w.err != nil:
		return step{err: w.err}
	case ln.waiters[0] != w:
		return step{}
	case ln.inflight > 0:
		return ls.hedge(l, ln, w)
	}
	now := time.Now()
	due := now
	if ln.place == placed && !ln.check {
		due = ln.renewAt
		if !ln.holdEnd.IsZero() && ln.holdEnd.Before(due) {
			due = ln.holdEnd.Add(time.Millisecond)
		}
		if poll := ln.base.Add(w.poll); !ls.armedFor(ln) && poll.Before(due) {
			due = poll
		}
		if look := lastLook(ln, l.silence()); !look.IsZero() && look.Before(due) {
			due = look
		}
	}
	if w.retryAt.After(due) {
		due = w.retryAt
	}
	if due.After(now) {
		return step{wait: due.Sub(now)}
	}
	if !ls.armedFor(ln) {
		w.poll = nextBackoff(w.poll, w.min, w.max)
	}
	ln.check = false
	return step{attempt: ls.send(l, ln, w, now)}
}

// lastLook is when the head asks Redis once more before the first of its
// line's waiters gives up, unless a reply came after that: so that a wait
// that ends has a reply at most 2 silences old, or an attempt unanswered
// for at least a silence (see quit). Zero when there is no such deadline.
func lastLook(ln *line, silence time.Duration) time.Time {
	var first time.Time
	for _, w := range ln.waiters {
		if !w.deadline.IsZero() && (first.IsZero() || w.deadline.Before(first)) {
			first = w.deadline
		}
	}
	if look := first.Add(-2 * silence); !first.IsZero() && look.After(ln.heard) {
		return look
	}
	return time.Time{}
}

// hedge says what the head w does while attempts of its line are in
// flight: it waits for their replies, and sends the place's renewal again
// when it is not answered within a quarter of what is left of the place
// (at most maxInFlight at once). A first attempt is not sent again: it
// takes the place, which a hedge must not do twice.
func (ls *lines) hedge(l *Locker, ln *line, w *waiter) step {
	if ln.place != placed || ln.inflight >= maxInFlight {
		return step{}
	}
	now := time.Now()
	at := ln.sent.Add(max(ln.base.Add(placeLease).Sub(ln.sent)/4, minHedge))
	if at.After(now) {
		return step{wait: at.Sub(now)}
	}
	return step{attempt: ls.send(l, ln, w, now)}
}

// send returns the line's next attempt, for the head w, sent now.
func (ls *lines) send(l *Locker, ln *line, w *waiter, now time.Time) *attemptArgs {
	ln.inflight++
	ln.sent = now
	if ln.asked.IsZero() {
		ln.asked = now
	}
	if !ln.placeSent {
		ln.firstSent = now
		ln.firstAttempt.out.Store(true)
	}
	a := &attemptArgs{key: ln.key, set: ln.set, token: ln.token, holder: l.opts.holder, ttl: w.ttl, fenced: w.fenced, mode: ln.mode, place: placeLease, renew: ln.placeSent, wake: ln.wake}
	if !a.renew {
		a.firstAttempt = ln.firstAttempt
	}
	ln.placeSent = true
	return a
}

// attempted updates the line with the outcome of its attempt a, sent at
// start.
func (ls *lines) attempted(l *Locker, ln *line, a *attemptArgs, start time.Time, res attemptResult, err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln.inflight--
	l.noteErr(err)
	ln.heard = time.Now()
	a.firstAttempt.returned(res, err)
	if a.token != ln.token {
		// The line has left the token (it was granted the key, or spent):
		// nothing of this reply applies, but to a withdrawal that waits for it.
		if t := ln.pending[a.token]; t != nil && a.firstAttempt != nil && t.Stop() {
			delete(ln.pending, a.token)
			spend := a.firstAttempt.mayRun()
			l.background.run(func() { l.withdraw(ln.keys(), a.token, ln.mode, spend) })
			l.background.end() // the wait for the reply
		}
		ls.update(l, ln)
		return
	}
	now := ln.heard
	if err == nil {
		l.rtts.add(now.Sub(start))
	}
	ln.asked = time.Time{}
	ln.unblock()
	ln.lastErr = err
	if err != nil && len(ln.waiters) > 0 {
		h := ln.waiters[0] // waits for its backoff before the next attempt
		h.retryAt = now.Add(h.poll)
		h.poll = nextBackoff(h.poll, h.min, h.max)
	}
	switch {
	case err == nil && res.ours:
		ln.handed = nil
		lk := newLock(l, ln.key, a.token, ln.mode, res.fence, a.ttl, start)
		lk.set, lk.fences = ln.set, res.fences
		ls.grant(ln, lk)
	case err == nil && res.noPlace:
		// The place lapsed, or a hand-off to it went unheard and its lease
		// ran out: the token is spent. Take a new place with a new one.
		ln.place = noPlace
		ls.replaceToken(l, ln)
	case err == nil:
		ls.placed(l, ln, start)
		ln.holdEnd, ln.blockedFor = time.Time{}, res.pttl
		if res.pttl >= 0 {
			ln.holdEnd = time.Now().Add(res.pttl)
		}
	case permanent(err):
		// Waiting longer would not help: every waiter reports it. An
		// error reply means the attempt did not run; a closed client
		// sends nothing any more.
		for _, w := range ln.waiters {
			w.fail(err)
		}
	case refused(err):
		// Redis did not run it (it is loading, failing over, ...):
		// nothing changed; the head tries again after its backoff.
	default:
		ln.place = placeUnknown
	}
	ls.update(l, ln)
}

// placed records that a command sent at start confirmed the line's place.
// Replies of hedged renewals may come in any order: base is the latest.
func (ls *lines) placed(l *Locker, ln *line, start time.Time) {
	ln.place = placed
	ln.base = maxTime(ln.base, start)
	ln.renewAt = ln.base.Add(placeRenew)
	if ls.subs[ln.wake.channel] == nil {
		if ls.subs == nil {
			ls.subs = make(map[string]*subscription)
		}
		s := l.subscribe(ln.wake)
		ls.subs[ln.wake.channel] = s
		ls.started = append(slices.DeleteFunc(ls.started, (*subscription).ended), s)
	}
}

// blockedBefore records what an attempt made before the line was joined (a
// plain lock's: see deployment.acquire) found: the key held, with res.pttl
// left, and Redis answering. ln takes it as its latest reply until one of
// its own comes.
func (ls *lines) blockedBefore(ln *line, res attemptResult) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln.heard.IsZero() {
		ln.heard, ln.lastErr, ln.blockedFor = time.Now(), nil, res.pttl
	}
}

// armedFor reports whether hand-offs to ln's places are heard: its
// channel's subscription is confirmed. ls.mu is held.
func (ls *lines) armedFor(ln *line) bool { return ls.subs[ln.wake.channel].isArmed() }

// grant gives the key, which the line's token holds now, to the head: a
// new hold, which starts a round of passes. The line takes a new token for
// its next place.
func (ls *lines) grant(ln *line, lk *Lock) {
	if len(ln.waiters) == 0 {
		ln.handed = &handoff{fence: lk.fence, lease: lk.clock.ttl} // for the withdrawal
		return
	}
	w := ln.waiters[0]
	ln.waiters = ln.waiters[1:]
	lk.lined, lk.firstAttempt = true, ln.firstAttempt
	w.claim = w.ttl != lk.clock.ttl || (w.fenced && lk.fence == 0) || time.Until(lk.clock.until) < w.ttl/2
	lk.clock.ttl = w.ttl
	w.lock = lk
	w.poke()
	ln.hold, ln.passes, ln.round = lk, maxPasses, time.Now()
	ls.freshToken(ln)
}

// replaceToken gives ln a new token, and takes the old one out of Redis's line
// if it may have a place there (see withdrawToken).
func (ls *lines) replaceToken(l *Locker, ln *line) {
	if ln.place != noPlace || ln.inflight > 0 || ln.firstAttempt.mayRun() {
		ln.gaveUp = ln.token
		ls.withdrawToken(l, ln)
	}
	ls.freshToken(ln)
}

// withdrawToken withdraws ln's token, which the line leaves, from Redis (see
// Locker.withdraw): at once, marking the token spent when its first attempt
// may run later (see firstAttempt); when that attempt is on its way, once
// its reply comes, with no mark, since nothing of the token can run after
// it then — unless the reply takes longer than a silence (Redis stalls),
// after which it is done at once, with a mark, so that a hand-off to the
// token's place does not hold the key meanwhile.
func (ls *lines) withdrawToken(l *Locker, ln *line) {
	keys, token, m := ln.keys(), ln.token, ln.mode
	if !ln.firstAttempt.out.Load() {
		spend := ln.firstAttempt.mayRun()
		l.background.run(func() { l.withdraw(keys, token, m, spend) })
		return
	}
	if ln.pending == nil {
		ln.pending = make(map[string]*time.Timer)
	}
	l.background.begin() // ended when the withdrawal is under way
	ln.pending[token] = time.AfterFunc(l.silence(), func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if ln.pending[token] != nil {
			delete(ln.pending, token)
			l.background.run(func() { l.withdraw(keys, token, m, true) })
			l.background.end()
		}
	})
}

// A firstAttempt is what is known of the first attempt of a token: the one
// that may take a free key or a place. While it may still run, the token's
// withdrawal must not run before it, and the lock the token becomes must be
// marked spent when it is released (see spend.lua). The token's later
// attempts (renewals) may run late without harm: they take no free key and
// no place (see acquire.lua). The line and the Lock share it.
type firstAttempt struct {
	out    atomic.Bool // sent, and not returned
	unsure atomic.Bool // it returned, but may run later: its outcome was unknown, or go-redis sent it twice (see counted)
}

// returned records the attempt's outcome, (res, err); f may be nil (the
// attempt was not a first one).
func (f *firstAttempt) returned(res attemptResult, err error) {
	if f != nil {
		f.unsure.Store((err != nil && !refused(err) && !res.unsent) || res.resent)
		f.out.Store(false)
	}
}

// mayRun reports whether the attempt may still run; f may be nil (a token
// with no such attempt).
func (f *firstAttempt) mayRun() bool { return f != nil && (f.out.Load() || f.unsure.Load()) }

// unblock closes placedc: a Release waiting for the line's place waits no
// more (see placing).
func (ln *line) unblock() {
	if ln.placedc != nil {
		close(ln.placedc)
		ln.placedc = nil
	}
}

// freshToken gives ln a new token, with no place yet.
func (ls *lines) freshToken(ln *line) {
	if ln.own {
		if ls.byToken == nil {
			ls.byToken = make(map[string]*line)
		}
		delete(ls.byToken, ln.token)
		defer func() { ls.byToken[ln.token] = ln }()
	}
	ln.token, ln.place, ln.placeSent, ln.check, ln.handed, ln.holdEnd = newToken(), noPlace, false, false, nil, time.Time{}
	ln.firstAttempt = &firstAttempt{}
	ln.asked = time.Time{} // replies for the token left are not waited for
	ln.unblock()
}

// update brings the line up to date after a change: it applies a pending
// hand-off and wakes the head, and once nobody waits, keeps the line for
// its hold or detaches it and withdraws its place from Redis.
func (ls *lines) update(l *Locker, ln *line) {
	if h := ln.handed; h != nil && len(ln.waiters) > 0 {
		// The hand-off ran after the command that took the place, the
		// token's first attempt, sent at ln.first; base, when a reply
		// confirmed the place, is later still and as good.
		base := ln.firstSent
		if ln.place == placed {
			base = ln.base
		}
		switch {
		case !ln.placeSent:
			ln.check = true // the base is unknown: the head asks Redis
		case h.fence < 0:
			ln.handed, ln.place = nil, noPlace
			ln.waiters[0].fail(errFenceNotIssued)
		default:
			ln.handed = nil
			lk := newLock(l, ln.key, ln.token, ln.mode, h.fence, h.lease, base)
			lk.clock.until = base.Add(min(h.lease, placeLease)) // the place's deadline bounds it (see handOff in line.lua)
			ls.grant(ln, lk)
		}
	}
	if len(ln.waiters) > 0 {
		ln.waiters[0].poke()
		return
	}
	if !ln.detached && !ln.own && ln.handed == nil && hasHold(ln) {
		// Nobody waits: the line keeps its hold (for the Locker's next
		// Obtain to be passed it), not its place in Redis.
		if ln.place != noPlace || ln.inflight > 0 || ln.firstAttempt.mayRun() {
			ls.replaceToken(l, ln)
		}
		ls.keepFor(l, ln)
		return
	}
	ls.detach(ln)
	if ln.token != "" && (ln.place != noPlace || ln.handed != nil || ln.inflight > 0 || ln.firstAttempt.mayRun()) {
		// Clean up (see withdrawToken); replies to come are for a token the line
		// has left.
		ls.withdrawToken(l, ln)
		ln.token, ln.place, ln.handed = "", noPlace, nil
	}
}

// keepFor keeps a line without waiters while its hold lasts, so that the
// Locker's next Obtain of the key can be passed the lock. A timer drops it
// when the hold's lease ends, if the hold was never released.
func (ls *lines) keepFor(l *Locker, ln *line) {
	d := time.Until(ln.hold.Until())
	if ln.expiry == nil {
		ln.expiry = time.AfterFunc(d, func() {
			ls.mu.Lock()
			defer ls.mu.Unlock()
			ls.update(l, ln)
		})
		return
	}
	ln.expiry.Reset(d)
}

// detach takes ln out of byKey.
func (ls *lines) detach(ln *line) {
	if ln.detached {
		return
	}
	ln.detached = true
	ln.unblock()
	if ln.expiry != nil {
		ln.expiry.Stop()
	}
	if ls.byKey[ln.key] == ln {
		delete(ls.byKey, ln.key)
	}
	if ls.byToken[ln.token] == ln {
		delete(ls.byToken, ln.token)
	}
}

// fail ends w's wait with err.
func (w *waiter) fail(err error) {
	w.err = err
	w.poke()
}

// quit takes w, whose Obtain gives up, out of its line. It returns the lock
// if one was handed or passed to w meanwhile (the caller releases it, which
// passes it on), and the error of the line's latest attempt: nil when it
// found the key held (held is then the holder's lease left, as it said),
// unless an attempt sent since has gone unanswered for a silence (Redis
// stopped answering: that is no contention).
func (ls *lines) quit(l *Locker, ln *line, w *waiter) (lk *Lock, held time.Duration, last error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if w.lock != nil {
		return w.lock, 0, nil
	}
	for i, x := range ln.waiters {
		if x == w {
			ln.waiters = append(ln.waiters[:i], ln.waiters[i+1:]...)
			break
		}
	}
	last = ln.lastErr
	if silent := time.Since(ln.asked); last == nil && !ln.asked.IsZero() && silent > l.silence() {
		last = fmt.Errorf("%w for %v", errNoAnswer, silent.Round(time.Millisecond))
	}
	if errors.Is(last, errNoAnswer) {
		last = l.lastFailure(last)
	}
	held = ln.blockedFor
	ls.update(l, ln)
	return nil, held, last
}

// pass gives lk to the head of its line, without a round trip, if lk is the
// line's hold (see adopt) and the head may have it (see the note at the
// top): passed reports that lk is released, and the head has it. lined
// reports whether the Locker has a line for lk's key: then its
// release goes through that line (see deployment.release), and is never a
// plain lock's drop.
func (ls *lines) pass(lk *Lock) (passed, lined bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byKey[lk.key]
	if ln == nil {
		return false, false
	}
	if len(ln.waiters) == 0 || !ls.adopt(ln, lk) || ln.passes == 0 || time.Since(ln.round) > passSlice {
		return false, true
	}
	w := ln.waiters[0]
	if w.fenced || w.lock != nil || w.err != nil {
		return false, true
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	// The lease clock's end, which the next holder inherits: Until of lk
	// itself ended when its release began.
	left := time.Until(lk.clock.until)
	if lk.released || lk.lostWhy != nil || lk.lost || lk.clock.busy() || left < w.ttl/2 || left > w.ttl {
		return false, true
	}
	lk.released = true
	next := lk.passed(w.ttl)
	lk.endNow()
	ln.waiters = ln.waiters[1:]
	w.lock = next
	w.poke()
	ln.hold = next
	ln.passes--
	ls.update(lk.locker, ln)
	return true, true
}

// adopt reports whether lk is ln's hold, making it so when lk was taken
// without the line (a plain lock, or a single attempt: see
// deployment.acquire) while the line has no hold: the Locker holds the key,
// and its round began when lk was acquired. So a lock that nobody waited
// for when it was taken is passed like one the line got from Redis.
// ls.mu is held.
func (ls *lines) adopt(ln *line, lk *Lock) bool {
	if ln.hold == lk {
		return true
	}
	if ln.hold != nil || lk.lined || lk.mode != (lockMode{}) || lk.set != nil {
		return false // (a set's lock holds other keys too: it is never passed)
	}
	ln.hold, ln.passes, ln.round = lk, maxPasses, lk.since
	return true
}

// placing returns a channel that is closed when the line of lk's key,
// whose waiters have no confirmed place in Redis (the line was just
// granted the key, and its first attempt with a new token is about to be
// sent, or on its way), gets a reply; nil when there is nothing to wait
// for. A release through Redis waits for it (see Lock.end), so that the
// key is not free, for anyone to take, while this Locker's waiters are
// between two places.
func (ls *lines) placing(lk *Lock) <-chan struct{} {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.byKey[lk.key]
	if ln == nil || len(ln.waiters) == 0 || ln.place == placed {
		return nil
	}
	if ln.placedc == nil {
		ln.placedc = make(chan struct{})
	}
	return ln.placedc
}

// prepareRelease prepares the release of lk through Redis. A lock that was
// the line's hold ends it; a line that nobody waits in any more withdraws
// its place in the same script (withdraw: its token, returned with the
// line, whose outcome releaseDone takes in).
func (ls *lines) prepareRelease(lk *Lock) (ln *line, withdraw string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln = ls.byKey[lk.key]
	if ln == nil || ln.hold != lk {
		return nil, ""
	}
	ln.hold = nil
	if len(ln.waiters) > 0 {
		return nil, ""
	}
	if ln.place != noPlace && ln.handed == nil && ln.inflight == 0 && !ln.firstAttempt.mayRun() {
		ls.detach(ln)
		ln.inflight++ // the place goes in the release's script
		return ln, ln.token
	}
	// The place the line last gave up goes in the release's script too,
	// should its own withdrawal not have reached Redis yet: the release must
	// not hand the key to it.
	withdraw = ln.gaveUp
	ls.update(lk.locker, ln) // detaches it, and withdraws what needs it
	return nil, withdraw
}

// releaseDone takes in a release's outcome: the place it withdrew for ln
// (when not nil), and the hand-offs it made to lines of this Locker. When
// its outcome is unknown, a hand-off to a line of this Locker may have gone
// unheard: their heads ask Redis.
func (ls *lines) releaseDone(l *Locker, keys []string, ln *line, res releaseResult, err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case err == nil:
		for _, h := range res.handed {
			ls.handedTo(l, keys[h.at], h)
		}
		if res.resent { // an earlier run's hand-offs went with its reply
			ls.ask(keys)
		}
	case !refused(err):
		ls.ask(keys)
	}
	if ln != nil {
		ln.inflight--
		if err == nil {
			ln.place = noPlace
		} else if !refused(err) {
			ln.place = placeUnknown
		}
		ls.update(l, ln)
	}
}

// handedTo records a hand-off of key to h.token, if that is the token of one
// of our lines; else it is not ours, or of a line that left: its withdrawal
// passes it on. A set's line is asked to try instead (fenceAsk: see
// line.lua): it takes its keys itself.
func (ls *lines) handedTo(l *Locker, key string, h handoff) {
	ln := ls.byKey[key]
	if ln == nil || ln.token != h.token {
		if ln = ls.byToken[h.token]; ln == nil || !slices.Contains(ln.keys(), key) {
			return
		}
	}
	if h.fence == fenceAsk {
		ln.check = true
	} else {
		ln.handed = &h
	}
	ls.update(l, ln)
}

// ask makes the heads of the lines of keys ask Redis whether a key was
// handed to them (a set's, whether it may take them). ls.mu is held.
func (ls *lines) ask(keys []string) {
	ask := func(ln *line) {
		if ln.place == placed && len(ln.waiters) > 0 && slices.ContainsFunc(ln.keys(), func(k string) bool { return slices.Contains(keys, k) }) {
			ln.check = true
			ln.waiters[0].poke()
		}
	}
	for _, key := range keys {
		if ln := ls.byKey[key]; ln != nil {
			ask(ln)
		}
	}
	for _, ln := range ls.byToken {
		ask(ln)
	}
}

// fail ends the wait of every waiter of the Locker with err: the client is
// closed, and no attempt can be sent any more.
func (ls *lines) fail(err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, m := range []map[string]*line{ls.byKey, ls.byToken} {
		for _, ln := range m {
			for _, w := range ln.waiters {
				w.fail(err)
			}
		}
	}
}

// heard is called by the subscription for an announced hand-off.
func (ls *lines) heard(l *Locker, key string, h handoff) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.handedTo(l, key, h)
}

// armed is called by the subscription s when it is confirmed (on) or lost
// (off). Heads of lines on its channel poll while it is lost, and ask
// Redis once it is back, since a hand-off may have gone unheard.
func (ls *lines) armed(s *subscription, on bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, m := range []map[string]*line{ls.byKey, ls.byToken} {
		for _, ln := range m {
			if ln.wake.channel != s.wake.channel {
				continue
			}
			if on && ln.place != noPlace {
				ln.check = true
			}
			if len(ln.waiters) > 0 {
				ln.waiters[0].poke()
			}
		}
	}
}

// subscriptionEnded waits until the Locker's subscriptions have ended, or
// ctx ends. One that is idle retires at once, without lingering.
func (ls *lines) subscriptionEnded(ctx context.Context) error {
	ls.mu.Lock()
	ls.shuttingDown = true
	subs := slices.Clone(ls.started)
	ls.mu.Unlock()
	for _, s := range subs {
		select {
		case <-s.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// retire reports whether the subscription s may stop: no line on its
// channel has had a waiter for linger. It is then no longer the
// subscription of its channel.
func (ls *lines) retire(s *subscription, linger time.Duration) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, m := range []map[string]*line{ls.byKey, ls.byToken} {
		for _, ln := range m {
			if ln.wake.channel == s.wake.channel && (len(ln.waiters) > 0 || ln.own) {
				s.idle = time.Time{}
				return false
			}
		}
	}
	if s.idle.IsZero() {
		s.idle = time.Now()
	}
	if time.Since(s.idle) < linger && !ls.shuttingDown {
		return false
	}
	if ls.subs[s.wake.channel] == s {
		delete(ls.subs, s.wake.channel)
	}
	return true
}

// withdraw takes token out of key's line in Redis (a place a line gave up), or
// releases the key if token holds it (it was handed to that place, or
// taken by an acquisition that gave up), which hands it on. With spend, it
// also marks the token spent (see spend.lua), for as long as go-redis may
// still send a command of it: a copy of an attempt that runs later takes
// nothing. It tries again until it reaches Redis, within withdrawTimeout:
// the attempt may have taken the key, and nothing else would give it back
// before its lease ends.
func (l *Locker) withdraw(keys []string, token string, m lockMode, spend bool) {
	ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
	defer cancel()
	a := releaseArgs{key: keys[0], token: token, mode: m, wake: l.wakeFor(keys[0]).channel}
	if len(keys) > 1 {
		a.set = keys
	}
	if spend {
		a.spend = l.spendFor()
	}
	for {
		res, err := runRelease(ctx, l.client, l.keys, a)
		if err == nil || refused(err) || errors.Is(err, redis.ErrClosed) || sleep(ctx, nil, renewRetry) != nil {
			l.lines.releaseDone(l, keys, nil, res, err)
			return
		}
	}
}

// nextBackoff returns the polling delay after prev: drawn at random from
// [min, 3*prev], capped at max ("decorrelated jitter"), so that polling
// waiters spread out instead of asking in lockstep.
func nextBackoff(prev, min, max time.Duration) time.Duration {
	hi := 3 * prev
	if hi > max {
		hi = max
	}
	if hi <= min {
		return min
	}
	return min + mathrand.N(hi-min+1)
}

// silence is how long an attempt of l may go unanswered before Redis is
// taken to have stopped answering: noAnswer, or twice the link's round trip
// on a slower link, so that a slow but healthy link does not turn
// contention into a Redis failure.
func (l *Locker) silence() time.Duration {
	return max(noAnswer, 2*l.rtts.typical())
}

// roundTrips are the round trips of the latest two answered attempts.
type roundTrips struct {
	mu         sync.Mutex
	last, prev time.Duration
}

func (r *roundTrips) add(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prev, r.last = r.last, d
}

// typical is the smaller of the latest two (the latest while there is only
// one): one slow reply (a retransmission, a pause of this process) does not
// make a Redis that stops answering right after it look like a slow link.
func (r *roundTrips) typical() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.prev == 0 {
		return r.last
	}
	return min(r.prev, r.last)
}
