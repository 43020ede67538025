package main

import (
	"math"
	"slices"
	"time"
)

// results are everything one bench run measured.
type results struct {
	cfgs   []config
	setups []setup
	solo   []soloResult             // per configuration
	alone  map[string][]aloneSample // per setup, one per repetition
	runs   map[string][][]sample    // per setup, per configuration, one per repetition
	mkCfgs []mkConfig               // of the many-keys setup; none if it is not run
	mk     [][]mkSample             // per many-keys configuration, one per repetition
	// skipped says why configurations that -only selected did not run
	// (see skipNative), "" if all did.
	skipped string
}

// newResults returns empty results for cfgs in setups and for mkCfgs in the
// many-keys setup.
func newResults(cfgs []config, setups []setup, mkCfgs []mkConfig) *results {
	r := &results{cfgs: cfgs, setups: setups, alone: make(map[string][]aloneSample), runs: make(map[string][][]sample),
		mkCfgs: mkCfgs, mk: make([][]mkSample, len(mkCfgs))}
	for _, s := range setups {
		r.runs[s.name] = make([][]sample, len(cfgs))
	}
	return r
}

// aloneSummary is the critical section alone in one setup: medians over the
// repetitions.
type aloneSummary struct {
	perSec   float64 // critical sections per second
	cpuPerCS float64 // redis-server CPU seconds per critical section
}

// summarizeAlone takes the medians of the runs of the critical section
// alone in one setup.
func summarizeAlone(as []aloneSample) aloneSummary {
	return aloneSummary{
		perSec:   median(as, func(a aloneSample) float64 { return float64(a.n) / a.elapsed.Seconds() }),
		cpuPerCS: median(as, func(a aloneSample) float64 { return perAcq(a.cpu, a.n) }),
	}
}

// summary is one configuration in one setup over the repetitions: medians
// of the rates, ratios and latencies; totals of the counts.
type summary struct {
	perSec, perSecSpread float64 // CS/s; (max-min)/median
	cpuPerAcq, cpuSpread float64 // raw redis-server CPU seconds per acquisition; (max-min)/median
	lockPerAcq           float64 // commands the lock clients sent per acquisition
	srvPerAcq            float64 // commandstats calls per acquisition
	fairness             float64
	handoffP50           time.Duration
	handoffP99           time.Duration
	waitP50              time.Duration
	waitP99, waitMax     time.Duration
	others               float64 // share of a core other programs used (NaN: unknown)
	runs                 int     // samples: 0 if the configuration did not run in the setup

	// Set setups only.
	waitBySize map[int]time.Duration // median p99 wait of the sets of each size
	keysPerAcq float64               // keys per set, all repetitions

	acquired, handoffs, reacquired                      int
	timeouts, gaveUp, releaseErrs, overlaps, torn, lost int
	mix                                                 map[string]float64 // pooled commandstats calls per acquisition by command
	errors                                              []string
}

// summarize takes the medians and totals of one configuration's runs in
// one setup.
func summarize(ss []sample) summary {
	acq := func(s sample) int { return s.stats.acquired }
	sm := summary{
		perSec:     median(ss, func(s sample) float64 { return s.stats.perSec }),
		cpuPerAcq:  median(ss, func(s sample) float64 { return perAcq(s.cpu, acq(s)) }),
		lockPerAcq: median(ss, func(s sample) float64 { return perAcq(float64(s.lockCmds), acq(s)) }),
		srvPerAcq:  median(ss, func(s sample) float64 { return perAcq(float64(sumCalls(s.srvCmds)), acq(s)) }),
		fairness:   median(ss, func(s sample) float64 { return s.stats.fairness }),
		handoffP50: median(ss, func(s sample) time.Duration { return s.stats.handoffP50 }),
		handoffP99: median(ss, func(s sample) time.Duration { return s.stats.handoffP99 }),
		waitP50:    median(ss, func(s sample) time.Duration { return s.stats.waitP50 }),
		waitP99:    median(ss, func(s sample) time.Duration { return s.stats.waitP99 }),
		waitMax:    median(ss, func(s sample) time.Duration { return s.stats.waitMax }),
		others:     median(ss, func(s sample) float64 { return s.others }),
		runs:       len(ss),
		waitBySize: medianBySize(ss),
	}
	sm.perSecSpread = spread(ss, sm.perSec, func(s sample) float64 { return s.stats.perSec })
	sm.cpuSpread = spread(ss, sm.cpuPerAcq, func(s sample) float64 { return perAcq(s.cpu, acq(s)) })
	sm.addCounts(ss)
	return sm
}

