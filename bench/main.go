// Command bench compares redislock with github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4 against one real redis-server: the cost
// of an uncontended Obtain+Release, and, with workers fighting for one lock
// in one process or across several, with a critical section that sleeps or
// not: throughput against the critical section run alone, commands and
// redis-server CPU per acquisition, fairness, waits and mutual exclusion.
// See README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	ours "github.com/seed5e0b76d9/redislock"
)

// flags are the command line of the parent (and, with childFlags, of a
// child).
type flags struct {
	redisURL    string
	out         string
	only        string
	setups      string
	duration    time.Duration
	bound       time.Duration
	cs          time.Duration
	cycles      int
	repeat      int
	workers     int
	procs       int
	procWorkers int
	scale       int
	mkWorkers   int
	mkKeys      int
	setKeys     int
	setMin      int
	setMax      int
}

func main() {
	var f flags
	var c childFlags
	flag.StringVar(&f.redisURL, "redis", "", "use the Redis at this URL (redis://host:port/db) instead of starting redis-server; keys get a unique prefix and nothing is flushed")
	flag.StringVar(&f.out, "out", "", "also write the report (markdown) to this file")
	flag.StringVar(&f.only, "only", "", "comma-separated configurations to run, e.g. ours,bsm-linear-1ms,bsm/auto; an implementation of the many-keys setup (ours, bsm, redsync, floor, native-delifeq) selects it on both clients (default: all)")
	flag.StringVar(&f.setups, "setups", "", "comma-separated setups to run, of 1p-sleep, 1p-short, Np-sleep, Np-short, 1p-<scale>, Np-<scale/N>, 1p-sets, Np-sets, 1p-sets-disjoint with N = -procs, many-keys (default: all)")
	flag.DurationVar(&f.duration, "duration", 3*time.Second, "length of each contended or many-keys run and of each run of the critical section alone")
	flag.DurationVar(&f.bound, "bound", 5*time.Second, "give up on one acquisition after this long (counted as a timeout)")
	flag.DurationVar(&f.cs, "cs", time.Millisecond, "sleep in the middle of the critical section of the *-sleep setups (in a child: of its run)")
	flag.IntVar(&f.cycles, "cycles", 2000, "uncontended Obtain+Release cycles")
	flag.IntVar(&f.repeat, "repeat", 1, "run every setup of every configuration this many times and report medians")
	flag.IntVar(&f.workers, "workers", 16, "goroutines of the single-process setups (in a child: its goroutines)")
	flag.IntVar(&f.procs, "procs", 4, "processes of the multi-process setups (at least 2)")
	flag.IntVar(&f.procWorkers, "proc-workers", 4, "goroutines per process of the multi-process setups")
	flag.IntVar(&f.scale, "scale", 1000, "goroutines of the scale setups: all in one process (1p-<scale>), and split over -procs processes (<procs>p-<scale/procs>)")
	flag.IntVar(&f.mkWorkers, "mk-workers", 32, "goroutines of the many-keys setup")
	flag.IntVar(&f.mkKeys, "mk-keys", 100_000, "keys of the many-keys setup, each cycle picks one at random")
	flag.IntVar(&f.setKeys, "set-keys", 8, "keys of the pool the workers of 1p-sets and Np-sets draw their sets from (one hash tag)")
	flag.IntVar(&f.setMin, "set-min", 2, "fewest keys of a set in the set setups")
	flag.IntVar(&f.setMax, "set-max", 4, fmt.Sprintf("most keys of a set in the set setups (at most %d), and each worker's own keys in 1p-sets-disjoint", ours.MaxKeys))
	flag.StringVar(&c.impl, "child", "", "internal: run as a child process for this implementation")
	flag.StringVar(&c.lockKey, "lock-key", "", "internal: child's lock key")
	flag.StringVar(&c.counterKey, "counter-key", "", "internal: child's counter key")
	flag.StringVar(&c.checkKey, "check-key", "", "internal: child's check key")
	flag.Int64Var(&c.startAt, "start-at", 0, "internal: child's start time, Unix nanoseconds")
	flag.StringVar(&c.setPrefix, "set-prefix", "", "internal: the prefix of the child's set keys (a set setup)")
	flag.Parse()
	if flag.NArg() > 0 || !f.valid(c.impl != "") {
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	goroutines := runtime.NumGoroutine()
	var err error
	if c.impl != "" {
		err = runChild(ctx, f, c)
	} else if err = runParent(ctx, f); err == nil {
		checkGoroutines(goroutines)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// valid reports whether the flags make sense; a child's critical section
// may have no sleep.
func (f flags) valid(child bool) bool {
	ok := f.duration > 0 && f.bound > 0 && f.cs >= 0 && f.workers > 0 &&
		f.setMin > 0 && f.setMin <= f.setMax && f.setMax <= f.setKeys && f.setMax <= ours.MaxKeys
	if child {
		return ok
	}
	return ok && f.cs > 0 && f.cycles > 0 && f.repeat > 0 && f.procs > 1 && f.procWorkers > 0 && f.scale >= f.procs && f.mkWorkers > 0 && f.mkKeys > 0
}

// runParent runs the whole bench and prints the report.
func runParent(ctx context.Context, f flags) error {
	cfgs, setups, mkCfgs, err := selectRuns(f)
	if err != nil {
		return err
	}
	h := &harness{f: f, owned: f.redisURL == "", prefix: "redislock-bench:" + randomID() + ":"}
	if h.owned {
		srv, err := startServer(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		h.f.redisURL = srv.url()
		logf("started redis-server on %s", srv.addr)
	}
	if h.admin, err = newClient(h.f.redisURL); err != nil {
		return err
	}
	defer h.admin.Close()
	if err := h.admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", h.f.redisURL, err)
	}
	defer h.delMatching(ctx, h.prefix) // what the runs' own clean-up missed: side keys of the libraries

	cfgs, mkCfgs, skipped, err := skipNative(ctx, h.admin, cfgs, mkCfgs)
	switch {
	case err != nil:
		return err
	case len(cfgs) == 0 && len(setups) == 0 && len(mkCfgs) == 0:
		return errors.New(skipped + " Nothing else was selected")
	}
	res := newResults(cfgs, setups, mkCfgs)
	res.skipped = skipped
	if len(cfgs) > 0 {
		if res.solo, err = soloAll(ctx, h.f, cfgs, h.prefix); err != nil {
			return err
		}
	}
	if err := h.measureAll(ctx, res); err != nil {
		return err
	}
	report := renderReport(ctx, h.f, h.admin, h.owned, res)
	fmt.Print(report)
	if f.out != "" {
		return os.WriteFile(f.out, []byte(report), 0o644)
	}
	return nil
}

// selectRuns returns what -only and -setups select: the contended setups
// and their configurations (no setup if no configuration), and the
// many-keys configurations (none if that setup is not selected).
func selectRuns(f flags) ([]config, []setup, []mkConfig, error) {
	cfgs, mkCfgs, err := selectConfigs(f.only)
	if err != nil {
		return nil, nil, nil, err
	}
	setups, manyKeys, err := selectSetups(f)
	if err != nil {
		return nil, nil, nil, err
	}
	setups = slices.DeleteFunc(setups, func(s setup) bool { return !slices.ContainsFunc(cfgs, s.runs) })
	if !manyKeys {
		mkCfgs = nil
	}
	if len(setups) == 0 && len(mkCfgs) == 0 {
		return nil, nil, nil, errors.New("-only names no configuration of the setups of -setups")
	}
	return cfgs, setups, mkCfgs, nil
}

// selectConfigs returns the configurations named in -only (all if empty):
// of the contended setups, in the order named, and of the many-keys setup,
// in table order. A name of an implementation of the many-keys setup
// ("ours", "bsm") selects its configurations on both clients.
func selectConfigs(only string) ([]config, []mkConfig, error) {
	if only == "" {
		return configs, mkConfigs(), nil
	}
	names := strings.Split(only, ",")
	var cfgs []config
	for i, name := range names {
		names[i] = strings.TrimSpace(name)
		c, err := findConfig(names[i])
		switch {
		case err == nil:
			cfgs = append(cfgs, c)
		case !slices.ContainsFunc(mkConfigs(), mkNamed(names[i])):
			return nil, nil, fmt.Errorf("%w, nor of the many-keys setup (have %s)", err, mkNames())
		}
	}
	mks := slices.DeleteFunc(mkConfigs(), func(c mkConfig) bool {
		return !slices.ContainsFunc(names, func(name string) bool { return mkNamed(name)(c) })
	})
	return cfgs, mks, nil
}

// mkNames lists the many-keys configurations and their implementations.
func mkNames() string {
	var names []string
	for _, c := range mkConfigs() {
		names = append(names, c.name())
	}
	for _, im := range mkImpls {
		names = append(names, im.name)
	}
	return strings.Join(names, ", ")
}

// mkNamed returns whether a many-keys configuration is called name, or is of
// the implementation called name.
func mkNamed(name string) func(mkConfig) bool {
	return func(c mkConfig) bool { return c.name() == name || c.impl.name == name }
}

// checkGoroutines warns if goroutines are left over once everything is
// closed (they get a moment to notice).
func checkGoroutines(baseline int) {
	for range 50 {
		if runtime.NumGoroutine() <= baseline {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	logf("warning: %d goroutines still running at the end (%d at start)", runtime.NumGoroutine(), baseline)
}

// randomID returns 8 random hex digits.
func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// logf logs progress to stderr with the time of day.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
