package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// childFlags are what the parent tells a child process (see runChild).
type childFlags struct {
	impl       string
	lockKey    string
	counterKey string
	startAt    int64 // Unix nanoseconds
}

// wallClock stamps the records of multi-process runs: one machine, one clock.
func wallClock() int64 { return time.Now().UnixNano() }

// runChild is the body of a child process: it runs the contended loop of one
// implementation with -workers goroutines from the agreed start time and
// writes the run as JSON to stdout.
func runChild(ctx context.Context, f flags, c childFlags) error {
	cfg, err := findConfig(c.impl)
	if err != nil {
		return err
	}
	lockRDB, err := cfg.lockClient(f.redisURL)
	if err != nil {
		return err
	}
	defer lockRDB.Close()
	data, err := newClient(f.redisURL)
	if err != nil {
		return err
	}
	defer data.Close()
	if err := data.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("child %s: %w", c.impl, err)
	}
	r := contend(ctx, contendParams{
		impl:     cfg.make(lockRDB),
		data:     data,
		keys:     keys{lock: c.lockKey, counter: c.counterKey},
		workers:  f.workers,
		start:    time.Unix(0, c.startAt),
		duration: f.duration,
		bound:    f.bound,
		cs:       f.cs,
		clock:    wallClock,
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// contendProcs runs the contended loop in procs child processes (this very
// binary with -child) of workersPerProc goroutines each, all starting at the
// same moment, and merges their runs. The children are killed if ctx ends
// (the parent is interrupted) or one of them fails, and by the kernel if the
// parent dies.
func contendProcs(parent context.Context, f flags, cfg config, k keys, procs, workersPerProc int) (run, error) {
	exe, err := os.Executable()
	if err != nil {
		return run{}, err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()

	startAt := time.Now().Add(time.Second) // time for the children to start
	args := []string{
		"-child", cfg.name,
		"-redis", f.redisURL,
		"-lock-key", k.lock,
		"-counter-key", k.counter,
		"-start-at", strconv.FormatInt(startAt.UnixNano(), 10),
		"-workers", strconv.Itoa(workersPerProc),
		"-duration", f.duration.String(),
		"-bound", f.bound.String(),
		"-cs", f.cs.String(),
	}
	runs := make([]run, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		var stdout bytes.Buffer
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		cmd.WaitDelay = time.Second
		setDeathSignal(cmd)
		if err := cmd.Start(); err != nil {
			cancel()
			wg.Wait()
			return run{}, fmt.Errorf("start child: %w", err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("child %d (%s): %w", i, cfg.name, err)
				cancel() // one failed: stop the others
				return
			}
			if err := json.Unmarshal(stdout.Bytes(), &runs[i]); err != nil {
				errs[i] = fmt.Errorf("child %d (%s): bad report: %w", i, cfg.name, err)
			}
		})
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return run{}, err
	}
	for _, err := range errs {
		if err != nil {
			return run{}, err
		}
	}
	merged := run{Start: startAt.UnixNano(), End: startAt.Add(f.duration).UnixNano()}
	for _, r := range runs {
		merged.Workers = append(merged.Workers, r.Workers...)
	}
	return merged, nil
}
