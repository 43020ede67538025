package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// stress makes TestMultiProcessMutualExclusion run until a million critical
// sections (or $REDISLOCK_STRESS_TARGET) instead of for a few seconds:
//
//	go test -run '^TestMultiProcessMutualExclusion$' -v -timeout 0 . -args -stress
var stress = flag.Bool("stress", false, "TestMultiProcessMutualExclusion: run until 1,000,000 critical sections in total ($REDISLOCK_STRESS_TARGET overrides the number)")

// The child processes of TestMultiProcessMutualExclusion are told what to do
// through these environment variables.
const (
	mpChildEnv   = "REDISLOCK_MP_CHILD"   // the child's number; set only in children
	mpAddrEnv    = "REDISLOCK_MP_ADDR"    // Redis address
	mpOutEnv     = "REDISLOCK_MP_OUT"     // file to write the critical sections to
	mpUntilEnv   = "REDISLOCK_MP_UNTIL"   // stop at this wall-clock time (Unix ns)
	mpTargetEnv  = "REDISLOCK_MP_TARGET"  // stop once the counter reaches this
	mpWorkersEnv = "REDISLOCK_MP_WORKERS" // goroutines per child
	mpSleepEnv   = "REDISLOCK_MP_SLEEP"   // extra time in each critical section
	mpLockEnv    = "REDISLOCK_MP_LOCK"    // "false": no lock (the harness's self-check)
	mpPermitsEnv = "REDISLOCK_MP_PERMITS" // > 0: take permits of a semaphore instead of a lock
)

const (
	mpKey     = "mp:lock"
	mpCounter = "mp:counter"
	mpTTL     = 10 * time.Second // far longer than any critical section
)

// Mutual exclusion across processes: 4 processes (this test binary,
// re-executed) of 4 goroutines each take one lock over and over, and under it
// increment a counter with a non-atomic GET and SET, recording each critical
// section as a [start, end] interval of wall-clock nanoseconds (one machine,
// so comparable across processes). No two intervals may overlap, and the
// counter must equal the number of critical sections: a lost update means two
// holders at once.
func TestMultiProcessMutualExclusion(t *testing.T) {
	if os.Getenv(mpChildEnv) != "" {
		mpChild(t)
		return
	}
	cfg := mpConfig{procs: 4, workers: 4, run: 3 * time.Second, target: math.MaxInt64, sleep: 100 * time.Microsecond, lock: true}
	if *stress {
		cfg.run, cfg.target, cfg.sleep = 2*time.Hour, 1_000_000, 0
		if s := os.Getenv("REDISLOCK_STRESS_TARGET"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			require.NoError(t, err, "REDISLOCK_STRESS_TARGET")
			cfg.target = n
		}
	}
	r := runMP(t, cfg)
	if t.Failed() {
		return
	}
	if *stress {
		assert.Equal(t, cfg.target, r.sections, "stopped at the target")
	} else {
		assert.Greater(t, r.sections, int64(100), "too few critical sections to prove anything")
	}
	assert.Equal(t, r.sections, r.counter, "lost updates: two holders at once")
	assert.Zero(t, r.overlaps, "overlapping critical sections")
}

// The harness of TestMultiProcessMutualExclusion sees races: without the
// lock, the same processes lose updates and their critical sections overlap.
func TestMultiProcessHarnessSeesRaces(t *testing.T) {
	if os.Getenv(mpChildEnv) != "" {
		mpChild(t)
		return
	}
	r := runMP(t, mpConfig{procs: 2, workers: 2, run: time.Second, target: math.MaxInt64, sleep: 100 * time.Microsecond, lock: false})
	require.False(t, t.Failed())
	assert.Positive(t, r.overlaps, "no overlap seen without the lock")
	assert.Less(t, r.counter, r.sections, "no lost update seen without the lock")
}

type mpConfig struct {
	procs, workers int
	run            time.Duration // stop after this long
	target         int64         // or once the counter reaches this
	sleep          time.Duration // extra time in each critical section
	lock           bool          // take the lock (false: the harness's self-check)
	permits        int           // > 0: take permits of a semaphore of this many
}

type mpResult struct {
	sections, counter, overlaps int64
	concurrent                  int // the most critical sections at once
}

