package main

import (
	"fmt"
	"strings"
	"time"
)

// setup is one contended scenario: workers fight for one lock key, in the
// bench process or in several child processes, with or without a sleep in
// the middle of the critical section.
type setup struct {
	name    string        // "1p-sleep", "1p-short", "4p-sleep", "4p-short"
	procs   int           // 1: goroutines of the bench process; more: child processes
	workers int           // goroutines per process
	sleep   time.Duration // in the middle of the critical section; 0 for the short ones
}

// allSetups returns the contended setups that -workers, -procs,
// -proc-workers, -scale and -cs describe, in report order: four of a few
// workers each, and two at scale (what happens when a thousand instances
// wake at once), short critical sections. The multi-process ones are named
// after -procs ("4p-sleep" by default), the scale ones after their
// goroutines ("1p-1000", "4p-250").
func allSetups(f flags) []setup {
	multi := fmt.Sprintf("%dp", f.procs)
	return []setup{
		{name: "1p-sleep", procs: 1, workers: f.workers, sleep: f.cs},
		{name: "1p-short", procs: 1, workers: f.workers},
		{name: multi + "-sleep", procs: f.procs, workers: f.procWorkers, sleep: f.cs},
		{name: multi + "-short", procs: f.procs, workers: f.procWorkers},
		{name: fmt.Sprintf("1p-%d", f.scale), procs: 1, workers: f.scale},
		{name: fmt.Sprintf("%s-%d", multi, f.scale/f.procs), procs: f.procs, workers: f.scale / f.procs},
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
	if s.sleep == 0 {
		return who + ", critical section without sleep"
	}
	return fmt.Sprintf("%s, critical section sleeps %v", who, s.sleep)
}
