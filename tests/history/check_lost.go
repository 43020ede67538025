package history

import "fmt"

// CheckLostSignal checks that every lock whose lease ends is signalled by
// then: KeepAlive's (and WithLock's) context ends at the latest at
// Until - ttl/100 - min(margin, ttl/4), and Until is never later than the
// key's expiry in Redis, so a holder's right (Hold.End) must end by its
// lease's end by its own clock (Hold.Until, the latest Until it read).
// A holder whose right outlived its Until was not told in time, whether or
// not another took the key meanwhile; when one did (B below), its lost
// lock was not signalled before the key was taken.
//
// It errs toward reporting: End is at or after the moment the context
// ended (see CheckExclusion), and Until is the largest reading, which the
// library promises Redis's expiry is not before. The slack between the
// promised deadline and Until (ttl/100 plus the margin) absorbs the delay
// of the goroutine that sees the context done. Holds whose Until could not
// be read (a WithLock whose lock was lost before fn could join it) are not
// checked here.
//
// A set has one lease (Until is the earliest of its keys' leases) and one
// context: it is checked once, as an acquisition, and the evidence names
// the first holder that took any of its keys meanwhile.
func CheckLostSignal(h *History) []Violation {
	var out []Violation
	groups := byKey(h.Holds)
	for _, a := range h.Holds {
		if !a.first() || a.Until == 0 || a.End <= a.Until {
			continue
		}
		ev := fmt.Sprintf("A's right ended %s after its lease's end by its own clock\nA: %s", ms(a.End-a.Until), a)
		var b *Hold
		for _, key := range a.keys() {
			if c := takenMeanwhile(h.kindOf(key), groups[key], a); c != nil && (b == nil || c.Acquired < b.Acquired) {
				b = c
			}
		}
		if b != nil {
			ev += fmt.Sprintf("\nB took the key before A was told:\nB: %s", b)
		}
		out = append(out, Violation{
			Property: PropLostSignal, Key: a.Key, At: a.Until, Evidence: ev,
			Limit: explainLateSignal(h, a, a.End),
		})
	}
	return out
}

// takenMeanwhile returns the first holder of holds (of one key) in
// conflict with a (of a's acquisition, on that key) that acquired after
// a's Until and before a's right ended, or nil.
func takenMeanwhile(spec KeySpec, holds []*Hold, a *Hold) *Hold {
	for _, b := range holds {
		if b.ID == a.ID || b.Acquired < a.Until || b.Acquired >= a.End {
			continue
		}
		if spec.Kind == KindRW && a.Mode == ModeReader && b.Mode == ModeReader {
			continue
		}
		return b
	}
	return nil
}