// addCounts totals the counts of the samples and pools their command mix.
func (sm *summary) addCounts(ss []sample) {
	calls := make(map[string]int64)
	setKeys := 0
	for _, s := range ss {
		st := s.stats
		setKeys += st.setKeys
		sm.acquired += st.acquired
		sm.handoffs += st.handoffs
		sm.reacquired += st.reacquired
		sm.timeouts += st.timeouts
		sm.gaveUp += st.gaveUp
		sm.releaseErrs += st.releaseErrs
		sm.overlaps += st.overlaps
		sm.torn += st.torn
		sm.lost += int(s.lost)
		addCalls(calls, s.srvCmds)
		for _, e := range st.errors {
			sm.errors = keepError(sm.errors, e, math.MaxInt)
		}
	}
	sm.mix = mixOf(calls, sm.acquired)
	sm.keysPerAcq = perAcq(float64(setKeys), sm.acquired)
}

// medianBySize returns, per set size, the median over the samples of the
// p99 wait of the sets of that size (of the samples that have any); nil
// outside the set setups.
func medianBySize(ss []sample) map[int]time.Duration {
	var out map[int]time.Duration
	for _, s := range ss {
		for size := range s.stats.waitBySize {
			if _, done := out[size]; done {
				continue
			}
			var vs []time.Duration
			for _, t := range ss {
				if v, ok := t.stats.waitBySize[size]; ok {
					vs = append(vs, v)
				}
			}
			if out == nil {
				out = make(map[int]time.Duration)
			}
			out[size] = median(vs, func(v time.Duration) time.Duration { return v })
		}
	}
	return out
}

// addCalls adds the calls of a commandstats delta to calls.
func addCalls(calls, delta map[string]int64) {
	for cmd, n := range delta {
		calls[cmd] += n
	}
}

// mixOf returns the pooled calls by command per n acquisitions (or
// cycles), leaving out commands whose calls add up to 0.
func mixOf(calls map[string]int64, n int) map[string]float64 {
	mix := make(map[string]float64)
	for cmd, c := range calls {
		if c != 0 {
			mix[cmd] = perAcq(float64(c), n)
		}
	}
	return mix
}

// othersLoad returns the median and the largest share of a core that other
// programs used during the runs of setup s, the critical section's alone
// included; ok is false if that is unknown.
func (r *results) othersLoad(s setup) (med, most float64, ok bool) {
	var vs []float64
	for _, a := range r.alone[s.name] {
		vs = append(vs, a.others)
	}
	for _, ss := range r.runs[s.name] {
		for _, sm := range ss {
			vs = append(vs, sm.others)
		}
	}
	vs = slices.DeleteFunc(vs, math.IsNaN)
	if len(vs) == 0 {
		return 0, 0, false
	}
	return median(vs, func(v float64) float64 { return v }), slices.Max(vs), true
}

// ranAny reports whether configuration c ran in any of the setups.
func (r *results) ranAny(c config) bool {
	return slices.ContainsFunc(r.setups, func(s setup) bool { return s.runs(c) })
}

// bestPeer returns the index of the peer configuration with the most
// critical sections per second in sums, or -1 if none was run.
func bestPeer(cfgs []config, sums []summary) int {
	best := -1
	for i, c := range cfgs {
		if !c.ours() && sums[i].runs > 0 && (best < 0 || sums[i].perSec > sums[best].perSec) {
			best = i
		}
	}
	return best
}

// median returns the median of f over xs (the mean of the middle two for an
// even count), 0 for none.
func median[T any, V int64 | float64 | time.Duration](xs []T, f func(T) V) V {
	if len(xs) == 0 {
		return 0
	}
	vs := make([]V, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	slices.Sort(vs)
	mid := len(vs) / 2
	if len(vs)%2 == 1 {
		return vs[mid]
	}
	return (vs[mid-1] + vs[mid]) / 2
}

// spread returns (max-min)/mid of f over xs: 0 for a single sample.
func spread[T any](xs []T, mid float64, f func(T) float64) float64 {
	if len(xs) < 2 || mid == 0 {
		return 0
	}
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	return (slices.Max(vs) - slices.Min(vs)) / mid
}

// perAcq divides total by n acquisitions (or critical sections), 0 for
// none.
func perAcq(total float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return total / float64(n)
}

// sumCalls adds up the calls of a commandstats delta.
func sumCalls(m map[string]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}
