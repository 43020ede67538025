package history

import (
	"fmt"
	"sort"
	"strings"
)

// Properties the checkers check.
const (
	PropExclusion  = "exclusion"   // no conflicting holders whose rights overlap in time
	PropLostSignal = "lost-signal" // a lost lock is signalled by its lease's end, and before its key is taken
	PropFenceOrder = "fence-order" // fences strictly increase in acquisition order, per key
	PropRegister   = "register"    // the fenced resource is a linearizable register that refuses older fences
	PropFencing    = "fencing"     // no two holders wrote the resource with the same fence
	PropLiveness   = "liveness"    // after the heal, every Obtain is served within the bound
)

// Properties lists the properties in the order of the reports.
var Properties = []string{PropExclusion, PropLostSignal, PropFenceOrder, PropRegister, PropFencing, PropLiveness}

// A Violation is one breach of a property in a history, with the minimal
// evidence: the operations that conflict, with their times (ms since the
// episode's start).
type Violation struct {
	Property string
	Key      string
	At       int64  // when it happened
	Evidence string // the conflicting operations
	// Limit names the documented limit of the library that explains the
	// violation (an expected consequence), or is empty: an anomaly, a
	// broken promise.
	Limit string
}

func (v Violation) String() string {
	kind := "ANOMALY"
	if v.Limit != "" {
		kind = "expected (" + v.Limit + ")"
	}
	return fmt.Sprintf("%s: %s on %s at %s\n    %s", kind, v.Property, v.Key, ms(v.At),
		strings.ReplaceAll(v.Evidence, "\n", "\n    "))
}

// A Result is the outcome of checking a history.
type Result struct {
	History    *History
	Violations []Violation
	// Register is porcupine's verdict per resource: "ok", "illegal" or
	// "unknown" (it ran out of time).
	Register map[string]string
	Problems []string // the recording went wrong: the history cannot be trusted
	// Judged is how many waits CheckLiveness judged, and MaxWait the
	// longest of them (from the later of the call and the heal).
	Judged  int
	MaxWait int64
	// StaleRefused and StaleTaken count the writes made after the
	// writer's right had ended that the resource refused, and took.
	StaleRefused, StaleTaken int
	Files                    []string // porcupine visualizations of illegal histories
}

// Anomalies returns the violations no documented limit explains.
func (r *Result) Anomalies() []Violation {
	var out []Violation
	for _, v := range r.Violations {
		if v.Limit == "" {
			out = append(out, v)
		}
	}
	return out
}

// Count returns how many violations of prop are anomalies and how many
// are expected.
func (r *Result) Count(prop string) (anomalies, expected int) {
	for _, v := range r.Violations {
		if v.Property != prop {
			continue
		}
		if v.Limit == "" {
			anomalies++
		} else {
			expected++
		}
	}
	return anomalies, expected
}

// Check runs every checker on h.
func Check(h *History) *Result {
	r := &Result{History: h, Register: map[string]string{}}
	r.Problems = append(r.Problems, h.Problems...)
	r.Violations = append(r.Violations, CheckExclusion(h)...)
	r.Violations = append(r.Violations, CheckLostSignal(h)...)
	r.Violations = append(r.Violations, CheckFences(h)...)
	vs, verdicts, files := CheckRegister(h)
	r.Violations = append(r.Violations, vs...)
	r.Register, r.Files = verdicts, files
	r.Violations = append(r.Violations, CheckLiveness(h)...)
	r.Judged, r.MaxWait = WaitsAfterHeal(h)
	r.StaleRefused, r.StaleTaken = StaleWrites(h)
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At < r.Violations[j].At })
	return r
}

// byKey groups holds by key, keeping their order.
func byKey(holds []*Hold) map[string][]*Hold {
	m := map[string][]*Hold{}
	for _, h := range holds {
		m[h.Key] = append(m[h.Key], h)
	}
	return m
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
