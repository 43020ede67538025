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
func CheckLostSignal(h *History) []Violation {
	var out []Violation
	groups := byKey(h.Holds)
	for _, key := range sortedKeys(groups) {
		holds := groups[key]
		spec := h.kindOf(key)
		for _, a := range holds {
			if a.Until == 0 || a.End <= a.Until {
				continue
			}
			ev := fmt.Sprintf("A's right ended %s after its lease's end by its own clock\nA: %s", ms(a.End-a.Until), a)
			if b := takenMeanwhile(spec, holds, a); b != nil {
				ev += fmt.Sprintf("\nB took the key before A was told:\nB: %s", b)
			}
			out = append(out, Violation{
				Property: PropLostSignal, Key: key, At: a.Until, Evidence: ev,
				Limit: explainLateSignal(h, a, a.End),
			})
		}
	}
	return out
}

// takenMeanwhile returns the first holder of holds in conflict with a that
// acquired after a's Until and before a's right ended, or nil.
func takenMeanwhile(spec KeySpec, holds []*Hold, a *Hold) *Hold {
	for _, b := range holds {
		if b == a || b.Acquired < a.Until || b.Acquired >= a.End {
			continue
		}
		if spec.Kind == KindRW && a.Mode == ModeReader && b.Mode == ModeReader {
			continue
		}
		return b
	}
	return nil
}