// TestMultiProcessSemaphore runs the harness of
// TestMultiProcessMutualExclusion with permits of a semaphore of 3 instead of
// a lock: across 4 processes of 4 goroutines, never more than 3 critical
// sections at once (the intervals are checked), and 3 at once is reached.
func TestMultiProcessSemaphore(t *testing.T) {
	if os.Getenv(mpChildEnv) != "" {
		mpChild(t)
		return
	}
	r := runMP(t, mpConfig{procs: 4, workers: 4, run: 2 * time.Second, target: math.MaxInt64, sleep: 2 * time.Millisecond, lock: true, permits: 3})
	require.False(t, t.Failed())
	assert.Greater(t, r.sections, int64(100), "too few critical sections to prove anything")
	assert.LessOrEqual(t, r.concurrent, 3, "more holders than permits")
	assert.Equal(t, 3, r.concurrent, "the permits were never all used at once")
	assert.Equal(t, r.sections, r.counter, "the counter counts the critical sections")
}

// runMP runs cfg.procs children of the calling test and checks their
// critical sections.
func runMP(t *testing.T, cfg mpConfig) mpResult {
	b := realBackend(t)
	direct, _ := b.client(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.run+time.Minute)
	defer cancel()

	start := time.Now()
	until := start.Add(cfg.run)
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	children := make([]*child, cfg.procs)
	for i := range children {
		c := &child{}
		c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.timeout=0")
		c.cmd.Env = append(os.Environ(),
			mpChildEnv+"="+strconv.Itoa(i),
			mpAddrEnv+"="+b.addr,
			mpOutEnv+"="+filepath.Join(dir, "child"+strconv.Itoa(i)),
			mpUntilEnv+"="+strconv.FormatInt(until.UnixNano(), 10),
			mpTargetEnv+"="+strconv.FormatInt(cfg.target, 10),
			mpWorkersEnv+"="+strconv.Itoa(cfg.workers),
			mpSleepEnv+"="+cfg.sleep.String(),
			mpLockEnv+"="+strconv.FormatBool(cfg.lock),
			mpPermitsEnv+"="+strconv.Itoa(cfg.permits),
		)
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		require.NoError(t, c.cmd.Start())
		children[i] = c
	}
	var all [][2]int64
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("child %d: %v\n%s", i, err, c.out.String())
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, "child"+strconv.Itoa(i)))
		require.NoError(t, err)
		require.Zero(t, len(data)%16)
		n := len(data) / 16
		for j := 0; j < n; j++ {
			s := int64(binary.LittleEndian.Uint64(data[16*j:]))
			e := int64(binary.LittleEndian.Uint64(data[16*j+8:]))
			all = append(all, [2]int64{s, e})
		}
		t.Logf("child %d: %d critical sections", i, n)
	}
	elapsed := time.Since(start)
	var r mpResult
	if t.Failed() {
		return r
	}

	r.sections = int64(len(all))
	t.Logf("%d critical sections in %v by %d processes of %d goroutines: %.0f/s",
		r.sections, elapsed.Round(time.Millisecond), cfg.procs, cfg.workers, float64(r.sections)/elapsed.Seconds())
	require.Positive(t, r.sections)
	var err error
	r.counter, err = direct.Get(ctxT(t, 5*time.Second), mpCounter).Int64()
	require.NoError(t, err)

	r.concurrent = mostAtOnce(all)
	slices.SortFunc(all, func(a, b [2]int64) int { return cmpInt64(a[0], b[0]) })
	for i, iv := range all {
		if iv[1] < iv[0] {
			t.Errorf("interval %d ends before it starts: %v", i, iv)
		}
		if i > 0 && iv[0] < all[i-1][1] {
			if r.overlaps++; r.overlaps <= 10 && cfg.lock && cfg.permits == 0 {
				t.Errorf("critical sections overlap by %v: [%d, %d] and [%d, %d]",
					time.Duration(all[i-1][1]-iv[0]), all[i-1][0], all[i-1][1], iv[0], iv[1])
			}
		}
	}
	return r
}

