package main

import (
	"context"
	"fmt"
	"time"
)

// soloRounds is how many rounds soloAll splits the uncontended cycles into.
const soloRounds = 10

// soloAll measures the uncontended Obtain+Release cycle of every
// configuration, interleaved: in each round every configuration runs a tenth
// of its cycles, in a rotating order, so that drift of the machine (CPU
// frequency, other load) spreads evenly over them instead of favouring the
// configurations measured last.
func soloAll(ctx context.Context, f flags, cfgs []config, prefix string) ([]time.Duration, error) {
	impls := make([]impl, len(cfgs))
	for i, cfg := range cfgs {
		rdb, err := cfg.lockClient(f.redisURL)
		if err != nil {
			return nil, err
		}
		defer rdb.Close()
		impls[i] = cfg.make(rdb)
	}
	sums := make([]time.Duration, len(cfgs))
	n := max(f.cycles/soloRounds, 1)
	logf("uncontended cycles: %d rounds of %d per configuration", soloRounds, n)
	for round := range soloRounds {
		err := rotated(len(cfgs), round, func(i int) error {
			d, err := soloCycles(ctx, impls[i], prefix+cfgs[i].name+":solo", n, f.bound)
			if err != nil {
				return fmt.Errorf("%s: %w", cfgs[i].name, err)
			}
			sums[i] += d
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for i := range sums {
		sums[i] /= soloRounds
	}
	return sums, nil
}

// soloCycles returns the mean time of an Obtain+Release cycle on a free key,
// after a warm-up (connections, script loading).
func soloCycles(ctx context.Context, im impl, key string, n int, bound time.Duration) (time.Duration, error) {
	for range 50 {
		if _, err := cycle(ctx, im, key, bound); err != nil {
			return 0, fmt.Errorf("uncontended: %w", err)
		}
	}
	start := time.Now()
	for range n {
		if _, err := cycle(ctx, im, key, bound); err != nil {
			return 0, fmt.Errorf("uncontended: %w", err)
		}
	}
	return time.Since(start) / time.Duration(n), nil
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
