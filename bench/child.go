package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	checkKey   string
	startAt    int64  // Unix nanoseconds
	setPrefix  string // a set setup's: the prefix of its keys (see setKeysFor)
}

// childLead is how long before the start of a multi-process run its
// children are started, to connect; snapshotLead is how long before the
// start the parent reads the server's counters.
const (
	childLead    = time.Second
	snapshotLead = 20 * time.Millisecond
)

// wallClock stamps the records of multi-process runs: one machine, one clock.
func wallClock() int64 { return time.Now().UnixNano() }

// runChild is the body of a child process: it runs the contended loop of one
// implementation with -workers goroutines and a critical section sleeping
// -cs from the agreed start time, and writes the run (with the commands its
// lock client sent) as JSON to stdout.
func runChild(ctx context.Context, f flags, c childFlags) error {
	cfg, err := findConfig(c.impl)
	if err != nil {
		return err
	}
	l, err := newLocalRun(ctx, f.redisURL, cfg, f.workers)
	if err != nil {
		return fmt.Errorf("child: %w", err)
	}
	defer l.close()
	k := keys{lock: c.lockKey, counter: c.counterKey, check: c.checkKey}
	if c.setPrefix != "" {
		k.set = setKeysFor(c.setPrefix, setShape{keys: f.setKeys, min: f.setMin, max: f.setMax}, f.workers)
	}
	r := l.run(ctx, contendParams{
		keys:     k,
		workers:  f.workers,
		start:    time.Unix(0, c.startAt),
		duration: f.duration,
		bound:    f.bound,
		sleep:    f.cs,
		clock:    wallClock,
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// contendProcs runs setup s of cfg in s.procs child processes (this very
// binary with -child) of s.workers goroutines each, all starting at the same
// moment, and merges their runs. atStart is called just before that moment,
// once the children have had time to connect. The children are killed if
// ctx ends (the parent is interrupted), atStart fails or one of them fails,
// and by the kernel if the parent dies.
func contendProcs(parent context.Context, f flags, cfg config, s setup, k keys, atStart func() error) (run, error) {
	if k.set != nil && k.set.shape.disjoint {
		return run{}, errors.New("a disjoint set setup runs in one process") // each child's workers would draw the same keys
	}
	exe, err := os.Executable()
	if err != nil {
		return run{}, err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()

	startAt := time.Now().Add(childLead)
	args := childArgs(f, cfg, s, k, startAt)
	runs := make([]run, s.procs)
	errs := make([]error, s.procs+1)
	var wg sync.WaitGroup
	for i := range s.procs {
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
	if sleepUntil(ctx, startAt.Add(-snapshotLead)) {
		if errs[s.procs] = atStart(); errs[s.procs] != nil {
			cancel()
		}
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
	return mergeRuns(runs, startAt, f.duration), nil
}

// childArgs are the command-line arguments of a child of contendProcs.
func childArgs(f flags, cfg config, s setup, k keys, startAt time.Time) []string {
	args := []string{
		"-child", cfg.name,
		"-redis", f.redisURL,
		"-lock-key", k.lock,
		"-counter-key", k.counter,
		"-check-key", k.check,
		"-start-at", strconv.FormatInt(startAt.UnixNano(), 10),
		"-workers", strconv.Itoa(s.workers),
		"-duration", f.duration.String(),
		"-bound", f.bound.String(),
		"-cs", s.sleep.String(),
	}
	if k.set != nil {
		sh := k.set.shape
		args = append(args, "-set-prefix", k.set.prefix,
			"-set-keys", strconv.Itoa(sh.keys), "-set-min", strconv.Itoa(sh.min), "-set-max", strconv.Itoa(sh.max))
	}
	return args
}

// mergeRuns joins the children's runs into one over the common window.
func mergeRuns(runs []run, startAt time.Time, d time.Duration) run {
	merged := run{Start: startAt.UnixNano(), End: startAt.Add(d).UnixNano()}
	for _, r := range runs {
		merged.Workers = append(merged.Workers, r.Workers...)
		merged.LockCmds += r.LockCmds
	}
	return merged
}

// sleepUntil waits until t and reports true, or reports false if ctx ends
// first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
