package history

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// Faults the nemesis injects.
const (
	FaultFreeze       = "freeze"        // SIGSTOP a redis-server (one master of a quorum) for 0.3-1.6 ttl, then SIGCONT
	FaultHold         = "hold"          // the proxy holds every byte for 0.2-1.5 ttl, then delivers them
	FaultReset        = "reset"         // the proxy resets every connection, 3-6 times in a row
	FaultLatency      = "latency"       // for 1.5 s, the proxy holds bytes 10-150 ms at a time (latency spikes)
	FaultScriptFlush  = "script-flush"  // SCRIPT FLUSH on every master, 5 times
	FaultClientKill   = "client-kill"   // CLIENT KILL TYPE normal and TYPE pubsub on every master
	FaultRestartAOF   = "restart-aof"   // SIGKILL a redis-server (one master of a quorum), restart it with its AOF
	FaultRestartEmpty = "restart-empty" // SIGKILL, delete the AOF, restart empty (quorum: after 1.5 ttl away, the restart rule)
	FaultPauseClient  = "pause-client"  // SIGSTOP a worker process for ttl + 0.2-0.8 s (past its leases), then SIGCONT
	FaultFailover     = "failover"      // SENTINEL FAILOVER
	FaultKillPrimary  = "kill-primary"  // SIGKILL the Sentinel primary; restart it once the replica took over
	FaultKillMaster   = "kill-master"   // SIGKILL the Cluster master of the exclusive key; restart it once its replica took over
	FaultShardMove    = "cluster-failover"
	// FaultRogueDelete is not a fault the library claims to survive:
	// another client deletes the lock keys, every 20 ms for 3 s. The
	// harness's self-check injects it to see that the checkers report
	// what follows (TestHistory_SeesAnomalies).
	FaultRogueDelete = "rogue-delete"
)

// What a fault makes Redis forget (Fault.Loses).
const (
	LosesLocks  = "locks+fences" // the locks and the fence counters of every key on the server
	LosesFences = "fences"       // one quorum master's fence counters (the restart rule keeps the locks)
)

// A Fault is one fault the nemesis injected, with its interval on the Now
// clock: Start before the first action, End after the last (the thaw,
// the restart, the resume).
type Fault struct {
	Kind   string
	Target string // the server, proxy or worker process it hit
	Start  int64
	End    int64
	Proc   int    // FaultPauseClient: the paused worker process; -1 otherwise
	Loses  string // LosesLocks, LosesFences or ""
}

// A Nemesis injects faults into a deployment and the worker processes
// that use it, and records them. It runs on the test's goroutine.
type Nemesis struct {
	t      testing.TB
	d      *Deployment
	rng    *rand.Rand
	procs  []*Child
	keys   []KeySpec // keys[0] is the exclusive key (FaultKillMaster kills its master)
	Faults []Fault
}

// NewNemesis returns a nemesis for d and procs, seeded.
func NewNemesis(t testing.TB, d *Deployment, procs []*Child, keys []KeySpec, seed uint64) *Nemesis {
	return &Nemesis{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 0x5eed)), procs: procs, keys: keys}
}

// Run injects the faults of kinds, in a shuffled order over and over, with
// 200-500 ms between two, until window has passed.
func (n *Nemesis) Run(kinds []string, window time.Duration) {
	end := time.Now().Add(window)
	for time.Now().Before(end) {
		for _, i := range n.rng.Perm(len(kinds)) {
			if !time.Now().Before(end) {
				break
			}
			n.inject(kinds[i])
			time.Sleep(n.between(200*time.Millisecond, 500*time.Millisecond))
		}
	}
}

// between returns a random duration in [lo, hi].
func (n *Nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)+1))
}

// ttlTimes returns ttl times a random factor in [lo, hi].
func (n *Nemesis) ttlTimes(lo, hi float64) time.Duration {
	return time.Duration(float64(n.d.TTL) * (lo + n.rng.Float64()*(hi-lo)))
}

