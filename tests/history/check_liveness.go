package history

import (
	"fmt"
	"slices"
	"strings"
)

// roundSize is how many critical sections a Locker's round in the fair
// line has at most (Obtain: "a round of at most 17 critical sections").
const roundSize = 17

// CheckLiveness checks that once the faults have healed, every waiter is
// served, in its turn. It judges every Obtain and WithLock (not TryObtain,
// which may fail on contention) that was waiting at the heal or was called
// after it, over its wait: from the later of its call and the heal to its
// return.
//
//   - No idle key: the key was held by nobody (no holder's right ran) for
//     at most Bound in all while the waiter waited. Bound (per deployment)
//     allows for the lease a lost holder may leave in Redis and for the
//     hand-offs. Rights are recorded at least as long as they were, so
//     this errs toward finding the key busy: it may miss a wait, never
//     invent one. Any holder counts as busy, also a reader while a reader
//     waits.
//   - In its turn (fair deployments only, not NewQuorum, whose waiting is
//     not fair): acquisitions called after the waiter (and after the heal)
//     and served before it number at most roundSize per worker process
//     (Obtain: a waiter waits for the round under way, then for one round
//     of each Locker ahead of it).
//   - No failure: a call that ended with an error after the heal, other
//     than giving up at its own deadline, failed; except a call made
//     before the heal that failed within a ttl after it.
//
// A call still waiting at the stop was cancelled then; its wait is judged
// up to the stop.
func CheckLiveness(h *History) []Violation {
	var out []Violation
	groups := byKey(h.Holds)
	for _, e := range h.Attempts {
		if e.Call == CallTry || e.Return < h.Heal {
			continue
		}
		from, to := max(e.Invoke, h.Heal), min(e.Return, h.Stop)
		call := fmt.Sprintf("%s %s(%s) called %s, returned %s %s", holdID(e), e.Call, e.Mode, ms(e.Invoke), e.Outcome, ms(e.Return))
		if idle := idleTime(groups[e.Key], holdID(e), from, to); idle > h.Bound {
			out = append(out, Violation{Property: PropLiveness, Key: e.Key, At: to,
				Evidence: fmt.Sprintf("the key was idle for %s in all while it waited (bound %s; heal at %s)\n%s",
					ms(idle), ms(h.Bound), ms(h.Heal), call)})
		}
		if !h.Unfair {
			if ahead := overtakers(groups[e.Key], e, h.Heal, to); len(ahead) > roundSize*h.Procs {
				out = append(out, Violation{Property: PropLiveness, Key: e.Key, At: to,
					Evidence: fmt.Sprintf("%d acquisitions called after it were served before it (at most %d: %d processes' rounds)\n%s\nfirst: %s",
						len(ahead), roundSize*h.Procs, h.Procs, call, ahead[0])})
			}
		}
		gaveUp := e.Outcome == OutNotObtained || e.Outcome == OutCanceled ||
			(e.Outcome == OutError && strings.Contains(e.Err, "deadline exceeded"))
		// A call that began before the heal may fail for the fault just
		// after it: an attempt in flight at the heal (a WAIT of up to 500 ms
		// begun before it) ends within a ttl.
		inFlight := e.Invoke < h.Heal && e.Return < h.Heal+h.TTL
		if e.Outcome != OutOK && !gaveUp && !inFlight {
			out = append(out, Violation{Property: PropLiveness, Key: e.Key, At: e.Return,
				Evidence: fmt.Sprintf("failed after the heal at %s: %s\n%s", ms(h.Heal), e.Err, call)})
		}
	}
	return out
}

// idleTime is how long, within [from, to], no hold of holds but waiter's
// had a right that ran.
func idleTime(holds []*Hold, waiter string, from, to int64) int64 {
	type span struct{ start, end int64 }
	var spans []span
	for _, hd := range holds {
		if hd.ID != waiter && hd.Acquired < to && hd.End > from {
			spans = append(spans, span{max(hd.Acquired, from), min(hd.End, to)})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp64(a.start, b.start) })
	idle, covered := int64(0), from
	for _, s := range spans {
		if s.start > covered {
			idle += s.start - covered
		}
		covered = max(covered, s.end)
	}
	return idle + max(0, to-covered)
}

// overtakers returns the holds that were called after the attempt e (and
// after heal) and acquired before it was served (or before to, if it was
// not).
func overtakers(holds []*Hold, e Event, heal, to int64) []*Hold {
	var out []*Hold
	for _, hd := range holds {
		if hd.ID != holdID(e) && hd.Invoke > max(e.Invoke, heal) && hd.Acquired < to {
			out = append(out, hd)
		}
	}
	return out
}

// WaitsAfterHeal returns how many Obtain and WithLock calls CheckLiveness
// judged, and the longest any of them waited from the later of its call
// and the heal.
func WaitsAfterHeal(h *History) (n int, longest int64) {
	for _, e := range h.Attempts {
		if e.Call == CallTry || e.Return < h.Heal {
			continue
		}
		n++
		longest = max(longest, min(e.Return, h.Stop)-max(e.Invoke, h.Heal))
	}
	return n, longest
}
