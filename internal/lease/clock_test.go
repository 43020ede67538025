package lease

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The clock's invariant, against a model of Redis: commands that set the
// lease are sent with lengths that change now and then (a Refresh), Redis
// runs each at some moment after it was sent, in any order, late or not at
// all, and refuses one of a lower generation than the highest it ran; their
// outcomes come back in any order, or are lost. Whatever happens, until is
// never later than the expiry Redis would have, at any step.
func TestClock_UntilNeverAfterTheExpiry(t *testing.T) {
	for seed := range uint64(20000) {
		r := rand.New(rand.NewPCG(seed, 1))
		start := time.Unix(1000, 0)
		ttls := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}
		c := clock{until: start.Add(ttls[1]), ttl: ttls[1], genTTL: ttls[1]}
		expiry, ranGen := start.Add(ttls[1]), int64(0) // what Redis has
		type cmd struct {
			id   uint64
			sent time.Time
			ttl  time.Duration
			gen  int64
			ran  bool // Redis ran it
			set  bool // and it set the lease
			done bool // its outcome came back
		}
		var cmds []*cmd
		now := start
		for step := 0; step < 40; step++ {
			now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
			if now.After(expiry) {
				break // the key expired: the lock is lost, and nothing sets it again
			}
			switch op := r.IntN(4); {
			case op == 0 || len(cmds) == 0: // send
				ttl := c.ttl
				if r.IntN(4) == 0 {
					ttl = ttls[r.IntN(len(ttls))]
				}
				id, gen, _ := c.send(now, ttl)
				cmds = append(cmds, &cmd{id: id, sent: now, ttl: ttl, gen: gen})
			case op == 1: // Redis runs one, late or not; one of a lower generation changes nothing
				x := cmds[r.IntN(len(cmds))]
				if !x.ran && x.gen >= ranGen {
					ranGen, expiry, x.set = x.gen, now.Add(x.ttl), true
				}
				x.ran = true
			default: // an outcome comes back: set, not set, or unknown
				x := cmds[r.IntN(len(cmds))]
				if x.done {
					continue
				}
				x.done = true
				out := outcomeUnknown // lost: it may run later still
				switch {
				case x.ran && x.set:
					out = outcomeSet
				case x.ran:
					out = outcomeNotSet
				}
				c.record(x.id, out, now)
			}
			if c.until.After(expiry) && !now.After(expiry) {
				t.Fatalf("seed %d step %d: until %v after the expiry %v", seed, step, c.until.Sub(start), expiry.Sub(start))
			}
		}
	}
}
