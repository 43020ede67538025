package history

import (
	"fmt"
	"strings"
)

// CheckExclusion checks that holders whose rights conflict never held at
// overlapping times, per key:
//
//   - a lock: no two holders at once;
//   - a read-write lock: no writer beside another holder (reader or
//     writer); readers together are fine;
//   - a semaphore of n: never more than n holders at once.
//
// A set of keys is a holder of each of its keys (a Hold per key, with the
// set's right and lease): an exclusive set is the writer of each
// read-write key in it, a reader set a reader. So a set that overlaps a
// holder of one of its keys is reported on that key, and two sets that
// overlap on several keys once per key they share.
//
// A holder's right runs from Hold.Acquired to Hold.End. Both err toward
// reporting: Acquired is stamped by the Obtain hook, before the call
// returned (the holder could act only after), and End is the earliest
// moment its Release was called or its lock context was seen done, which
// is at or after the moment the context ended. So a reported overlap may
// include up to a scheduling delay of the observing goroutine, and an
// overlap that happened is never missed (the clock resolution aside).
//
// Every overlap is reported, once per pair of conflicting holders (for a
// semaphore: once per holder that made one too many, with all the holders
// then), as an anomaly unless explainOverlap finds the documented limit
// behind it.
func CheckExclusion(h *History) []Violation {
	var out []Violation
	groups := byKey(h.Holds)
	for _, key := range sortedKeys(groups) {
		spec := h.kindOf(key)
		var live []*Hold // holders whose right has not ended, in order of acquisition
		for _, b := range groups[key] {
			live = liveAt(live, b.Acquired)
			switch spec.Kind {
			case KindSemaphore:
				if len(live)+1 > spec.Permits {
					out = append(out, semaphoreViolation(h, spec, live, b))
				}
			default:
				for _, a := range live {
					if spec.Kind == KindRW && a.Mode == ModeReader && b.Mode == ModeReader {
						continue
					}
					out = append(out, Violation{
						Property: PropExclusion, Key: key, At: b.Acquired, Limit: explainOverlap(h, a, b),
						Evidence: overlapEvidence(a, b),
					})
				}
			}
			live = append(live, b)
		}
	}
	return out
}

// liveAt keeps the holders of live whose right had not ended at t.
func liveAt(live []*Hold, t int64) []*Hold {
	kept := live[:0]
	for _, a := range live {
		if a.End > t {
			kept = append(kept, a)
		}
	}
	return kept
}

// overlapEvidence shows two holders whose rights overlap.
func overlapEvidence(a, b *Hold) string {
	why := "the key was given while A's lease ran by A's own clock (B acquired before A's Until)"
	if b.Acquired >= a.Until {
		why = "A's lease had ended by its own clock, but A's right had not (A was not told in time)"
	}
	return fmt.Sprintf("B acquired while A held: %s\nA: %s\nB: %s", why, a, b)
}

// semaphoreViolation reports that b made the holders of a semaphore more
// than its n. It is explained when enough of the others' overlaps with b
// are, to leave no more than n.
func semaphoreViolation(h *History, spec KeySpec, live []*Hold, b *Hold) Violation {
	var lines []string
	explained := 0
	var limit string
	for _, a := range live {
		l := explainOverlap(h, a, b)
		if l != "" {
			explained++
			limit = l
		}
		lines = append(lines, "A: "+a.String())
	}
	if len(live)+1-explained > spec.Permits {
		limit = ""
	}
	return Violation{
		Property: PropExclusion, Key: spec.Name, At: b.Acquired, Limit: limit,
		Evidence: fmt.Sprintf("%d holders of a semaphore of %d at once when B acquired\n%s\nB: %s",
			len(live)+1, spec.Permits, strings.Join(lines, "\n"), b),
	}
}
