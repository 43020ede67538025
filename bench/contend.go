package main

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// keys are the Redis keys of one run.
type keys struct {
	lock    string   // the one lock everyone fights for
	counter string   // incremented non-atomically under the lock
	check   string   // set to the counter's new value after it, under the lock
	set     *setKeys // a set setup's keys, which it uses instead; nil otherwise
}

// keysFor returns the keys of a run, all starting with prefix.
func keysFor(prefix string) keys {
	return keys{lock: prefix + "lock", counter: prefix + "counter", check: prefix + "check"}
}

// record is one acquisition, in the run's clock (nanoseconds): when the
// worker started asking for the lock, when it got it, and when it started
// releasing it.
type record [3]int64

func (r record) asked() int64    { return r[0] }
func (r record) acquired() int64 { return r[1] }
func (r record) released() int64 { return r[2] }

// workerResult is what one contending goroutine did.
type workerResult struct {
	Acquired    int      `json:"acquired"`
	Timeouts    int      `json:"timeouts"`     // attempts that hit the bound
	GaveUp      int      `json:"gave_up"`      // attempts that failed before the bound
	ReleaseErrs int      `json:"release_errs"` // releases that returned an error
	Torn        int      `json:"torn"`         // critical sections that read counter and check out of step
	Errors      []string `json:"errors,omitempty"`
	Records     []record `json:"records"`
	Sets        [][]int  `json:"sets,omitempty"` // set setups: each record's set (indices of its keys)
}

// run is the outcome of one contended run, from one or several processes.
// Start and End bound the measuring window in the clock of the records.
// LockCmds counts the commands the lock clients sent (see sentCounter).
type run struct {
	Start    int64          `json:"start"`
	End      int64          `json:"end"`
	Workers  []workerResult `json:"workers"`
	LockCmds int64          `json:"lock_cmds"`
}

// contendParams set up a contended run.
type contendParams struct {
	impl     impl
	data     *redis.Client // for the critical section's GETs and SETs
	keys     keys
	workers  int
	start    time.Time // when to begin (the run waits for it)
	duration time.Duration
	bound    time.Duration // give up on one acquisition after this long
	sleep    time.Duration // in the middle of the critical section
	clock    func() int64  // timestamps of the records
}

// contend runs p.workers goroutines that take the lock on p.keys.lock in a
// loop from p.start until p.start+p.duration, and returns when all of them
// have stopped. An attempt still waiting at the end is seen through: it ends
// acquired (and its critical section is run) or timed out at p.bound, so that
// starved waiters show in the waits and timeouts.
func contend(ctx context.Context, p contendParams) run {
	if d := time.Until(p.start); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	end := p.start.Add(p.duration)
	r := run{Start: p.clock(), Workers: make([]workerResult, p.workers)}
	r.End = r.Start + int64(time.Until(end))
	var wg sync.WaitGroup
	for i := range r.Workers {
		if p.keys.set != nil {
			wg.Go(func() { r.Workers[i] = setWorker(ctx, p, end, i) })
		} else {
			wg.Go(func() { r.Workers[i] = worker(ctx, p, end) })
		}
	}
	wg.Wait()
	return r
}

// worker takes the lock again and again until end or until ctx (the whole
// bench) is cancelled.
func worker(ctx context.Context, p contendParams, end time.Time) workerResult {
	var w workerResult
	for ctx.Err() == nil && time.Now().Before(end) {
		asked := p.clock()
		actx, cancel := context.WithTimeout(ctx, p.bound)
		unlock, err := p.impl.lock(actx, p.keys.lock)
		timedOut := isTimeout(actx)
		cancel()
		if err != nil {
			w.failed(ctx, err, timedOut)
			continue
		}
		acquired := p.clock()
		if criticalSection(p.data, p.keys, p.sleep) {
			w.Torn++
		}
		released := p.clock()
		w.release(unlock, p.bound)
		w.Acquired++
		w.Records = append(w.Records, record{asked, acquired, released})
	}
	return w
}

// failed counts a lock attempt that failed with err: a timeout if it hit
// the bound, nothing if the bench was interrupted (ctx ended), an error
// otherwise.
func (w *workerResult) failed(ctx context.Context, err error, timedOut bool) {
	switch {
	case ctx.Err() != nil: // interrupted
	case timedOut:
		w.Timeouts++
	default:
		w.GaveUp++
		w.Errors = keepError(w.Errors, err.Error(), 3)
		time.Sleep(time.Millisecond) // no busy loop on a broken Redis
	}
}

// release releases a lock, bounded by bound, and counts an error.
func (w *workerResult) release(unlock func(context.Context) error, bound time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := unlock(ctx); err != nil {
		w.ReleaseErrs++
		w.Errors = keepError(w.Errors, err.Error(), 3)
	}
}

