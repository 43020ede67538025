package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The set setups: each cycle a worker locks a set of keys as one lock (all
// of them or none), runs a critical section that updates each key's
// counter, and releases them. In the contended ones (1p-sets, Np-sets) the
// workers draw their sets from one small pool of keys; in 1p-sets-disjoint
// each worker draws from keys of its own, so no two sets ever meet.

// setConfigs are the configurations that run in the set setups: ours
// (Locker.ObtainMulti, default options, bounded by -bound) and bsm's
// Client.ObtainMulti with each retry strategy. redsync has no lock of
// several keys. ours-ctx-timeout and ours-no-cancel are left out to keep
// the default run short.
var setConfigs = []string{"ours", "bsm-linear-10ms", "bsm-linear-1ms", "bsm-exp-1ms-64ms"}

// runsSets reports whether a configuration runs in the set setups.
func (c config) runsSets() bool { return slices.Contains(setConfigs, c.name) }

// multiImpl is an implementation that takes a set of keys as one lock:
// all of them or none. lockMulti blocks until it holds them all or ctx
// ends.
type multiImpl interface {
	lockMulti(ctx context.Context, keys []string) (unlock func(context.Context) error, err error)
}

var (
	_ multiImpl = (*oursImpl)(nil)
	_ multiImpl = (*bsmImpl)(nil)
)

// setShape is how the workers of a set setup draw their sets.
type setShape struct {
	keys     int  // contended: the pool every worker draws from; disjoint: each worker's own keys
	min, max int  // keys per set, drawn uniformly each cycle
	disjoint bool // each worker draws from keys of its own
}

// setKeys are the Redis keys of one run of a set setup: per key, the lock
// key, its counter and its check, and how the workers draw their sets.
// The keys of the contended pool share the hash tag {sets}, so that they
// are in one Redis Cluster hash slot, as bsm's ObtainMulti needs on a
// Cluster; in a disjoint run each worker's keys share a tag of their own
// ({w0}, {w1}, ...). (The harness runs on one redis-server, where the tags
// change nothing.)
type setKeys struct {
	prefix                  string
	shape                   setShape
	locks, counters, checks []string
}

// setKeysFor returns the keys of a run of a set setup with the given shape
// and workers (all the run's goroutines, over all its processes), all
// starting with prefix: prefix{sets}:lock:3, prefix{sets}:counter:3, ...;
// in a disjoint run, worker 5's are prefix{w5}:lock:0 and so on.
func setKeysFor(prefix string, sh setShape, workers int) *setKeys {
	k := &setKeys{prefix: prefix, shape: sh}
	add := func(tag string, i int) {
		base := prefix + "{" + tag + "}:"
		n := strconv.Itoa(i)
		k.locks = append(k.locks, base+"lock:"+n)
		k.counters = append(k.counters, base+"counter:"+n)
		k.checks = append(k.checks, base+"check:"+n)
	}
	if !sh.disjoint {
		for i := range sh.keys {
			add("sets", i)
		}
		return k
	}
	for w := range workers {
		for i := range sh.keys {
			add("w"+strconv.Itoa(w), i)
		}
	}
	return k
}

// all returns every key of the run.
func (k *setKeys) all() []string {
	return slices.Concat(k.locks, k.counters, k.checks)
}

// draw returns a random set for worker w: min to max distinct keys (their
// indices), in random order, out of the pool or, in a disjoint run, out of
// the worker's own keys.
func (k *setKeys) draw(w int) []int {
	sh := k.shape
	size := sh.min + rand.IntN(sh.max-sh.min+1)
	set := rand.Perm(sh.keys)[:size]
	if sh.disjoint {
		for i := range set {
			set[i] += w * sh.keys
		}
	}
	return set
}

// names returns the lock keys of a set.
func (k *setKeys) names(set []int) []string {
	out := make([]string, len(set))
	for i, j := range set {
		out[i] = k.locks[j]
	}
	return out
}

// setCriticalSection is the work done under a set's lock, on the data
// client: one pipeline of GET counter and GET check for each key, the
// sleep (if any), and one pipeline of SET counter n+1 and SET check n+1 for
// each key, n its counter read: 4 commands per key in 2 round trips. Two
// holders of a key at once lose an update of its counter (found at the end
// by comparing it with the acquisitions that held the key) and may read
// its counter and check out of step, which it reports as torn.
func setCriticalSection(data *redis.Client, k *setKeys, set []int, sleep time.Duration) (torn bool) {
	ctx := context.Background()
	reads := make([]*redis.StringCmd, 0, 2*len(set))
	_, _ = data.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range set {
			reads = append(reads, p.Get(ctx, k.counters[i]), p.Get(ctx, k.checks[i]))
		}
		return nil
	}) // each command's error is its own: see cmdInt
	if sleep > 0 {
		time.Sleep(sleep)
	}
	_, _ = data.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, i := range set {
			n, err := cmdInt(reads[2*j])
			if err != nil {
				n = math.MinInt32 // makes the check fail loudly
			}
			m, checkErr := cmdInt(reads[2*j+1])
			torn = torn || err == nil && checkErr == nil && m != n
			p.Set(ctx, k.counters[i], n+1, 0)
			p.Set(ctx, k.checks[i], n+1, 0)
		}
		return nil
	})
	return torn
}