// mostAtOnce returns the most intervals that overlap at one instant.
func mostAtOnce(intervals [][2]int64) int {
	type event struct {
		at    int64
		delta int
	}
	var events []event
	for _, iv := range intervals {
		events = append(events, event{iv[0], 1}, event{iv[1], -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := cmpInt64(a.at, b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	most, now := 0, 0
	for _, e := range events {
		now += e.delta
		most = max(most, now)
	}
	return most
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mpChild is one child process of TestMultiProcessMutualExclusion.
func mpChild(t *testing.T) {
	env := func(name string) int64 {
		n, err := strconv.ParseInt(os.Getenv(name), 10, 64)
		require.NoError(t, err, name)
		return n
	}
	until := time.Unix(0, env(mpUntilEnv))
	target := env(mpTargetEnv)
	workers := int(env(mpWorkersEnv))
	sleep, err := time.ParseDuration(os.Getenv(mpSleepEnv))
	require.NoError(t, err)
	lock := os.Getenv(mpLockEnv) != "false"
	var opts []redislock.Option
	if n := env(mpPermitsEnv); n > 0 {
		opts = append(opts, redislock.WithPermits(int(n)))
	}

	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(mpAddrEnv)})
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithBackoff(time.Millisecond, 20*time.Millisecond))
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()

	var (
		mu        sync.Mutex
		intervals [][2]int64
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			var mine [][2]int64
			defer func() {
				mu.Lock()
				intervals = append(intervals, mine...)
				mu.Unlock()
			}()
			bg := context.Background()
			for ctx.Err() == nil {
				var lk *redislock.Lock
				if lock {
					var err error
					if lk, err = locker.Obtain(ctx, mpKey, mpTTL, opts...); err != nil {
						if ctx.Err() == nil {
							t.Errorf("Obtain: %v", err)
						}
						return
					}
				}
				release := func() error {
					if lk == nil {
						return nil
					}
					return lk.Release(bg)
				}
				start := time.Now().UnixNano()
				if len(opts) > 0 { // permits: critical sections overlap; count them atomically
					time.Sleep(sleep)
					if err := rdb.Incr(bg, mpCounter).Err(); err != nil {
						t.Errorf("INCR: %v", err)
						return
					}
					mine = append(mine, [2]int64{start, time.Now().UnixNano()})
					if err := release(); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
					continue
				}
				n, err := rdb.Get(bg, mpCounter).Int64()
				if errors.Is(err, redis.Nil) {
					n, err = 0, nil
				}
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				if n >= target {
					_ = release()
					cancel() // everyone stops: the target is reached
					return
				}
				if sleep > 0 {
					time.Sleep(sleep)
				}
				if err := rdb.Set(bg, mpCounter, n+1, 0).Err(); err != nil {
					t.Errorf("SET: %v", err)
					return
				}
				end := time.Now().UnixNano()
				mine = append(mine, [2]int64{start, end})
				if err := release(); err != nil {
					t.Errorf("Release: %v (the lease ran out during a critical section?)", err)
					return
				}
			}
		})
	}
	wg.Wait()

	buf := make([]byte, 0, 16*len(intervals))
	for _, iv := range intervals {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(iv[0]))
		buf = binary.LittleEndian.AppendUint64(buf, uint64(iv[1]))
	}
	require.NoError(t, os.WriteFile(os.Getenv(mpOutEnv), buf, 0o644))
	fmt.Printf("child %s: %d critical sections\n", os.Getenv(mpChildEnv), len(intervals))
}

// holderEnv tells a child process of killedHolder what to hold:
// "<addr> <key> <ttl> <mode>", mode "x", "shared" or a number of permits.
const holderEnv = "REDISLOCK_HOLDER"

// killedHolder starts a child process (this test binary) that obtains key
// on the Redis at addr for ttl in mode, and kills it with SIGKILL once it
// holds the key, as a holder that crashes. It returns when it killed it.
func killedHolder(t *testing.T, addr, key string, ttl time.Duration, mode string) time.Time {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), holderEnv+"="+addr+" "+key+" "+ttl.String()+" "+mode)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the holder did not start")
	require.Equal(t, "held\n", line)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	return time.Now()
}

// TestHelperHolder is the child process of killedHolder; it does nothing in
// a normal run.
func TestHelperHolder(t *testing.T) {
	spec := os.Getenv(holderEnv)
	if spec == "" {
		t.Skip("a child process of killedHolder")
	}
	var addr, key, ttlText, mode string
	_, err := fmt.Sscan(spec, &addr, &key, &ttlText, &mode)
	require.NoError(t, err)
	ttl, err := time.ParseDuration(ttlText)
	require.NoError(t, err)
	var opts []redislock.Option
	switch mode {
	case "x":
	case "shared":
		opts = append(opts, redislock.WithShared())
	default:
		n, err := strconv.Atoi(mode)
		require.NoError(t, err)
		opts = append(opts, redislock.WithPermits(n))
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	_, err = redislock.New(rdb).Obtain(context.Background(), key, ttl, opts...)
	require.NoError(t, err)
	fmt.Println("held")
	select {} // until killed
}
