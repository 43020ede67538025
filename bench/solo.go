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
		for j := range cfgs {
			i := (j + round) % len(cfgs)
			d, err := soloCycles(ctx, impls[i], prefix+cfgs[i].name+":solo", n, f.bound)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cfgs[i].name, err)
			}
			sums[i] += d
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
	cycle := func() error {
		lctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		unlock, err := im.lock(lctx, key)
		if err != nil {
			return fmt.Errorf("uncontended lock: %w", err)
		}
		if err := unlock(lctx); err != nil {
			return fmt.Errorf("uncontended release: %w", err)
		}
		return nil
	}
	for range 50 {
		if err := cycle(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for range n {
		if err := cycle(); err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(n), nil
}
