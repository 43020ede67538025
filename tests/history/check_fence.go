package history

import (
	"fmt"
	"slices"
)

// CheckFences checks, per key, that fences strictly increase in the order
// of acquisition: every acquisition A that completed before another, B,
// was called has a lower fence than B's; and no two acquisitions share a
// fence. "Completed" is A.Acquired, the Obtain hook's stamp, which comes
// after the fence was issued; "called" is B.Invoke, before B's fence was
// issued: so every pair the check orders was issued in that order, and
// the check errs toward ordering more pairs, never fewer. Acquisitions
// whose calls overlapped may get their fences in either order; they must
// still differ.
//
// A set has a fence per key (Lock.Fences), and is an acquisition of each
// of its keys: its fence for key k is checked against the other holders
// of k, as any holder's.
//
// A violation is an anomaly unless a fault made Redis forget its counter
// between A's call and B's acquisition (explainFences).
func CheckFences(h *History) []Violation {
	var out []Violation
	groups := byKey(h.Holds)
	for _, key := range sortedKeys(groups) {
		holds := groups[key] // in order of Acquired
		seen := map[int64]*Hold{}
		for _, b := range holds {
			if a := seen[b.Fence]; a != nil {
				out = append(out, fenceViolation(h, key, a, b, "two acquisitions got the same fence"))
			} else {
				seen[b.Fence] = b
			}
		}
		byInvoke := slices.Clone(holds)
		slices.SortFunc(byInvoke, func(x, y *Hold) int { return cmp64(x.Invoke, y.Invoke) })
		var top *Hold // the highest fence among the acquisitions completed so far
		i := 0
		for _, b := range byInvoke {
			for ; i < len(holds) && holds[i].Acquired < b.Invoke; i++ {
				if top == nil || holds[i].Fence > top.Fence {
					top = holds[i]
				}
			}
			if top != nil && top.Fence >= b.Fence && top.Fence != b.Fence {
				out = append(out, fenceViolation(h, key, top, b, "B was called after A had acquired, with a lower fence"))
			}
		}
	}
	return out
}

func fenceViolation(h *History, key string, a, b *Hold, what string) Violation {
	return Violation{
		Property: PropFenceOrder, Key: key, At: b.Acquired, Limit: explainFences(h, a, b),
		Evidence: fmt.Sprintf("%s: A's %d, B's %d\nA: %s\nB: %s", what, a.Fence, b.Fence, a, b),
	}
}