// cmdInt reads the integer a GET returned, 0 if the key did not exist.
func cmdInt(c *redis.StringCmd) (int64, error) {
	n, err := c.Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

// aloneSets runs the critical sections of a set setup without a lock, in
// workers goroutines that draw their sets as the setup's workers do, for d
// or until ctx ends, and returns how many ran in how long: the throughput
// no lock can beat (sets that share keys lose updates here; that does not
// matter).
func aloneSets(ctx context.Context, data *redis.Client, k *setKeys, workers int, sleep, d time.Duration) (int, time.Duration) {
	start := time.Now()
	var n atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Since(start) < d {
				setCriticalSection(data, k, k.draw(w), sleep)
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load()), time.Since(start)
}

// setWorker is worker for a set setup: it locks a set drawn for worker w
// again and again until end or until ctx (the whole bench) is cancelled.
func setWorker(ctx context.Context, p contendParams, end time.Time, w int) workerResult {
	var res workerResult
	im, ok := p.impl.(multiImpl)
	if !ok {
		res.GaveUp++
		res.Errors = append(res.Errors, fmt.Sprintf("%s takes no set of keys", p.impl.name()))
		return res
	}
	k := p.keys.set
	for ctx.Err() == nil && time.Now().Before(end) {
		set := k.draw(w)
		asked := p.clock()
		actx, cancel := context.WithTimeout(ctx, p.bound)
		unlock, err := im.lockMulti(actx, k.names(set))
		timedOut := isTimeout(actx)
		cancel()
		if err != nil {
			res.failed(ctx, err, timedOut)
			continue
		}
		acquired := p.clock()
		if setCriticalSection(p.data, k, set, p.sleep) {
			res.Torn++
		}
		released := p.clock()
		res.release(unlock, p.bound)
		res.Acquired++
		res.Records = append(res.Records, record{asked, acquired, released})
		res.Sets = append(res.Sets, set)
	}
	return res
}

// analyseSets adds to s what is particular to a run of a set setup, whose
// acquisitions all holds in any order: the acquisitions of each key, the
// keys locked in all, overlapping holders of a key, and the waits of the
// sets of each size.
func analyseSets(s *contendStats, nkeys int, all []acq) {
	s.keyAcq = make([]int, nkeys)
	perKey := make([][]acq, nkeys)
	bySize := make(map[int][]int64)
	for _, a := range all {
		for _, i := range a.set {
			s.keyAcq[i]++
			perKey[i] = append(perKey[i], a)
		}
		s.setKeys += len(a.set)
		bySize[len(a.set)] = append(bySize[len(a.set)], a.acquired()-a.asked())
	}
	for _, as := range perKey {
		slices.SortFunc(as, func(a, b acq) int { return cmp.Compare(a.acquired(), b.acquired()) })
		for i := 1; i < len(as); i++ {
			if as[i].acquired() < as[i-1].released() {
				s.overlaps++
			}
		}
	}
	s.waitBySize = make(map[int]time.Duration)
	for size, waits := range bySize {
		s.waitBySize[size] = time.Duration(percentile(waits, 0.99))
	}
}

// lostSetUpdates compares each key's counter, incremented in the critical
// sections, with the acquisitions that held the key, and adds up the
// differences.
func lostSetUpdates(ctx context.Context, rdb *redis.Client, k *setKeys, keyAcq []int) (int64, error) {
	vals, err := rdb.MGet(ctx, k.counters...).Result()
	if err != nil {
		return 0, fmt.Errorf("read counters: %w", err)
	}
	var lost int64
	for i, v := range vals {
		var n int64
		if s, ok := v.(string); ok {
			if n, err = strconv.ParseInt(s, 10, 64); err != nil {
				return 0, fmt.Errorf("counter %s: %w", k.counters[i], err)
			}
		}
		lost += int64(keyAcq[i]) - n
	}
	return lost, nil
}