// inject injects one fault of kind and records it.
func (n *Nemesis) inject(kind string) {
	t, d := n.t, n.d
	f := Fault{Kind: kind, Proc: -1, Start: Now()}
	switch kind {
	case FaultFreeze:
		s := n.oneMaster()
		f.Target = s.Addr()
		s.Freeze(t)
		time.Sleep(n.ttlTimes(0.3, 1.6))
		s.Thaw(t)
	case FaultHold:
		f.Target = "proxy"
		d.proxy.Pause()
		time.Sleep(n.ttlTimes(0.2, 1.5))
		d.proxy.Resume()
	case FaultReset:
		f.Target = "proxy"
		for range 3 + n.rng.IntN(4) {
			d.proxy.ResetAll()
			time.Sleep(n.between(50*time.Millisecond, 150*time.Millisecond))
		}
	case FaultLatency:
		f.Target = "proxy"
		end := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(end) {
			d.proxy.Pause()
			time.Sleep(n.between(10*time.Millisecond, 150*time.Millisecond))
			d.proxy.Resume()
			time.Sleep(n.between(20*time.Millisecond, 80*time.Millisecond))
		}
	case FaultScriptFlush:
		f.Target = "every master"
		for range 5 {
			for _, s := range n.masters() {
				if _, err := do(s.Addr(), "SCRIPT", "FLUSH"); err != nil {
					t.Logf("nemesis: SCRIPT FLUSH %s: %v", s.Addr(), err)
				}
			}
			time.Sleep(30 * time.Millisecond)
		}
	case FaultClientKill:
		f.Target = "every master"
		for _, s := range n.masters() {
			for _, typ := range []string{"normal", "pubsub"} {
				if _, err := do(s.Addr(), "CLIENT", "KILL", "TYPE", typ); err != nil {
					t.Logf("nemesis: CLIENT KILL %s: %v", s.Addr(), err)
				}
			}
		}
	case FaultRestartAOF:
		s := n.oneMaster()
		f.Target = s.Addr()
		d.kill(t, s)
		time.Sleep(n.between(100*time.Millisecond, 300*time.Millisecond))
		d.restart(t, s)
	case FaultRestartEmpty:
		s := n.oneMaster()
		f.Target = s.Addr()
		f.Loses = LosesLocks
		away := n.between(100*time.Millisecond, 300*time.Millisecond)
		if d.Config.Kind == DeployQuorum {
			// The restart rule: away for longer than the longest lease.
			f.Loses, away = LosesFences, d.TTL*3/2
		}
		d.kill(t, s)
		if err := os.RemoveAll(filepath.Join(s.Dir(), "appendonlydir")); err != nil {
			t.Fatalf("nemesis: remove the AOF: %v", err)
		}
		time.Sleep(away)
		d.restart(t, s)
	case FaultPauseClient:
		c := n.procs[n.rng.IntN(len(n.procs))]
		f.Target, f.Proc = "proc "+strconv.Itoa(c.Proc), c.Proc
		c.signal(syscall.SIGSTOP)
		time.Sleep(d.TTL + n.between(200*time.Millisecond, 800*time.Millisecond))
		c.signal(syscall.SIGCONT)
	case FaultFailover:
		f.Target = d.sent.CurrentPrimary(t)
		d.sent.Failover(t)
	case FaultKillPrimary:
		old := d.sent.CurrentPrimary(t)
		f.Target = old
		s := n.serverAt(old)
		d.kill(t, s)
		n.waitPrimaryMoves(old)
		d.restart(t, s) // it comes back empty; the Sentinels make it a replica
	case FaultKillMaster:
		m := d.cluster.KillMaster(t, n.keys[0].Name)
		f.Target = m.Addr()
		d.mu.Lock()
		d.down[m] = true
		d.mu.Unlock()
		d.cluster.WaitFailover(t, m)
		d.restart(t, m) // it rejoins as a replica
	case FaultShardMove:
		m := d.cluster.MasterFor(t, n.keys[0].Name)
		f.Target = m.Addr()
		d.cluster.Failover(t, m)
	case FaultRogueDelete:
		f.Target = "the lock keys"
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			for _, k := range n.keys {
				if _, err := do(d.single.Addr(), "DEL", k.Name); err != nil {
					t.Logf("nemesis: DEL %s: %v", k.Name, err)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	default:
		t.Fatalf("nemesis: unknown fault %q", kind)
	}
	f.End = Now()
	n.Faults = append(n.Faults, f)
}

// masters are the servers that hold locks now.
func (n *Nemesis) masters() []*redistest.Server {
	switch {
	case n.d.sent != nil:
		return []*redistest.Server{n.serverAt(n.d.sent.CurrentPrimary(n.t))}
	case n.d.cluster != nil:
		return n.d.cluster.Masters(n.t)
	}
	return n.d.servers(n.t)
}

// oneMaster picks a master: the single node, or one master of a quorum.
func (n *Nemesis) oneMaster() *redistest.Server {
	ms := n.masters()
	return ms[n.rng.IntN(len(ms))]
}

// serverAt returns the Sentinel deployment's data process at addr.
func (n *Nemesis) serverAt(addr string) *redistest.Server {
	for _, s := range n.d.servers(n.t) {
		if s.Addr() == addr {
			return s
		}
	}
	n.t.Fatalf("nemesis: no server at %s", addr)
	return nil
}

// waitPrimaryMoves waits until the Sentinels report a primary other than
// old (an automatic failover takes about 2-3 s).
func (n *Nemesis) waitPrimaryMoves(old string) {
	deadline := time.Now().Add(30 * time.Second)
	for n.d.sent.CurrentPrimary(n.t) == old {
		if time.Now().After(deadline) {
			n.t.Fatalf("nemesis: the Sentinels still report %s 30 s after it was killed", old)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
