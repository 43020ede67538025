package redislock

import (
	"context"
	"slices"
	"time"
)

// The lease: the lock's ttl in Redis, the key's expiry. Its one clock, and
// the one sequence that sets it.
//
// A leaseClock is the end of a lock's lease as this process knows it, on
// the monotonic clock, and the commands that may still move it: renewals
// (several may be in flight, see keeper), Refresh, claims. Its methods are
// the only writers of until; leaseSet's are the only callers of send and
// record.
//
// Invariant: until is never later than the key's expiry in Redis, whatever
// the order in which Redis runs the commands in flight, and even when one
// runs late or twice (go-redis sends a command again after a timeout, and a
// closed connection still delivers what it had sent). The argument:
//
//   - Every command that sets the lease sets it to a length from when
//     Redis runs it (PX ttl), never adds to what is left: the argument
//     below rests on that, and a command of another kind would need one of
//     its own.
//   - Each command carries a generation. A command that sets another
//     length than the one before it (a Refresh to another ttl, a claim)
//     starts a new one, so
//     that all the commands of a generation set the same length, whatever
//     became of those before them (a Refresh abandoned at its deadline may
//     still run). Redis keeps, per holder, the highest generation it ran,
//     for as long as the holder's lease lasts, and refuses a command of a
//     lower one (the gens hash: see generation.lua). So the commands that
//     set the lease, in the order Redis runs them, are of generations that
//     never go down. An acquire attempt that runs again for a token that
//     holds the key (a late copy) only lengthens the lease, if anything
//     (see acquire.lua): it cannot move the expiry below until either.
//   - A command sent at S that sets the lease to ttl sets the expiry to
//     E + ttl, where E >= S is when Redis runs it; the expiry is that of the
//     last one Redis ran. send lowers until to S + ttl at once, before Redis
//     can run the command: whenever it runs, the expiry stays at or above
//     until.
//   - record, when a command sent at S that set the lease to ttl is known
//     to have run, raises until to S + ttl, but not above max(S, S') + ttl'
//     for any command (S', ttl') of the same or a later generation that
//     Redis may run after it: those in flight, those that failed (they may
//     still run), and those whose outcome arrived after S. Such a command
//     runs at some E' >= S' and, being later, E' >= S: it leaves the expiry
//     at E' + ttl' >= max(S, S') + ttl'. A command of an earlier generation
//     cannot run after it: Redis refuses it. So a late copy of a shorter
//     Refresh cannot shorten the lease behind until's back, and a renewal
//     of the same length stuck on a dead connection does not hold until
//     back.
//
// Until (see Lock.Until) is the earlier of until and over, when the lock
// ended for this process: found lost, or its release begun (Release, the
// give-back after a loss, a pass). Lock.endNow is the one writer of over,
// and every path that ends a lock calls it before it sends anything that
// frees the key. So the key is freed either by its expiry, at or after
// until, or by a command of this process, sent at or after over: never
// before Until. Once over is set, nothing sets the lease any more
// (beginSet refuses).
type leaseClock struct {
	until  time.Time
	ttl    time.Duration // the lease renewals set: the acquisition's, or the latest Refresh's sent
	gen    int64         // the generation of the latest command sent
	genTTL time.Duration // the length that the commands of generation gen set
	cmds   []leaseCmd    // commands that Redis may run after one in flight
	last   uint64        // the id of the latest command sent
	drift  bool          // a quorum lock's: each lease ends quorumDrift early
}

// lease is how long a lease of ttl lasts on the local clock: ttl, less
// quorumDrift(ttl) for a quorum lock (see quorumDrift for the argument).
func (c *leaseClock) lease(ttl time.Duration) time.Duration {
	if c.drift {
		return ttl - quorumDrift(ttl)
	}
	return ttl
}

// A leaseCmd is a command that sets the lease.
type leaseCmd struct {
	id     uint64
	sent   time.Time
	ttl    time.Duration
	gen    int64
	done   time.Time // when its outcome arrived; zero while in flight
	failed bool      // its outcome is unknown: it may still run
}

