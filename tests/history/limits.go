package history

import "fmt"

// The documented limits of redislock that can explain a violation. Each
// one is a sentence of the library's documentation; a violation is an
// expected consequence only when the fault the limit names happened where
// the rule below says, and is otherwise an anomaly.
const (
	// README "Fault tolerance", one node: "a restart without persistence
	// (the key is gone)"; WithFencing: the counter "is never reset", so
	// deleting it (here: the restart deleted everything) "restarts the
	// fences at 1".
	LimitRestartEmpty = "Redis restarted without its data forgets locks and fence counters"
	// NewQuorum: "Fence counters have no expiry: a master that loses its
	// counter may let fences repeat, whatever the wait".
	LimitQuorumCounter = "a quorum master that lost its counter may let fences repeat"
	// README "Guarantees and limits": "A holder paused longer than its ttl
	// (GC, swap, SIGSTOP, a VM migration) loses the lock without running
	// any code; when it resumes, two processes believe they hold it."
	LimitPaused = "a holder paused past its lease"
	// Lock.KeepAlive: the lock is held while the context is not done
	// "provided the process's timers fire within the safety margin".
	LimitLateTimer = "the holder's process did not run for longer than the safety margin"
)

// explainOverlap returns the limit that explains why b acquired while a's
// right had not ended (a acquired first), or "" when none does.
//
// If Redis forgot a's lock (a data-losing fault between a's call and b's
// acquisition), nothing more is promised. Otherwise, if b acquired before
// a's lease ended by a's own clock (a.Until), Redis gave the key away while
// the library said a's lease ran: no pause of a explains that. Else a's
// lease was over and a was not told in time: a limit only if a's process
// was stopped (SIGSTOP), or ran nothing for longer than the safety margin,
// when its lost-lock timer had to fire (explainLateSignal).
func explainOverlap(h *History, a, b *Hold) string {
	if f, ok := h.forgotten(LosesLocks, a.Invoke, b.Acquired); ok {
		return fmt.Sprintf("%s: %s of %s at %s", LimitRestartEmpty, f.Kind, f.Target, ms(f.Start))
	}
	if b.Acquired < a.Until {
		return ""
	}
	return explainLateSignal(h, a, b.Acquired)
}

// explainLateSignal returns the limit that explains why a's right was not
// seen ended by by (a moment after a's lease ended by its own clock), or
// "" when none does. KeepAlive's lost-lock timer was due at
// due = Until - ttl/100 - min(margin, ttl/4), and the signal must come by
// last = Until - ttl/100: a's process must have been stopped (SIGSTOP), or
// have run nothing for at least min(margin, ttl/4), at some time between
// the two, so that the timer could not fire in time. When a's Until is
// unknown (see Hold.Until), any SIGSTOP of a's process between a's call
// and by explains it.
func explainLateSignal(h *History, a *Hold, by int64) string {
	m := min(h.Margin, h.TTL/4)
	due, last := a.Until-h.TTL/100-m, a.Until-h.TTL/100
	for _, f := range h.Faults {
		if f.Kind != FaultPauseClient || f.Proc != a.Proc || f.Start >= by {
			continue
		}
		if a.Until == 0 && f.Start >= a.Invoke || a.Until != 0 && f.Start < last && f.End > due {
			return fmt.Sprintf("%s: proc %d stopped %s-%s, its lost-lock timer due at %s", LimitPaused, a.Proc, ms(f.Start), ms(f.End), ms(due))
		}
	}
	if a.Until == 0 {
		return ""
	}
	for _, s := range h.Stalls {
		if s.Proc == a.Proc && s.Invoke < last && s.Invoke < by && s.At > due && s.At-s.Invoke >= m {
			return fmt.Sprintf("%s: proc %d ran nothing %s-%s (%s), its lost-lock timer due at %s", LimitLateTimer, a.Proc,
				ms(s.Invoke), ms(s.At), ms(s.At-s.Invoke), ms(due))
		}
	}
	return ""
}

// explainFences returns the limit that explains why b, acquired after a,
// has a fence no higher than a's, or "" when none does: a fault that made
// a master forget its counter between a's call and b's acquisition.
func explainFences(h *History, a, b *Hold) string {
	f, ok := h.forgotten(LosesFences, a.Invoke, b.Acquired)
	if !ok {
		return ""
	}
	if f.Loses == LosesFences {
		return fmt.Sprintf("%s: %s of %s at %s", LimitQuorumCounter, f.Kind, f.Target, ms(f.Start))
	}
	return fmt.Sprintf("%s: %s of %s at %s", LimitRestartEmpty, f.Kind, f.Target, ms(f.Start))
}
