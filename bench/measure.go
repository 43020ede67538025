package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// harness is what the parent's measurements share.
type harness struct {
	f      flags
	admin  *redis.Client // flushes and reads the server between runs, never during one
	owned  bool          // the harness started redis-server: see prepare
	prefix string        // of every key
}

// sample is what one contended run of one configuration in one setup
// measured.
type sample struct {
	stats    contendStats
	lost     int64            // acquisitions minus the final counter
	lockCmds int64            // commands the lock clients sent (hooks + subscriptions)
	srvCmds  map[string]int64 // commandstats delta without bookkeeping and the critical sections' calls
	cpu      float64          // redis-server CPU seconds over the run
	others   float64          // share of a core other programs used meanwhile (NaN: unknown)
}

// aloneSample is one run of the critical section alone: one worker, no lock.
type aloneSample struct {
	n       int           // critical sections run
	elapsed time.Duration // how long they took
	cpu     float64       // redis-server CPU seconds over them
	others  float64       // share of a core other programs used meanwhile (NaN: unknown)
}

// mark is the server's and the machine's counters at one moment.
type mark struct {
	srv serverSnap
	cpu cpuMark
}

// mark reads the counters: one INFO command on the admin client.
func (h *harness) mark(ctx context.Context) (mark, error) {
	srv, err := snapshot(ctx, h.admin)
	return mark{srv: srv, cpu: markCPU()}, err
}

// usage returns the redis-server CPU seconds between two marks and the share
// of a core other programs used meanwhile.
func usage(before, after mark) (redisCPU, others float64) {
	redisCPU = after.srv.cpu - before.srv.cpu
	return redisCPU, othersShare(before.cpu, after.cpu, redisCPU)
}

// csCalls are the commands of one critical section: its GETs and SETs.
var csCalls = map[string]int64{"get": 2, "set": 2}

// measureAll runs every setup of every configuration, f.repeat times, and
// the critical section alone before each contended setup. Within a
// repetition the setups run in order, the many-keys setup last, and, in
// each, the configurations back to back in an order that rotates from one
// repetition to the next.
func (h *harness) measureAll(ctx context.Context, res *results) error {
	runs := len(res.mkCfgs)
	for _, s := range res.setups {
		runs++ // the critical section alone
		for _, c := range res.cfgs {
			if s.runs(c) {
				runs++
			}
		}
	}
	p := progress{total: h.f.repeat * runs}
	for rep := range h.f.repeat {
		for _, s := range res.setups {
			if err := h.measureSetup(ctx, res, s, rep, &p); err != nil {
				return err
			}
		}
		if err := h.measureManyKeys(ctx, res, rep, &p); err != nil {
			return err
		}
	}
	return nil
}

// measureSetup runs, for repetition rep, the critical section of setup s
// alone and then s for every configuration, adding to res.
func (h *harness) measureSetup(ctx context.Context, res *results, s setup, rep int, p *progress) error {
	p.log("rep %d, %s: critical section alone", rep+1, s.name)
	a, err := h.measureAlone(ctx, s, runKeys(h.prefix+fmt.Sprintf("alone:%s:%d:", s.name, rep), s))
	if err != nil {
		return fmt.Errorf("%s alone: %w", s.name, err)
	}
	res.alone[s.name] = append(res.alone[s.name], a)
	return rotated(len(res.cfgs), rep, func(i int) error {
		cfg := res.cfgs[i]
		if !s.runs(cfg) {
			return nil
		}
		p.log("rep %d, %s: %s", rep+1, s.name, cfg.name)
		sm, err := h.measure(ctx, cfg, s, runKeys(h.prefix+fmt.Sprintf("%s:%s:%d:", cfg.name, s.name, rep), s))
		if err != nil {
			return fmt.Errorf("%s %s: %w", s.name, cfg.name, err)
		}
		res.runs[s.name][i] = append(res.runs[s.name][i], sm)
		return nil
	})
}

// runKeys returns the keys of a run of setup s, all starting with prefix.
func runKeys(prefix string, s setup) keys {
	k := keysFor(prefix)
	if s.set != nil {
		k.set = setKeysFor(prefix, *s.set, s.procs*s.workers)
	}
	return k
}

// rotated calls f with 0 to n-1, beginning at rep mod n, so that the order
// rotates by one from one repetition to the next; it stops at the first
// error.
func rotated(n, rep int, f func(i int) error) error {
	for j := range n {
		if err := f((j + rep) % n); err != nil {
			return err
		}
	}
	return nil
}

// progress logs the runs as they start, numbered.
type progress struct{ done, total int }

// log counts a run and logs its number and format, args.
func (p *progress) log(format string, args ...any) {
	p.done++
	logf("[%d/%d] "+format, append([]any{p.done, p.total}, args...)...)
}

