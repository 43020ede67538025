package main

import (
	"fmt"
	"strings"
	"time"
)

// setup is one contended scenario: workers fight for one lock key, in the
// bench process or in several child processes, with or without a sleep in
// the middle of the critical section; or, in the set setups, each cycle
// locks a set of keys (see sets.go).
type setup struct {
	name    string        // "1p-sleep", "1p-short", "4p-sleep", "4p-short", ..., "1p-sets"
	procs   int           // 1: goroutines of the bench process; more: child processes
	workers int           // goroutines per process
	sleep   time.Duration // in the middle of the critical section; 0 for the short ones
	set     *setShape     // the set setups' sets; nil: one lock key
}

// runs reports whether configuration c runs in the setup: every one but
// nativeName's (it does not wait) does, but only those of setConfigs in
// the set setups.
func (s setup) runs(c config) bool { return !c.native() && (s.set == nil || c.runsSets()) }

// allSetups returns the contended setups that -workers, -procs,
// -proc-workers, -scale and -cs describe, in report order: four of a few
// workers each, and two at scale (what happens when a thousand instances
// wake at once), short critical sections. The multi-process ones are named
// after -procs ("4p-sleep" by default), the scale ones after their
// goroutines ("1p-1000", "4p-250"); then the set setups, short critical
// sections too: sets of -set-min to -set-max keys drawn from a pool of
// -set-keys by every worker, in one process and in -procs, and each
// worker's sets drawn from -set-max keys of its own.
func allSetups(f flags) []setup {
	multi := fmt.Sprintf("%dp", f.procs)
	pool := &setShape{keys: f.setKeys, min: f.setMin, max: f.setMax}
	own := &setShape{keys: f.setMax, min: f.setMin, max: f.setMax, disjoint: true}
	return []setup{
		{name: "1p-sleep", procs: 1, workers: f.workers, sleep: f.cs},
		{name: "1p-short", procs: 1, workers: f.workers},
		{name: multi + "-sleep", procs: f.procs, workers: f.procWorkers, sleep: f.cs},
		{name: multi + "-short", procs: f.procs, workers: f.procWorkers},
		{name: fmt.Sprintf("1p-%d", f.scale), procs: 1, workers: f.scale},
		{name: fmt.Sprintf("%s-%d", multi, f.scale/f.procs), procs: f.procs, workers: f.scale / f.procs},
		{name: "1p-sets", procs: 1, workers: f.workers, set: pool},
		{name: multi + "-sets", procs: f.procs, workers: f.procWorkers, set: pool},
		{name: "1p-sets-disjoint", procs: 1, workers: f.workers, set: own},
	}
}

// selectSetups returns the contended setups named in -setups (all if
// empty), in report order, and whether the many-keys setup is named (or
// -setups is empty).
func selectSetups(f flags) ([]setup, bool, error) {
	all := allSetups(f)
	if f.setups == "" {
		return all, true, nil
	}
	want := make(map[string]bool)
	for _, name := range strings.Split(f.setups, ",") {
		want[strings.TrimSpace(name)] = true
	}
	manyKeys := want[manyKeysSetup]
	delete(want, manyKeysSetup)
	var out []setup
	for _, s := range all {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for name := range want {
		names := make([]string, len(all))
		for i, s := range all {
			names[i] = s.name
		}
		return nil, false, fmt.Errorf("unknown setup %q (have %s, %s)", name, strings.Join(names, ", "), manyKeysSetup)
	}
	return out, manyKeys, nil
}

// describe says in words what the setup runs.
func (s setup) describe() string {
	who := fmt.Sprintf("1 process x %d goroutines", s.workers)
	if s.procs > 1 {
		who = fmt.Sprintf("%d processes x %d goroutines", s.procs, s.workers)
	}
	if sh := s.set; sh != nil {
		what := fmt.Sprintf("each cycle locks a set of %s keys out of a pool of %d (hash tag {sets})", sizes(sh), sh.keys)
		if sh.disjoint {
			what = fmt.Sprintf("each cycle locks a set of %s keys out of the goroutine's own %d (hash tag {w<goroutine>}; no two sets meet)", sizes(sh), sh.keys)
		}
		cs := "critical section: GET counter and check of each key, then SET both, in 2 pipelines"
		if s.sleep > 0 {
			cs = fmt.Sprintf("critical section: GET counter and check of each key, sleep %v, then SET both, in 2 pipelines", s.sleep)
		}
		return who + ", " + what + "; " + cs
	}
	if s.sleep == 0 {
		return who + ", critical section without sleep"
	}
	return fmt.Sprintf("%s, critical section sleeps %v", who, s.sleep)
}

// sizes says how many keys a set has: "2-4", or "3" if always 3.
func sizes(sh *setShape) string {
	if sh.min == sh.max {
		return fmt.Sprint(sh.min)
	}
	return fmt.Sprintf("%d-%d", sh.min, sh.max)
}