// send records a command that sets the lease to ttl, sent now, and returns
// its id and generation. A command that sets another length than the one
// sent before it starts a new generation. moved reports that until changed.
func (c *leaseClock) send(sent time.Time, ttl time.Duration) (id uint64, gen int64, moved bool) {
	if ttl != c.genTTL {
		c.gen, c.genTTL = c.gen+1, ttl
	}
	end := sent.Add(c.lease(ttl))
	if end.Before(c.until) {
		c.until, moved = end, true
	}
	c.last++
	c.cmds = append(c.cmds, leaseCmd{id: c.last, sent: sent, ttl: ttl, gen: c.gen})
	return c.last, c.gen, moved
}

// An outcome is what became of a command that sets the lease.
type outcome int

const (
	outcomeSet     outcome = iota // it ran and set the lease
	outcomeNotSet                 // it ran and did not (the key was not ours, or a later generation had run)
	outcomeUnknown                // it failed: it may have run, or run later
)

// record records the outcome of command id. moved reports that until
// changed.
func (c *leaseClock) record(id uint64, out outcome) (moved bool) {
	now := time.Now()
	i := slices.IndexFunc(c.cmds, func(x leaseCmd) bool { return x.id == id })
	if i < 0 {
		return false
	}
	c.cmds[i].done, c.cmds[i].failed = now, out == outcomeUnknown
	me := c.cmds[i]
	if out == outcomeSet {
		end := me.sent.Add(c.lease(me.ttl))
		for _, o := range c.cmds {
			if o.id != id && o.gen >= me.gen && (o.done.IsZero() || o.failed || o.done.After(me.sent)) {
				// o may run after me: it leaves at least this.
				if e := maxTime(me.sent, o.sent).Add(c.lease(o.ttl)); e.Before(end) {
					end = e
				}
			}
		}
		if end.After(c.until) {
			c.until, moved = end, true
		}
	}
	c.prune(now)
	return moved
}

// prune forgets the commands that can no longer bound until: those that
// ran before every command in flight was sent, and failed ones that a later
// generation has superseded or that are no shorter than the lease set now.
func (c *leaseClock) prune(now time.Time) {
	oldest := now
	var setGen int64 = -1
	for _, o := range c.cmds {
		if o.done.IsZero() && o.sent.Before(oldest) {
			oldest = o.sent
		}
	}
	for _, o := range c.cmds {
		if !o.done.IsZero() && !o.failed {
			setGen = max(setGen, o.gen)
		}
	}
	c.cmds = slices.DeleteFunc(c.cmds, func(o leaseCmd) bool {
		switch {
		case o.done.IsZero():
			return false
		case o.failed:
			return o.gen < setGen || o.ttl >= c.ttl
		}
		return !o.done.After(oldest)
	})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// busy reports whether commands that set the lease are in flight.
func (c *leaseClock) busy() bool {
	return slices.ContainsFunc(c.cmds, func(o leaseCmd) bool { return o.done.IsZero() })
}

// refreshArgs returns the arguments of a command that sets lk's lease to
// ttl, of generation gen, issuing a fence when fenced.
func (lk *Lock) refreshArgs(ttl time.Duration, gen int64, fenced bool) refreshArgs {
	return refreshArgs{key: lk.key, set: lk.set, token: lk.token, mode: lk.mode, ttl: ttl, gen: gen, fenced: fenced, described: lk.described}
}

// rescheduleRenewal reschedules KeepAlive's next renewal of lk from the
// lease a command set (beginSet made its length the one renewals set).
func (lk *Lock) rescheduleRenewal() {
	lk.mu.Lock()
	r := lk.renewal
	lk.mu.Unlock()
	if r != nil {
		lk.locker.keeper.reschedule(r)
	}
}

// lease returns the lease's local end and the ttl renewals set.
func (lk *Lock) lease() (until time.Time, ttl time.Duration) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.clock.until, lk.clock.ttl
}