// measure runs setup s of cfg once, from an empty Redis when the harness
// owns it, and reads the server's counters just before it starts and once
// its workers have all stopped and closed their clients.
func (h *harness) measure(ctx context.Context, cfg config, s setup, k keys) (sample, error) {
	if err := h.prepare(ctx); err != nil {
		return sample{}, err
	}
	defer h.del(ctx, k)
	var before mark
	atStart := func() (err error) {
		before, err = h.mark(ctx)
		return err
	}
	var r run
	var err error
	if s.procs == 1 {
		r, err = h.contendHere(ctx, cfg, s, k, atStart)
	} else {
		r, err = contendProcs(ctx, h.f, cfg, s, k, atStart)
	}
	if err != nil {
		return sample{}, err
	}
	after, err := h.mark(ctx)
	if err != nil {
		return sample{}, err
	}
	sm := sample{stats: analyse(r, k.set)}
	sm.cpu, sm.others = usage(before, after)
	css := sm.stats.acquired // critical sections of one key
	if k.set != nil {
		sm.lost, err = lostSetUpdates(ctx, h.admin, k.set, sm.stats.keyAcq)
		css = sm.stats.setKeys
	} else {
		sm.lost, err = lostUpdates(ctx, h.admin, k.counter, sm.stats.acquired)
	}
	if err != nil {
		return sample{}, err
	}
	sm.srvCmds = statsDelta(before.srv.calls, after.srv.calls)
	for cmd, n := range csCalls {
		sm.srvCmds[cmd] -= n * int64(css)
	}
	sm.lockCmds = r.LockCmds + subscriptionCmds(sm.srvCmds)
	return sm, nil
}

// contendHere runs setup s of cfg in this process, timestamped on the
// monotonic clock, calling atStart once its clients are connected.
func (h *harness) contendHere(ctx context.Context, cfg config, s setup, k keys, atStart func() error) (run, error) {
	l, err := newLocalRun(ctx, h.f.redisURL, cfg, s.workers)
	if err != nil {
		return run{}, err
	}
	defer l.close()
	if err := atStart(); err != nil {
		return run{}, err
	}
	epoch := time.Now()
	r := l.run(ctx, contendParams{
		keys: k, workers: s.workers,
		start: time.Now(), duration: h.f.duration, bound: h.f.bound, sleep: s.sleep,
		clock: func() int64 { return int64(time.Since(epoch)) },
	})
	return r, ctx.Err()
}

// measureAlone runs the critical section of setup s alone (one worker, no
// lock; in a set setup, as many workers as the setup has, no lock) for
// -duration on keys k, from an empty Redis when the harness owns it, and
// reads the server's CPU around it.
func (h *harness) measureAlone(ctx context.Context, s setup, k keys) (aloneSample, error) {
	if err := h.prepare(ctx); err != nil {
		return aloneSample{}, err
	}
	defer h.del(ctx, k)
	data, err := newClient(h.f.redisURL)
	if err != nil {
		return aloneSample{}, err
	}
	defer data.Close()
	workers := 1
	if s.set != nil {
		workers = s.procs * s.workers
	}
	if err := warm(ctx, data, workers); err != nil {
		return aloneSample{}, err
	}
	before, err := h.mark(ctx)
	if err != nil {
		return aloneSample{}, err
	}
	var n int
	var elapsed time.Duration
	if s.set != nil {
		n, elapsed = aloneSets(ctx, data, k.set, workers, s.sleep, h.f.duration)
	} else {
		n, elapsed = alone(ctx, data, k, s.sleep, h.f.duration)
	}
	if err := ctx.Err(); err != nil {
		return aloneSample{}, err
	}
	after, err := h.mark(ctx)
	if err != nil {
		return aloneSample{}, err
	}
	a := aloneSample{n: n, elapsed: elapsed}
	a.cpu, a.others = usage(before, after)
	return a, nil
}

// prepare readies a server the harness owns for a run: it empties it and
// makes sure that the admin client is its only client, so that nothing but
// the run's own clients loads it (those of the previous run may take a
// moment to be gone).
func (h *harness) prepare(ctx context.Context) error {
	if !h.owned {
		return nil
	}
	if err := h.admin.FlushAll(ctx).Err(); err != nil {
		return err
	}
	for range 50 {
		n, err := connectedClients(ctx, h.admin)
		if err != nil || n <= 1 {
			return err
		}
		if !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return ctx.Err()
		}
	}
	return errors.New("other clients stay connected to the redis-server between runs")
}

// del removes a run's keys (for a server given by -redis, where nothing is
// flushed).
func (h *harness) del(ctx context.Context, k keys) {
	keys := []string{k.lock, k.counter, k.check}
	if k.set != nil {
		keys = append(keys, k.set.all()...)
	}
	h.admin.Del(context.WithoutCancel(ctx), keys...)
}

// delMatching removes, on a server given by -redis (where nothing is
// flushed), the keys whose name contains part: a run's keys and whatever
// side keys an implementation named after them (SCAN over all the keys).
func (h *harness) delMatching(ctx context.Context, part string) {
	if h.owned {
		return
	}
	ctx = context.WithoutCancel(ctx)
	iter := h.admin.Scan(ctx, 0, "*"+part+"*", 1000).Iterator()
	for iter.Next(ctx) {
		h.admin.Del(ctx, iter.Val())
	}
}

// lostUpdates compares the counter incremented in the critical sections with
// the number of acquisitions.
func lostUpdates(ctx context.Context, rdb *redis.Client, counter string, acquired int) (int64, error) {
	n, err := getInt(ctx, rdb, counter)
	if err != nil {
		return 0, fmt.Errorf("read counter: %w", err)
	}
	return int64(acquired) - n, nil
}
