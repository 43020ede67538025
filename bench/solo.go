package main

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// soloRounds is how many rounds soloAll splits the uncontended cycles into.
const soloRounds = 10

// soloResult is a configuration's uncontended Obtain+Release cycle.
type soloResult struct {
	perCycle time.Duration // mean time of one cycle
	allocs   float64       // heap allocations per cycle in this process
}

// soloAll measures the uncontended Obtain+Release cycle of every
// configuration, interleaved: in each round every configuration runs a tenth
// of its cycles, in a rotating order, so that drift of the machine (CPU
// frequency, other load) spreads evenly over them instead of favouring the
// configurations measured last.
func soloAll(ctx context.Context, f flags, cfgs []config, prefix string) ([]soloResult, error) {
	impls := make([]impl, len(cfgs))
	for i, cfg := range cfgs {
		rdb, err := cfg.lockClient(f.redisURL)
		if err != nil {
			return nil, err
		}
		defer rdb.Close()
		impls[i] = cfg.make(rdb)
	}
	sums := make([]soloResult, len(cfgs))
	n := max(f.cycles/soloRounds, 1)
	logf("uncontended cycles: %d rounds of %d per configuration", soloRounds, n)
	for round := range soloRounds {
		err := rotated(len(cfgs), round, func(i int) error {
			d, allocs, err := soloCycles(ctx, impls[i], prefix+cfgs[i].name+":solo", n, f.bound)
			if err != nil {
				return fmt.Errorf("%s: %w", cfgs[i].name, err)
			}
			sums[i].perCycle += d
			sums[i].allocs += float64(allocs)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for i := range sums {
		sums[i].perCycle /= soloRounds
		sums[i].allocs /= float64(soloRounds * n)
	}
	return sums, nil
}

// soloCycles returns the mean time of an Obtain+Release cycle on a free key,
// after a warm-up (connections, script loading), and the heap allocations
// of the process during the n cycles (runtime.MemStats.Mallocs, read around
// them, outside the timing).
func soloCycles(ctx context.Context, im impl, key string, n int, bound time.Duration) (time.Duration, uint64, error) {
	for range 50 {
		if _, err := cycle(ctx, im, key, bound); err != nil {
			return 0, 0, fmt.Errorf("uncontended: %w", err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range n {
		if _, err := cycle(ctx, im, key, bound); err != nil {
			return 0, 0, fmt.Errorf("uncontended: %w", err)
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return elapsed / time.Duration(n), after.Mallocs - before.Mallocs, nil
}

// cycle takes the lock on key and releases it, both under one context
// bounded by bound. It reports held when the lock call failed because
// another holder had the key (and did not wait for it); err is that failure
// or any other error of the lock call (a timeout at bound included) or of
// the release.
func cycle(ctx context.Context, im impl, key string, bound time.Duration) (held bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	unlock, err := im.lock(ctx, key)
	switch {
	case err == nil:
		if err := unlock(ctx); err != nil {
			return false, fmt.Errorf("release: %w", err)
		}
		return false, nil
	case isTimeout(ctx):
		return false, fmt.Errorf("timed out at -bound: %w", err)
	}
	return isNotObtained(err), err
}