// A renewReply is the outcome of one command that sets a lease: err when
// it failed (it may have run, or run later), else the code of renew.lua's
// reply: replyOK (the lease was set, with fences when asked for),
// replySuperseded (held, but Redis had run a command of a later generation:
// not set) or replyNotOurs (not held: lost).
type renewReply struct {
	code    int64
	fences  []int64 // issued, one per key (when asked for)
	missing int     // replyNotOurs: the first key not held, by its place in the lock's keys from 1 (0: not known)
	err     error
}

func (r renewReply) set() bool  { return r.err == nil && r.code == replyOK }
func (r renewReply) lost() bool { return r.err == nil && r.code == replyNotOurs }

// outcome is the reply's outcome for the lease clock.
func (r renewReply) outcome() outcome {
	switch {
	case r.err != nil:
		return outcomeUnknown
	case r.code == replyOK:
		return outcomeSet
	}
	return outcomeNotSet
}

// event is the reply's outcome for Hooks.Renew.
func (r renewReply) event() Outcome {
	switch {
	case r.err != nil:
		return OutcomeError
	case r.code == replyOK:
		return OutcomeRenewed
	case r.code == replySuperseded:
		return OutcomeSuperseded
	}
	return OutcomeLost
}

// A leaseSet is one command that sets a lock's lease: the one sequence by
// which every lease is set (an acquisition's claim, Refresh, the keeper's
// renewals, a quorum's acquisition). beginSet records it on the lease
// clock before it is sent; the caller sends it, alone (setLease) or in a
// pipeline of the keeper's (keeper.renew), through the Locker's backend;
// done records its reply.
type leaseSet struct {
	lk   *Lock
	id   uint64
	args refreshArgs
}

// beginSet records that a command setting lk's lease to ttl (and issuing
// a fence, when fence) is sent now; ok is false when lk is released, being
// released, or lost: nothing may change its lease any more (a pass hands
// its lease on). It and done move the lost-lock timer of KeepAlive along
// with the lease. When a command shortens the lease (a Refresh to a
// shorter ttl), the next renewal is made due a third of that ttl later, so
// that the lease is renewed in time should the command never return (a
// dead connection).
func (lk *Lock) beginSet(ttl time.Duration, fence bool) (s leaseSet, ok bool) {
	lk.mu.Lock()
	if lk.released || lk.releasing || lk.lost || lk.lostWhy != nil {
		lk.mu.Unlock()
		return leaseSet{}, false
	}
	sent := time.Now()
	id, gen, moved := lk.clock.send(sent, ttl)
	lk.clock.ttl = ttl // a renewal sent after a Refresh sets its length
	lk.generations = lk.generations || gen > 0
	r := lk.renewal
	if moved {
		lk.moveExpiry()
	}
	lk.mu.Unlock()
	if moved && r != nil {
		lk.locker.keeper.hurry(r, sent, ttl)
	}
	return leaseSet{lk: lk, id: id, args: lk.refreshArgs(ttl, gen, fence)}, true
}

// done records r, the reply to s, on the lease clock, and the fence it
// issued.
func (s leaseSet) done(r renewReply) {
	lk := s.lk
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.clock.record(s.id, r.outcome()) {
		lk.moveExpiry()
	}
	if r.set() && s.args.fenced {
		lk.fence = r.fences[0]
		if lk.set != nil {
			lk.fences = r.fences
		}
	}
}

// setLease sets lk's lease to ttl from now, issuing a fence when fence,
// with one command bounded by ctx (see call), and makes ttl the lease that
// renewals set. A reply that is lost() says that lk does not hold the key
// (or is released or lost already: nothing was sent); the caller decides
// what that means (Refresh: lost; an acquisition's claim: the lease ran
// out).
func (lk *Lock) setLease(ctx context.Context, ttl time.Duration, fence bool) (renewReply, error) {
	s, ok := lk.beginSet(ttl, fence)
	if !ok {
		return renewReply{}, nil
	}
	l := lk.locker
	r, err := call(ctx, l, func(ctx context.Context) (renewReply, error) {
		r := l.backend.renew(ctx, []refreshArgs{s.args}, lk.replicas)[0]
		s.done(r)
		return r, r.err
	})
	if err == nil && r.set() {
		lk.rescheduleRenewal()
	}
	return r, err
}
