package lease

import (
	"slices"
	"time"
)

// The lease: the lock's ttl in Redis, the key's expiry. Its one clock, and
// the one sequence that sets it.
//
// A clock is the end of a lock's lease as this process knows it, on
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
// Until (see Hold.Until) is the earlier of until and over, when the lock
// ended for this process: found lost, or its release begun (Release, the
// give-back after a loss, a pass). Hold.endNow is the one writer of over,
// and every path that ends a lock calls it before it sends anything that
// frees the key. So the key is freed either by its expiry, at or after
// until, or by a command of this process, sent at or after over: never
// before Until. Once over is set, nothing sets the lease any more
// (beginSet refuses).
type clock struct {
	until  time.Time
	ttl    time.Duration // the lease renewals set: the acquisition's, or the latest Refresh's sent
	gen    int64         // the generation of the latest command sent
	genTTL time.Duration // the length that the commands of generation gen set
	cmds   []leaseCmd    // commands that Redis may run after one in flight
	last   uint64        // the id of the latest command sent
	drift  bool          // a quorum lock's: each lease ends Drift early
}

// lease is how long a lease of ttl lasts on the local clock: ttl, less
// Drift(ttl) for a quorum lock (see Drift for the argument).
func (c *clock) lease(ttl time.Duration) time.Duration {
	if c.drift {
		return ttl - Drift(ttl)
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
// its id and generation; renewals set ttl from then on. A command that sets
// another length than the one sent before it starts a new generation.
// moved reports that until changed.
func (c *clock) send(sent time.Time, ttl time.Duration) (id uint64, gen int64, moved bool) {
	if ttl != c.genTTL {
		c.gen, c.genTTL = c.gen+1, ttl
	}
	c.ttl = ttl
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

// record records the outcome of command id, known at now. moved reports
// that until changed.
func (c *clock) record(id uint64, out outcome, now time.Time) (moved bool) {
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
// generation has superseded, or that were sent before every command in
// flight. (A failed command bounds the outcome of one sent before it: one
// sent after it is of its generation and length, or of a later generation,
// which Redis refuses it after.)
func (c *clock) prune(now time.Time) {
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
			return o.gen < setGen || !oldest.Before(o.sent)
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
func (c *clock) busy() bool {
	return slices.ContainsFunc(c.cmds, func(o leaseCmd) bool { return o.done.IsZero() })
}

// Drift is how much earlier than its ttl a quorum lock's lease ends on the
// local clock (see clock.lease), Redlock's allowance: 1% of the lease for
// the masters' clocks, which measure it, running faster than this
// process's; and 2ms for Redis's millisecond resolution (the scripts read
// Redis's clock cut to the millisecond, and Redis expires keys by a
// millisecond clock).
//
// The clock's invariant (until never later than the expiry on a majority)
// holds with it: the clock's argument, node by node, only uses that a
// command sent at S that sets a lease of ttl, and that a node runs at E >=
// S, leaves the key there until at least E + ttl on the local clock. With
// the masters' clocks running at most 1% fast, and their millisecond
// resolution costing at most 2ms, it leaves the key there until at least E
// + ttl - Drift(ttl) instead: the argument goes through with every lease of
// ttl counted as ttl - Drift(ttl), which is what the clock counts. That
// length grows with ttl (0.99 ttl - 2ms), so comparing leases by their ttl
// (as the clock's pruning does) still compares their lengths.
func Drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}
