package history

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Meta describes an episode: what ran, and when (Now clock).
type Meta struct {
	Deploy     string
	FaultKinds []string // the kinds of fault injected
	TTL        int64    // ns
	Margin     int64    // WithSafetyMargin, ns
	Bound      int64    // the liveness bound, ns
	Wait       int64    // how long an Obtain waits at most (its ctx's timeout), ns
	Unfair     bool     // waiting is not fair (NewQuorum: Obtain polls)
	Procs      int      // worker processes
	Start      int64    // the nemesis started
	Heal       int64    // the faults had healed
	Stop       int64    // the workers were told to stop
	Keys       []KeySpec
}

// A History is an episode's events assembled: holds, attempts, operations
// on the resources, the processes' stalls and the faults.
type History struct {
	Meta
	Holds    []*Hold  // acquisitions that succeeded: a Hold per key (a set's, one per key of the set)
	Attempts []Event  // every EvAcquire, whatever its outcome
	Writes   []Event  // EvWrite
	Reads    []Event  // EvRead
	Stalls   []Event  // EvStall
	Faults   []Fault  // what the nemesis did
	Events   int      // events recorded
	Ops      int      // operations checked: acquisitions, releases, writes, reads
	Problems []string // events that make no sense (a release of nothing, ...)
}

// A Hold is one acquisition that succeeded, from the holder's side, on one
// key. A set of keys is one acquisition and makes a Hold per key, with the
// same ID, times, token, Until and End (the set's: one lease, one right),
// each with its key's fence: a set holder is a holder of each of its keys.
type Hold struct {
	ID     string // "p<proc>w<worker>h<n>"
	Proc   int
	Key    string
	Set    []string // a set's keys, Key one of them; nil for one key
	Mode   string   // a set's: ModeExclusive (the writer of a read-write key) or ModeReader
	Call   string
	Invoke int64 // the acquiring call was made
	// Acquired is when the Obtain hook ran: after Redis gave the lock
	// (and issued the fence), before the call returned. The holder's
	// right starts at the latest here. It is Return when no hook stamp was
	// recorded.
	Acquired int64
	Return   int64
	Token    string
	Fence    int64
	// Until is the latest end of the lease the holder's Lock.Until
	// reported (0 when it could not be read): the library promises that
	// Redis keeps the key at least until then.
	Until int64
	// End is when the holder's right ended, bounded from above: the
	// earliest of the Release call and the moments its lock context was
	// seen done; math.MaxInt64 when neither was recorded.
	End   int64
	EndBy string // "release" or a Src* constant
	Cause string // the done context's cause, when EndBy is not "release"
	// Lost reports that the library said the lock was lost: its context
	// ended with ErrLockLost, or its Release found it not held.
	Lost    bool
	Release *Event
}

func (h *Hold) String() string {
	end := "never"
	if h.End != math.MaxInt64 {
		end = fmt.Sprintf("%s by %s", ms(h.End), h.EndBy)
	}
	set := ""
	if h.Set != nil {
		set = fmt.Sprintf(" of the set %v, on %s", h.Set, h.Key)
	}
	return fmt.Sprintf("%s %s(%s)%s fence %d: called %s, acquired %s, returned %s, Until %s, right ended %s",
		h.ID, h.Call, h.Mode, set, h.Fence, ms(h.Invoke), ms(h.Acquired), ms(h.Return), ms(h.Until), end)
}

// first reports whether h is the first Hold of its acquisition: its one
// key's, or the Hold of a set's first key. Checks of an acquisition as a
// whole (its lease, its signal) look at first Holds only.
func (h *Hold) first() bool { return h.Set == nil || h.Key == h.Set[0] }

// keys are the keys h's acquisition holds.
func (h *Hold) keys() []string {
	if h.Set != nil {
		return h.Set
	}
	return []string{h.Key}
}

// holdID names the hold of an event.
func holdID(e Event) string { return fmt.Sprintf("p%dw%dh%d", e.Proc, e.Worker, e.Hold) }

