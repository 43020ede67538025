package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// roundSize is how many critical sections a Locker's round in the fair
// line has at most (Obtain: "a round of at most 17 critical sections").
const roundSize = 17

// CheckLiveness checks that once the faults have healed, every waiter is
// served, in its turn. It judges every Obtain and WithLock, and every
// ObtainMulti and WithLockMulti (not TryObtain or TryObtainMulti, which
// may fail on contention), that was waiting at the heal or was called
// after it, over its wait: from the later of its call and the heal to its
// return.
//
//   - No idle key: the waiter's keys were all free (no holder's right ran
//     on any of them) for at most Bound in all while it waited. Bound (per
//     deployment) allows for the lease a lost holder may leave in Redis
//     and for the hand-offs. Rights are recorded at least as long as they
//     were, so this errs toward finding the keys busy: it may miss a wait,
//     never invent one. Any holder counts as busy, also a reader while a
//     reader waits. A key is also busy while a set that has it waits and
//     may be ahead of the waiter (called before it, or less than
//     placeSlack after): the first place in a key's line may be a set's
//     that waits for its other keys, and the key then stays free (nobody
//     overtakes the first in line; on a Cluster a set may also hold the
//     keys of its earlier slots, unrecorded, while it waits for the later
//     ones). That set is judged itself, by the same rule.
//   - In its turn (fair deployments only, not NewQuorum, whose waiting is
//     not fair): acquisitions called after the waiter (and after the heal)
//     and served before it number at most roundSize per worker process on
//     each key it waits for from its call (Obtain: a waiter waits for the
//     round under way, then for one round of each Locker ahead of it). A
//     set across Cluster slots waits in the lines of its first slot's keys
//     from its call, and in a later slot's only once it holds the earlier
//     ones: only its first slot's keys are judged (linedKeys).
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
		if tries(e.Call) || e.Return < h.Heal {
			continue
		}
		from, to := max(e.Invoke, h.Heal), min(e.Return, h.Stop)
		call := fmt.Sprintf("%s %s(%s) called %s, returned %s %s", holdID(e), e.Call, e.Mode, ms(e.Invoke), e.Outcome, ms(e.Return))
		if e.Keys != nil {
			call = fmt.Sprintf("%s %s(%s) of the set %v called %s, returned %s %s", holdID(e), e.Call, e.Mode, e.Keys, ms(e.Invoke), e.Outcome, ms(e.Return))
		}
		if idle := idleTime(h, groups, e, from, to); idle > h.Bound {
			out = append(out, Violation{Property: PropLiveness, Key: e.Key, At: to,
				Evidence: fmt.Sprintf("the key was idle for %s in all while it waited (bound %s; heal at %s)\n%s",
					ms(idle), ms(h.Bound), ms(h.Heal), call)})
		}
		if !h.Unfair {
			for _, key := range linedKeys(h, e) {
				if ahead := overtakers(groups[key], e, h.Heal, to); len(ahead) > roundSize*h.Procs {
					out = append(out, Violation{Property: PropLiveness, Key: key, At: to,
						Evidence: fmt.Sprintf("%d acquisitions called after it were served before it on %s (at most %d: %d processes' rounds)\n%s\nfirst: %s",
							len(ahead), key, roundSize*h.Procs, h.Procs, call, ahead[0])})
				}
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

// placeSlack is how much later than a waiter a set may be called and still
// have its place ahead of the waiter's in a key's line: a place is taken
// by the first attempt, a round trip after the call (on 2 loaded cores
// under -race, round trips of 100 ms and more are seen).
const placeSlack = int64(500 * time.Millisecond)

// idleTime is how long, within [from, to], none of the keys of the
// attempt e was busy: no hold but e's had a right that ran on one of
// them, and no set that has one of them waited, called before e or less
// than placeSlack after (see CheckLiveness).
func idleTime(h *History, groups map[string][]*Hold, e Event, from, to int64) int64 {
	type span struct{ start, end int64 }
	var spans []span
	waiter := holdID(e)
	keys := keysOf(e)
	for _, key := range keys {
		for _, hd := range groups[key] {
			if hd.ID != waiter && hd.Acquired < to && hd.End > from {
				spans = append(spans, span{max(hd.Acquired, from), min(hd.End, to)})
			}
		}
	}
	for _, s := range h.Attempts {
		if s.Keys == nil || tries(s.Call) || holdID(s) == waiter || s.Invoke >= e.Invoke+placeSlack ||
			!slices.ContainsFunc(s.Keys, func(k string) bool { return slices.Contains(keys, k) }) {
			continue
		}
		end := s.Return // it waited until it acquired (the hook's stamp), or until it returned without
		if s.Outcome == OutOK && s.At != 0 {
			end = s.At
		}
		if s.Invoke < to && end > from {
			spans = append(spans, span{max(s.Invoke, from), min(end, to)})
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

// linedKeys returns the keys of the attempt e in whose lines it waits from
// its call: all of them, but on a Cluster only a set's keys of its first
// slot (the lowest: a set takes its slots in order, and waits in a later
// slot's lines only once it holds the earlier ones).
func linedKeys(h *History, e Event) []string {
	keys := keysOf(e)
	if e.Keys == nil || h.Deploy != DeployCluster {
		return keys
	}
	first := clusterSlot(keys[0])
	for _, k := range keys {
		first = min(first, clusterSlot(k))
	}
	var out []string
	for _, k := range keys {
		if clusterSlot(k) == first {
			out = append(out, k)
		}
	}
	return out
}

// clusterSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the part between the first "{" and the next "}", when not
// empty) or of the whole key, modulo 16384.
func clusterSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
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

// WaitsAfterHeal returns how many Obtain and WithLock calls (and their
// Multi) CheckLiveness judged, and the longest any of them waited from the later of its call
// and the heal.
func WaitsAfterHeal(h *History) (n int, longest int64) {
	for _, e := range h.Attempts {
		if tries(e.Call) || e.Return < h.Heal {
			continue
		}
		n++
		longest = max(longest, min(e.Return, h.Stop)-max(e.Invoke, h.Heal))
	}
	return n, longest
}