// criticalSection is the work done under the lock, four calls on the data
// client: GET counter, GET check, the sleep (if any), SET counter n+1, SET
// check n+1. Two holders at once lose an update of the counter (found at the
// end by comparing it with the acquisitions) and may read counter and check
// out of step, which it reports as torn. It runs to completion whatever the
// run's context, so that every acquisition counts once.
func criticalSection(data *redis.Client, k keys, sleep time.Duration) (torn bool) {
	ctx := context.Background()
	n, err := getInt(ctx, data, k.counter)
	if err != nil {
		n = math.MinInt32 // makes the check fail loudly
	}
	m, checkErr := getInt(ctx, data, k.check)
	if sleep > 0 {
		time.Sleep(sleep)
	}
	data.Set(ctx, k.counter, n+1, 0)
	data.Set(ctx, k.check, n+1, 0)
	return err == nil && checkErr == nil && m != n
}

// alone runs the critical section back to back in one goroutine, without a
// lock, for d or until ctx ends, and returns how many ran in how long: the
// throughput no lock that serializes them can beat.
func alone(ctx context.Context, data *redis.Client, k keys, sleep, d time.Duration) (int, time.Duration) {
	start := time.Now()
	n := 0
	for ctx.Err() == nil && time.Since(start) < d {
		criticalSection(data, k, sleep)
		n++
	}
	return n, time.Since(start)
}

// getInt reads an integer key, 0 if it does not exist.
func getInt(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
	n, err := rdb.Get(ctx, key).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	return n, err
}

// keepError adds msg to errs unless errs holds it already or has limit
// errors: the first few distinct errors.
func keepError(errs []string, msg string, limit int) []string {
	if len(errs) < limit && !slices.Contains(errs, msg) {
		errs = append(errs, msg)
	}
	return errs
}

// contendStats summarises a run.
type contendStats struct {
	acquired    int
	perSec      float64 // acquisitions inside the window per second
	fairness    float64 // fewest acquisitions of a worker / mean
	handoffP50  time.Duration
	handoffP99  time.Duration
	handoffs    int // hand-offs measured
	waitP50     time.Duration
	waitP99     time.Duration
	waitMax     time.Duration
	timeouts    int
	gaveUp      int
	releaseErrs int
	torn        int // critical sections that read counter and check out of step
	reacquired  int // acquisitions by the worker that held the lock just before
	overlaps    int // an acquisition before the previous holder (of a key, in a set setup) began to release
	errors      []string

	// Set setups only.
	keyAcq     []int                 // acquisitions that held each key
	setKeys    int                   // keys locked, over all acquisitions
	waitBySize map[int]time.Duration // p99 wait of the sets of each size
}

// acq is an acquisition of a run: its record, its worker and, in a set
// setup, its set.
type acq struct {
	record
	worker int
	set    []int
}

// analyse summarises a run: throughput in its window, fairness, waits,
// failures, and the hand-offs of the lock key or, in a set setup (set not
// nil), what analyseSets finds.
func analyse(r run, set *setKeys) contendStats {
	var s contendStats
	var all []acq
	least := math.MaxInt
	for i, w := range r.Workers {
		s.acquired += w.Acquired
		s.timeouts += w.Timeouts
		s.gaveUp += w.GaveUp
		s.releaseErrs += w.ReleaseErrs
		s.torn += w.Torn
		least = min(least, w.Acquired)
		for j, rec := range w.Records {
			a := acq{record: rec, worker: i}
			if j < len(w.Sets) {
				a.set = w.Sets[j]
			}
			all = append(all, a)
		}
		for _, e := range w.Errors {
			s.errors = keepError(s.errors, e, 5)
		}
	}
	if len(r.Workers) > 0 && s.acquired > 0 {
		s.fairness = float64(least) / (float64(s.acquired) / float64(len(r.Workers)))
	}

	inWindow := 0
	waits := make([]int64, 0, len(all))
	for _, a := range all {
		if a.acquired() >= r.Start && a.acquired() <= r.End {
			inWindow++
		}
		waits = append(waits, a.acquired()-a.asked())
	}
	s.perSec = float64(inWindow) / (float64(r.End-r.Start) / float64(time.Second))
	s.waitP50 = time.Duration(percentile(waits, 0.50))
	s.waitP99 = time.Duration(percentile(waits, 0.99))
	s.waitMax = time.Duration(percentile(waits, 1))
	if set != nil {
		analyseSets(&s, len(set.locks), all)
		return s
	}

	// A hand-off is from a holder starting its release to another worker,
	// which was already asking then, acquiring. The holder taking the lock
	// again straight away is a re-acquisition, not a hand-off. Only the
	// window counts: after it, the waiters left drain without competition.
	slices.SortFunc(all, func(a, b acq) int { return cmp.Compare(a.acquired(), b.acquired()) })
	var handoffs []int64
	for i := 1; i < len(all); i++ {
		prev, next := all[i-1], all[i]
		switch {
		case next.acquired() < prev.released():
			s.overlaps++
		case next.worker == prev.worker:
			s.reacquired++
		case next.asked() <= prev.released() && next.acquired() <= r.End:
			handoffs = append(handoffs, next.acquired()-prev.released())
		}
	}
	s.handoffs = len(handoffs)
	s.handoffP50 = time.Duration(percentile(handoffs, 0.50))
	s.handoffP99 = time.Duration(percentile(handoffs, 0.99))
	return s
}

// percentile returns the q-quantile (nearest rank) of xs, sorting xs; 0 for
// none.
func percentile(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(i, 0)]
}
