package history

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// A Report gathers the results of a run's episodes.
type Report struct {
	Seed    uint64
	Started time.Time
	Wall    time.Duration
	Results []*Result
}

// Ops is the number of operations checked in the run.
func (r *Report) Ops() int {
	n := 0
	for _, res := range r.Results {
		n += res.History.Ops
	}
	return n
}

// Anomalies returns every anomaly of the run, and every problem of its
// recording (a problem makes the history untrustworthy: it fails the run).
func (r *Report) Anomalies() (anomalies []Violation, problems []string) {
	for _, res := range r.Results {
		anomalies = append(anomalies, res.Anomalies()...)
		for _, p := range res.Problems {
			problems = append(problems, fmt.Sprintf("%s %s: %s", res.History.Deploy, strings.Join(res.History.Meta.FaultKinds, "+"), p))
		}
	}
	return anomalies, problems
}

// faultCounts says how many faults of each kind an episode injected.
func faultCounts(h *History) string {
	counts := map[string]int{}
	for _, f := range h.Faults {
		counts[f.Kind]++
	}
	var parts []string
	for _, k := range h.Meta.FaultKinds {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

// WriteTable writes the run's table in Markdown: a row per deployment and
// faults (episodes of the same pair summed), with the operations checked,
// the acquisitions (how many of them were sets of keys) and how many of
// them the library said were lost, the
// waits judged after the heal and the longest, the writes made after the
// writer's right had ended, and per property the anomalies and the
// expected consequences of documented limits ("anomalies/expected").
func (r *Report) WriteTable(w io.Writer) {
	type row struct {
		deploy, faults                   string
		episodes, ops, holds, injections int
		sets, lost                       int
		judged, staleRefused, staleTaken int
		maxWait                          int64
		counts                           map[string][2]int
		register                         map[string]int
	}
	var rows []*row
	index := map[string]*row{}
	for _, res := range r.Results {
		h := res.History
		name := h.Deploy + "|" + strings.Join(h.Meta.FaultKinds, "+")
		rw := index[name]
		if rw == nil {
			rw = &row{deploy: h.Deploy, faults: strings.Join(h.Meta.FaultKinds, ", "), counts: map[string][2]int{}, register: map[string]int{}}
			index[name] = rw
			rows = append(rows, rw)
		}
		rw.episodes++
		rw.ops += h.Ops
		n, sets := h.Acquisitions()
		rw.holds += n
		rw.sets += sets
		for _, hd := range h.Holds {
			if hd.Lost && hd.first() {
				rw.lost++
			}
		}
		rw.injections += len(h.Faults)
		rw.judged += res.Judged
		rw.staleRefused += res.StaleRefused
		rw.staleTaken += res.StaleTaken
		rw.maxWait = max(rw.maxWait, res.MaxWait)
		for _, p := range Properties {
			a, e := res.Count(p)
			c := rw.counts[p]
			rw.counts[p] = [2]int{c[0] + a, c[1] + e}
		}
		for _, v := range res.Register {
			rw.register[v]++
		}
	}
	fmt.Fprintf(w, "| deployment | faults | episodes | faults injected | operations | acquisitions (sets) | lost | waits after heal: n, longest | stale writes: refused, taken |")
	for _, p := range Properties {
		fmt.Fprintf(w, " %s |", p)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|---|---|---|---|---|---|---|---|")
	for range Properties {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	total := row{counts: map[string][2]int{}}
	for _, rw := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d (%d) | %d | %d, %s | %d, %d |", rw.deploy, rw.faults, rw.episodes, rw.injections, rw.ops, rw.holds,
			rw.sets, rw.lost, rw.judged, time.Duration(rw.maxWait).Round(time.Millisecond), rw.staleRefused, rw.staleTaken)
		for _, p := range Properties {
			c := rw.counts[p]
			fmt.Fprintf(w, " %d/%d |", c[0], c[1])
			t := total.counts[p]
			total.counts[p] = [2]int{t[0] + c[0], t[1] + c[1]}
		}
		fmt.Fprintln(w)
		total.episodes += rw.episodes
		total.injections += rw.injections
		total.ops += rw.ops
		total.holds += rw.holds
		total.sets += rw.sets
		total.lost += rw.lost
		total.judged += rw.judged
		total.maxWait = max(total.maxWait, rw.maxWait)
		total.staleRefused += rw.staleRefused
		total.staleTaken += rw.staleTaken
	}
	fmt.Fprintf(w, "| **all** | | %d | %d | %d | %d (%d) | %d | %d, %s | %d, %d |", total.episodes, total.injections, total.ops, total.holds,
		total.sets, total.lost, total.judged, time.Duration(total.maxWait).Round(time.Millisecond), total.staleRefused, total.staleTaken)
	for _, p := range Properties {
		c := total.counts[p]
		fmt.Fprintf(w, " %d/%d |", c[0], c[1])
	}
	fmt.Fprintln(w)
}

// WriteDetails writes, per episode, its faults and its violations (the
// first few of each property and kind, with their evidence).
func (r *Report) WriteDetails(w io.Writer, perKind int) {
	for i, res := range r.Results {
		h := res.History
		n, sets := h.Acquisitions()
		fmt.Fprintf(w, "episode %d: %s, %s: %d operations, %d acquisitions (%d sets), heal at %s, stop at %s\n",
			i, h.Deploy, faultCounts(h), h.Ops, n, sets, ms(h.Heal), ms(h.Stop))
		for _, f := range h.Faults {
			fmt.Fprintf(w, "  fault %s on %s: %s-%s\n", f.Kind, f.Target, ms(f.Start), ms(f.End))
		}
		for _, k := range sortedKeys(res.Register) {
			fmt.Fprintf(w, "  register %s: %s\n", k, res.Register[k])
		}
		shown := map[string]int{}
		for _, v := range res.Violations {
			kind := v.Property + "|" + fmt.Sprint(v.Limit == "")
			if shown[kind]++; shown[kind] > perKind {
				continue
			}
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(v.String(), "\n", "\n  "))
		}
		for kind, n := range shown {
			if n > perKind {
				fmt.Fprintf(w, "  (%d more of %s)\n", n-perKind, kind)
			}
		}
		for _, p := range res.Problems {
			fmt.Fprintf(w, "  PROBLEM: %s\n", p)
		}
	}
}

// limitsSeen lists the documented limits that explained violations, with
// how many each explained.
func (r *Report) limitsSeen() []string {
	counts := map[string]int{}
	for _, res := range r.Results {
		for _, v := range res.Violations {
			if v.Limit != "" {
				l, _, _ := strings.Cut(v.Limit, ":")
				counts[v.Property+": "+l]++
			}
		}
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%s (%d)", k, n))
	}
	slices.Sort(out)
	return out
}

// WriteSummary writes the seed, the numbers and the limits seen.
func (r *Report) WriteSummary(w io.Writer) {
	anomalies, problems := r.Anomalies()
	fmt.Fprintf(w, "seed %d: %d episodes, %d operations checked in %v; %d anomalies, %d recording problems\n",
		r.Seed, len(r.Results), r.Ops(), r.Wall.Round(time.Second), len(anomalies), len(problems))
	for _, l := range r.limitsSeen() {
		fmt.Fprintf(w, "expected consequence of a documented limit: %s\n", l)
	}
}