// Assemble builds the History of an episode from the events of its
// workers and the nemesis's faults. Times become relative to meta.Start.
func Assemble(events []Event, meta Meta, faults []Fault) *History {
	base := meta.Start
	rel := func(t int64) int64 {
		if t == 0 || t == math.MaxInt64 {
			return t
		}
		return t - base
	}
	h := &History{Meta: meta, Events: len(events)}
	if h.Procs == 0 { // histories saved before Meta.Procs
		for _, e := range events {
			h.Procs = max(h.Procs, e.Proc+1)
		}
	}
	h.Start, h.Heal, h.Stop = 0, rel(meta.Heal), rel(meta.Stop)
	for _, f := range faults {
		f.Start, f.End = rel(f.Start), rel(f.End)
		h.Faults = append(h.Faults, f)
	}
	holds := map[string][]*Hold{} // by ID: an acquisition's, a Hold per key
	for _, e := range events {
		e.Invoke, e.Return, e.At, e.Until = rel(e.Invoke), rel(e.Return), rel(e.At), rel(e.Until)
		switch e.Type {
		case EvAcquire:
			h.Ops++
			h.Attempts = append(h.Attempts, e)
			if e.Outcome != OutOK {
				continue
			}
			if e.Keys != nil && len(e.Fences) != len(e.Keys) {
				h.Problems = append(h.Problems, fmt.Sprintf("%s: the set %v acquired with fences %v", holdID(e), e.Keys, e.Fences))
				continue
			}
			for i, key := range keysOf(e) {
				hd := &Hold{ID: holdID(e), Proc: e.Proc, Key: key, Set: e.Keys, Mode: e.Mode, Call: e.Call, Invoke: e.Invoke,
					Acquired: e.At, Return: e.Return, Token: e.Token, Fence: e.Fence, Until: e.Until, End: math.MaxInt64}
				if e.Keys != nil {
					hd.Fence = e.Fences[i]
				}
				if hd.Acquired == 0 {
					hd.Acquired = hd.Return
				}
				holds[hd.ID] = append(holds[hd.ID], hd)
				h.Holds = append(h.Holds, hd)
			}
		case EvWrite:
			h.Ops++
			h.Writes = append(h.Writes, e)
		case EvRead:
			h.Ops++
			h.Reads = append(h.Reads, e)
		case EvStall:
			h.Stalls = append(h.Stalls, e)
		}
	}
	for _, e := range events { // ends, once every hold is known
		e.Invoke, e.Return, e.At, e.Until = rel(e.Invoke), rel(e.Return), rel(e.At), rel(e.Until)
		if e.Type != EvDone && e.Type != EvRelease {
			continue
		}
		hds := holds[holdID(e)]
		if hds == nil {
			h.Problems = append(h.Problems, fmt.Sprintf("%s of %s, which acquired nothing", e.Type, holdID(e)))
			continue
		}
		if e.Type == EvRelease {
			h.Ops++
		}
		ev := e
		for _, hd := range hds { // a set's end is the end of each of its keys' holds
			hd.Until = max(hd.Until, e.Until)
			switch e.Type {
			case EvRelease:
				hd.Release = &ev
				if e.Outcome == OutNotHeld {
					hd.Lost = true
				}
				if e.Invoke < hd.End {
					hd.End, hd.EndBy, hd.Cause = e.Invoke, "release", ""
				}
			case EvDone:
				if strings.Contains(e.Err, "lock lost") {
					hd.Lost = true
				}
				if e.At < hd.End {
					hd.End, hd.EndBy, hd.Cause = e.At, e.Source, e.Err
				}
			}
		}
	}
	for _, hd := range h.Holds {
		if hd.End == math.MaxInt64 && hd.first() {
			h.Problems = append(h.Problems, fmt.Sprintf("%s: neither its release nor the end of its context was recorded", hd.ID))
		}
	}
	slices.SortFunc(h.Holds, func(a, b *Hold) int { return cmp64(a.Acquired, b.Acquired) })
	return h
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// forgotten returns a fault that made Redis forget what loses says (or
// more) and that happened within [from, to].
func (h *History) forgotten(loses string, from, to int64) (Fault, bool) {
	for _, f := range h.Faults {
		if f.Loses == "" || (loses == LosesLocks && f.Loses != LosesLocks) {
			continue
		}
		if f.End >= from && f.Start <= to {
			return f, true
		}
	}
	return Fault{}, false
}

// Acquisitions returns how many acquisitions succeeded (a set is one), and
// how many of them were sets.
func (h *History) Acquisitions() (n, sets int) {
	for _, hd := range h.Holds {
		if hd.first() {
			n++
			if hd.Set != nil {
				sets++
			}
		}
	}
	return n, sets
}

// kindOf returns the kind of lock key is.
func (h *History) kindOf(key string) KeySpec {
	for _, k := range h.Keys {
		if k.Name == key {
			return k
		}
	}
	return KeySpec{Name: key, Kind: KindLock}
}
