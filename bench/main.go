// Command bench compares redislock with github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4 against one real redis-server: the cost
// of an uncontended Obtain+Release, and throughput, fairness, hand-off
// latency, Redis commands and mutual exclusion under contention, in one
// process and across several. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

type flags struct {
	redisURL    string
	out         string
	only        string
	duration    time.Duration
	bound       time.Duration
	cs          time.Duration
	cycles      int
	workers     int
	procs       int
	procWorkers int
}

func main() {
	var f flags
	var c childFlags
	flag.StringVar(&f.redisURL, "redis", "", "use the Redis at this URL (redis://host:port/db) instead of starting redis-server; keys get a unique prefix and nothing is flushed")
	flag.StringVar(&f.out, "out", "", "also write the report (markdown) to this file")
	flag.StringVar(&f.only, "only", "", "comma-separated implementations to run (default: all)")
	flag.DurationVar(&f.duration, "duration", 3*time.Second, "length of each contended run")
	flag.DurationVar(&f.bound, "bound", 5*time.Second, "give up on one acquisition after this long (counted as a timeout)")
	flag.DurationVar(&f.cs, "cs", time.Millisecond, "sleep inside the critical section")
	flag.IntVar(&f.cycles, "cycles", 2000, "uncontended Obtain+Release cycles")
	flag.IntVar(&f.workers, "workers", 16, "goroutines of the single-process contended run (in a child: its goroutines)")
	flag.IntVar(&f.procs, "procs", 4, "processes of the multi-process contended run")
	flag.IntVar(&f.procWorkers, "proc-workers", 4, "goroutines per process of the multi-process run")
	flag.StringVar(&c.impl, "child", "", "internal: run as a child process for this implementation")
	flag.StringVar(&c.lockKey, "lock-key", "", "internal: child's lock key")
	flag.StringVar(&c.counterKey, "counter-key", "", "internal: child's counter key")
	flag.Int64Var(&c.startAt, "start-at", 0, "internal: child's start time, Unix nanoseconds")
	flag.Parse()
	if flag.NArg() > 0 || f.duration <= 0 || f.bound <= 0 || f.cs < 0 || f.cycles <= 0 || f.workers <= 0 || f.procs <= 0 || f.procWorkers <= 0 {
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

// row is the outcome for one configuration.
type row struct {
	cfg        config
	solo       time.Duration // mean uncontended Obtain+Release
	one, multi contendStats  // single-process and multi-process runs
	lostOne    int64
	lostMulti  int64
	srvPerAcq  float64            // commandstats calls per acquisition (1p)
	sentPerAcq float64            // commands the lock client sent per acquisition (1p)
	mix        map[string]float64 // commandstats calls per acquisition by command (1p)
}

func runParent(ctx context.Context, f flags) error {
	selected, err := selectConfigs(f.only)
	if err != nil {
		return err
	}

	owned := f.redisURL == ""
	if owned {
		srv, err := startServer(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		f.redisURL = srv.url()
		logf("started redis-server on %s", srv.addr)
	}
	admin, err := newClient(f.redisURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", f.redisURL, err)
	}

	prefix := "redislock-bench:" + randomID() + ":"
	solos, err := soloAll(ctx, f, selected, prefix)
	if err != nil {
		return err
	}
	var rows []row
	for i, cfg := range selected {
		r, err := bench(ctx, f, admin, owned, prefix+cfg.name+":", cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.name, err)
		}
		r.solo = solos[i]
		rows = append(rows, r)
	}

	report := renderReport(ctx, f, admin, owned, rows)
	fmt.Print(report)
	if f.out != "" {
		if err := os.WriteFile(f.out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func selectConfigs(only string) ([]config, error) {
	if only == "" {
		return configs, nil
	}
	var out []config
	for _, name := range strings.Split(only, ",") {
		c, err := findConfig(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// bench measures one configuration, with its own clients and keys, starting
// from an empty Redis when the harness owns it.
func bench(ctx context.Context, f flags, admin *redis.Client, owned bool, prefix string, cfg config) (row, error) {
	r := row{cfg: cfg}
	if owned {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			return r, err
		}
	}
	var sent sentCounter
	lockRDB, err := cfg.lockClient(f.redisURL)
	if err != nil {
		return r, err
	}
	defer lockRDB.Close()
	lockRDB.AddHook(&sent)
	data, err := newClient(f.redisURL)
	if err != nil {
		return r, err
	}
	defer data.Close()
	im := cfg.make(lockRDB)
	soloKey, one, multi := prefix+"solo", keys{prefix + "1p:lock", prefix + "1p:counter"}, keys{prefix + "mp:lock", prefix + "mp:counter"}
	defer admin.Del(context.WithoutCancel(ctx), soloKey, one.lock, one.counter, multi.lock, multi.counter)

	logf("%s: %d goroutines, one process, %v", cfg.name, f.workers, f.duration)
	before, err := commandStats(ctx, admin)
	if err != nil {
		return r, err
	}
	sentBefore := sent.n.Load()
	epoch := time.Now()
	run1 := contend(ctx, contendParams{
		impl: im, data: data, keys: one, workers: f.workers,
		start: time.Now(), duration: f.duration, bound: f.bound, cs: f.cs,
		clock: func() int64 { return int64(time.Since(epoch)) }, // monotonic
	})
	if err := ctx.Err(); err != nil {
		return r, err
	}
	after, err := commandStats(ctx, admin)
	if err != nil {
		return r, err
	}
	r.one = analyse(run1)
	if r.lostOne, err = lostUpdates(ctx, admin, one.counter, r.one.acquired); err != nil {
		return r, err
	}
	if acq := float64(r.one.acquired); acq > 0 {
		// The critical section's GET and SET are the harness's, not the lock's.
		delta := statsDelta(before, after)
		delta["get"] -= int64(r.one.acquired)
		delta["set"] -= int64(r.one.acquired)
		r.mix = make(map[string]float64)
		var total int64
		for cmd, n := range delta {
			total += n
			if n != 0 {
				r.mix[cmd] = float64(n) / acq
			}
		}
		r.srvPerAcq = float64(total) / acq
		r.sentPerAcq = float64(sent.n.Load()-sentBefore) / acq
	}

	logf("%s: %d processes x %d goroutines, %v", cfg.name, f.procs, f.procWorkers, f.duration)
	runN, err := contendProcs(ctx, f, cfg, multi, f.procs, f.procWorkers)
	if err != nil {
		return r, err
	}
	r.multi = analyse(runN)
	if r.lostMulti, err = lostUpdates(ctx, admin, multi.counter, r.multi.acquired); err != nil {
		return r, err
	}
	return r, nil
}

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

// lostUpdates compares the counter incremented in the critical sections with
// the number of acquisitions.
func lostUpdates(ctx context.Context, rdb *redis.Client, counter string, acquired int) (int64, error) {
	n, err := rdb.Get(ctx, counter).Int64()
	if err == redis.Nil {
		n, err = 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read counter: %w", err)
	}
	return int64(acquired) - n, nil
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

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
