package history

import (
	"fmt"
	"strings"
)

// CheckLiveness checks that once the faults have healed, every waiter is
// served within the deployment's bound: an Obtain or WithLock (not a
// TryObtain, which may fail on contention) that was waiting at the heal,
// or was called after it, acquired within Bound of the later of its call
// and the heal. Calls whose bound ends after the workers were told to stop
// are not judged, nor calls that gave up at their own deadline (Meta.Wait
// after the call) before their bound ended. A call still waiting at the
// stop was cancelled then, and is judged like one that failed.
//
// The bound is stated per deployment (Deployment.Bound): the longest lease
// a lost holder may leave in Redis, plus the time the other workers take
// their turns. On a deployment whose waiting is not fair (NewQuorum), a
// waiter not served within the bound is the expected consequence of that
// limit if others acquired the key all along, at most Bound apart
// (explainStarved); a stretch of Bound with waiters and no acquisition is
// an anomaly there too.
func CheckLiveness(h *History) []Violation {
	var out []Violation
	for _, e := range h.Attempts {
		if !judged(h, e) {
			continue
		}
		from := max(e.Invoke, h.Heal)
		due := from + h.Bound
		if e.Outcome == OutOK && e.Return <= due {
			continue
		}
		what := fmt.Sprintf("returned %s after %s: %s", e.Outcome, ms(e.Return-from), e.Err)
		if e.Outcome == OutOK {
			what = fmt.Sprintf("acquired only after %s", ms(e.Return-from))
		}
		limit, gap := explainStarved(h, e.Key, holdID(e), from, min(e.Return, h.Stop))
		if limit == "" && h.Unfair {
			what += fmt.Sprintf("; nobody acquired the key for %s", ms(gap))
		}
		out = append(out, Violation{Property: PropLiveness, Key: e.Key, At: due, Limit: limit,
			Evidence: fmt.Sprintf("not served within %s of %s (the heal at %s)\n%s %s(%s) called %s %s",
				ms(h.Bound), ms(from), ms(h.Heal), holdID(e), e.Call, e.Mode, ms(e.Invoke), what)})
	}
	return out
}

// WaitsAfterHeal returns how many Obtain and WithLock calls CheckLiveness
// judged, and the longest any of them waited from the later of its call
// and the heal.
func WaitsAfterHeal(h *History) (n int, longest int64) {
	for _, e := range h.Attempts {
		if !judged(h, e) {
			continue
		}
		n++
		longest = max(longest, e.Return-max(e.Invoke, h.Heal))
	}
	return n, longest
}

// judged reports whether CheckLiveness judges attempt e.
func judged(h *History, e Event) bool {
	if e.Call == CallTry || e.Return < h.Heal {
		return false
	}
	due := max(e.Invoke, h.Heal) + h.Bound
	if due > h.Stop {
		return false
	}
	gaveUp := e.Outcome == OutNotObtained || (e.Outcome == OutError && strings.Contains(e.Err, "deadline exceeded"))
	return !(gaveUp && h.Wait > 0 && e.Invoke+h.Wait < due)
}
