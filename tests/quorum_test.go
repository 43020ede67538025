package tests

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// aofAlways makes a server log every write to disk before it answers: it
// never forgets a lock across a restart (the restart rule of NewQuorum).
var aofAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

// startMasters starts n independent redis-servers.
func startMasters(t testing.TB, n int, args ...string) []*redistest.Server {
	t.Helper()
	servers := make([]*redistest.Server, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); servers[i] = redistest.Start(t, args...) }()
	}
	wg.Wait()
	return servers
}

// quorumClients returns a client per address, with short timeouts so that
// a dead or frozen master costs little (one dial, not go-redis's 5), then
// opts applied.
func quorumClients(t testing.TB, addrs []string, opts ...func(*redis.Options)) []redis.UniversalClient {
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		o := &redis.Options{Addr: a, DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1}
		for _, opt := range opts {
			opt(o)
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

// longReads gives a quorum client go-redis's read timeout of 5 s, so that a
// frozen master's call waits instead of failing after 300 ms.
func longReads(o *redis.Options) { o.ReadTimeout = 5 * time.Second }

// obtainOnAll obtains key on locker and waits until every master holds it:
// the attempt on the master after the fastest majority has run too, so the
// masters agree.
func obtainOnAll(t *testing.T, ctx context.Context, locker *redislock.Locker, servers []*redistest.Server, key string, ttl time.Duration) *redislock.Lock {
	t.Helper()
	lk, err := locker.Obtain(ctx, key, ttl)
	require.NoError(t, err)
	for _, srv := range servers {
		require.Eventually(t, func() bool { return srv.Do(t, "GET", key) == lk.Token() }, time.Second, 5*time.Millisecond)
	}
	return lk
}

func addrsOf(servers []*redistest.Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// The quorum Locker has the Locker's API: a lock is the same token on every
// master, with its lease; TryObtain on a held key is ErrNotObtained; Refresh,
// TTL and KeepAlive act on every master; Release clears every master; fences
// increase; Inspect reports the holder a majority has. Options it does not
// support, and a nil client, are refused before anything is sent.
func TestQuorum_Basics(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)), redislock.WithHolder("quorum test"))

	lk, err := locker.Obtain(ctx, "k", 2*time.Second, redislock.WithFencing())
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		for _, s := range servers {
			if s.Do(t, "GET", "k") != lk.Token() {
				return false
			}
		}
		return true
	}, time.Second, 5*time.Millisecond, "the lock is on every master (on a majority when Obtain returns)")
	assert.Positive(t, lk.Fence())
	_, err = redislock.NewQuorum(quorumClients(t, addrsOf(servers))).TryObtain(ctx, "k", time.Second)
	assert.ErrorIs(t, err, redislock.ErrNotObtained)

	info, err := locker.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	assert.Equal(t, "quorum test", info.Holders[0].Description)
	assert.Equal(t, lk.Fence(), info.Fence)

	require.NoError(t, lk.Refresh(ctx, 5*time.Second))
	refreshed := func() (n int) { // masters with the new lease (the old one was 2s)
		for _, s := range servers {
			if s.Do(t, "PTTL", "k").(int64) > 4500 {
				n++
			}
		}
		return n
	}
	assert.GreaterOrEqual(t, refreshed(), 2, "a majority has the new lease when Refresh returns")
	// TTL reads the first majority to answer, which may hold a master whose
	// refresh is still on its way (TTL is then rightly the old lease): wait
	// for every master.
	require.Eventually(t, func() bool { return refreshed() == len(servers) }, 2*time.Second, time.Millisecond)
	left, err := lk.TTL(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 5*time.Second, left, float64(200*time.Millisecond))
	lctx := lk.KeepAlive(ctx)
	time.Sleep(time.Second)
	require.NoError(t, lctx.Err())
	require.NoError(t, lk.Release(ctx))
	for _, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "k"))
	}
	assert.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)

	next, err := locker.Obtain(ctx, "k", time.Second, redislock.WithFencing())
	require.NoError(t, err)
	assert.Greater(t, next.Fence(), lk.Fence())
	require.NoError(t, next.Release(ctx))

	for _, opt := range []redislock.Option{redislock.WithShared(), redislock.WithPermits(2), redislock.WithReplicas(1, time.Millisecond)} {
		_, err := locker.TryObtain(ctx, "other", time.Second, opt)
		assert.ErrorIs(t, err, redislock.ErrInvalidOption)
	}
	_, err = redislock.NewQuorum(nil).TryObtain(ctx, "k", time.Second)
	assert.ErrorIs(t, err, redislock.ErrNilClient)
	_, err = redislock.NewQuorum([]redis.UniversalClient{nil}).TryObtain(ctx, "k", time.Second)
	assert.ErrorIs(t, err, redislock.ErrNilClient)
}

// With 2 of 5 masters down, locks are obtained, kept, contended and
// released as before; with 3 down, a kept lock is reported lost within its
// lease, and an acquisition fails with an error that is not ErrNotObtained
// (fewer than a majority answered: Redis is down, not busy).
func TestQuorum_MinorityLoss(t *testing.T) {
	waitsInParallel(t)
	servers := startMasters(t, 5)
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))
	other := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))

	servers[0].Kill(t)
	servers[3].Kill(t)
	lk, err := locker.Obtain(ctx, "k", time.Second)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	_, err = other.TryObtain(ctx, "k", time.Second)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	time.Sleep(2 * time.Second)
	require.NoError(t, lctx.Err(), "kept on the 3 masters left")

	lost := watchLoss(lctx)
	servers[1].Kill(t)
	select {
	case l := <-lost:
		assert.ErrorIs(t, l.cause, redislock.ErrLockLost)
		assert.True(t, l.at.Before(lk.Until().Add(timerSlack)), "told within the lease") // nothing moves Until after the loss
	case <-time.After(2 * time.Second):
		t.Fatal("a lock with no majority left was not reported lost")
	}
	_, err = other.TryObtain(ctx, "k2", time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.Contains(t, err.Error(), "fewer than a majority")
}

// A client cut off from 3 of 5 masters (a black hole: toxiproxy's timeout
// toxic) cannot obtain even a free key, and says it could not reach a
// majority; a holder cut off from 3 masters is told that its lock is lost
// before a client that sees every master can take the key.
func TestQuorum_MinorityPartition(t *testing.T) {
	servers := startMasters(t, 5)
	ctx := ctxT(t, 30*time.Second)
	proxies := newToxis(t, addrsOf(servers)...)
	var viaProxy []string
	for _, p := range proxies {
		viaProxy = append(viaProxy, p.Addr())
	}
	cut := func() {
		for _, p := range proxies[:3] {
			p.add("blackhole", "blackhole", "downstream", nil)
			t.Cleanup(func() { p.remove("blackhole") })
		}
	}
	partitioned := redislock.NewQuorum(quorumClients(t, viaProxy))
	full := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))

	lk, err := partitioned.Obtain(ctx, "held", 1500*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	lostAt := watchLost(lctx)
	cut()
	start := time.Now()
	_, err = partitioned.Obtain(ctx, "free", time.Second, redislock.WithWait(500*time.Millisecond))
	require.Error(t, err, "a minority cannot obtain")
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.Contains(t, err.Error(), "fewer than a majority")
	assert.Less(t, time.Since(start), 2*time.Second)

	won := competeQuorum(t, full, "held", 4*time.Second, lctx)
	require.False(t, won.IsZero(), "the lock expired on the majority")
	t.Logf("the holder was told %v before another client took the key", won.Sub(lostAt()))
}

// competeQuorum has locker try to obtain key every few milliseconds for up
// to d; it returns when it first got it (zero if never). Once it has the
// key, held (the holder's kept context) must report the loss: its Err
// reads the clock, whenever the lost-lock timer fires.
func competeQuorum(t *testing.T, locker *redislock.Locker, key string, d time.Duration, held context.Context) time.Time {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if lk, err := locker.TryObtain(context.Background(), key, time.Minute); err == nil {
			got := time.Now()
			assert.Error(t, held.Err(), "another client took the key while the holder's kept context was live")
			_ = lk.Release(context.Background())
			return got
		}
	}
	return time.Time{}
}

// The restart rule of NewQuorum, both sides, on 3 masters: a lock is held
// on all 3, then 2 of them restart.
//
//   - Without persistence, rejoining at once: they forgot the lock, and
//     another client takes a majority while the first still holds it (this
//     is what the rule forbids).
//   - With appendfsync always, rejoining at once: they remember the lock,
//     and nobody else can take it.
//   - Without persistence, staying away longer than the lease: the holder
//     cannot renew on a majority and is told the lock is lost; only then
//     does another client take it.
func TestQuorum_RestartRule(t *testing.T) {
	waitsInParallel(t)
	const ttl = 1500 * time.Millisecond
	restart := func(t *testing.T, servers []*redistest.Server, away time.Duration) {
		servers[0].Kill(t)
		servers[1].Kill(t)
		time.Sleep(away)
		servers[0].Restart(t)
		servers[1].Restart(t)
	}
	t.Run("forgets", func(t *testing.T) {
		servers := startMasters(t, 3)
		ctx := ctxT(t, 20*time.Second)
		lk, err := redislock.NewQuorum(quorumClients(t, addrsOf(servers))).Obtain(ctx, "k", 10*time.Second)
		require.NoError(t, err)
		restart(t, servers, 0)
		theirs, err := redislock.NewQuorum(quorumClients(t, addrsOf(servers))).TryObtain(ctx, "k", 10*time.Second)
		require.NoError(t, err, "the restarted masters forgot the lock")
		assert.True(t, lk.Until().After(time.Now()), "two holders at once: the rule is needed")
		_ = theirs.Release(ctx)
	})
	t.Run("appendfsync always", func(t *testing.T) {
		servers := startMasters(t, 3, aofAlways...)
		ctx := ctxT(t, 20*time.Second)
		lk, err := redislock.NewQuorum(quorumClients(t, addrsOf(servers))).Obtain(ctx, "k", 10*time.Second)
		require.NoError(t, err)
		restart(t, servers, 0)
		_, err = redislock.NewQuorum(quorumClients(t, addrsOf(servers))).TryObtain(ctx, "k", 10*time.Second)
		require.ErrorIs(t, err, redislock.ErrNotObtained, "the restarted masters remember the lock")
		require.NoError(t, lk.Release(ctx))
	})
	t.Run("away longer than the lease", func(t *testing.T) {
		servers := startMasters(t, 3)
		ctx := ctxT(t, 20*time.Second)
		lk, err := redislock.NewQuorum(quorumClients(t, addrsOf(servers))).Obtain(ctx, "k", ttl)
		require.NoError(t, err)
		lctx := lk.KeepAlive(ctx)
		lostAt := watchLost(lctx)
		restart(t, servers, ttl+100*time.Millisecond)
		won := competeQuorum(t, redislock.NewQuorum(quorumClients(t, addrsOf(servers))), "k", 2*time.Second, lctx)
		require.False(t, won.IsZero())
		t.Logf("the holder was told %v before another client took the key", won.Sub(lostAt()))
	})
}

// The child processes of TestQuorum_ExclusionUnderKills are told what to do
// through these environment variables.
const (
	qChildEnv = "REDISLOCK_Q_CHILD" // the child's number; set only in children
	qAddrsEnv = "REDISLOCK_Q_ADDRS" // the masters, comma-separated
	qOutEnv   = "REDISLOCK_Q_OUT"   // file to write the critical sections to
	qStopEnv  = "REDISLOCK_Q_STOP"  // stop once this file exists
	qUntilEnv = "REDISLOCK_Q_UNTIL" // stop at this wall-clock time (Unix ns) at the latest
)

// How long TestQuorum_ExclusionUnderKills runs: at least qMinRun of kills
// once the children run, then until they have recorded qEnough critical
// sections (what it takes to prove anything), and qMaxRun at most. The
// faults set the pace (a stale minority of a lock on a restarted master
// holds up the key until its lease ends), and a loaded machine records
// fewer still: CI once recorded 19 in a fixed 4 s that also counted the
// children's start.
const (
	qMinRun = 4 * time.Second
	qMaxRun = 20 * time.Second
	qEnough = 21
)

// Mutual exclusion and fences across 4 processes of 2 goroutines on a
// quorum of 5 masters (appendfsync always), while 2 of the masters at a
// time are killed and restarted, over and over, for at least 4 s once the
// children run, and until they have recorded 21 critical sections (20 s
// at most). Each critical section is recorded as [start, end] (wall-clock
// ns) with its fence, and counted only if the lock's context was still
// live at its end. No two sections overlap, and fences strictly increase
// from one section to the next.
func TestQuorum_ExclusionUnderKills(t *testing.T) {
	if os.Getenv(qChildEnv) != "" {
		quorumChild(t)
		return
	}
	servers := startMasters(t, 5, aofAlways...)
	dir := t.TempDir()
	const procs = 4
	stopFile := filepath.Join(dir, "stop")
	until := time.Now().Add(qMaxRun + 30*time.Second) // the children's own bound, should the test die
	ctx, cancel := context.WithTimeout(context.Background(), qMaxRun+time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	var files []string
	for i := range procs {
		file := filepath.Join(dir, strconv.Itoa(i))
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), qChildEnv+"="+strconv.Itoa(i), qAddrsEnv+"="+strings.Join(addrsOf(servers), ","),
			qOutEnv+"="+file, qStopEnv+"="+stopFile, qUntilEnv+"="+strconv.FormatInt(until.UnixNano(), 10))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		cmds, outs, files = append(cmds, cmd), append(outs, out), append(files, file)
	}
	recorded := func() int {
		n := 0
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				n += int(fi.Size() / 24)
			}
		}
		return n
	}
	started := func() bool {
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				return false
			}
		}
		return true
	}
	require.Eventually(t, started, 30*time.Second, 10*time.Millisecond, "the children did not start")
	start := time.Now()
	kills := 0
	for time.Since(start) < qMinRun || recorded() < qEnough && time.Since(start) < qMaxRun {
		pick := rand.Perm(5)[:2]
		for _, i := range pick {
			servers[i].Kill(t)
		}
		time.Sleep(300 * time.Millisecond)
		for _, i := range pick {
			servers[i].Restart(t)
		}
		kills += 2
		time.Sleep(400 * time.Millisecond)
	}
	require.NoError(t, os.WriteFile(stopFile, nil, 0o644))
	ran := time.Since(start)
	type section struct{ start, end, fence int64 }
	var all []section
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d:\n%s", i, outs[i])
		data, err := os.ReadFile(files[i])
		require.NoError(t, err)
		for j := 0; j+24 <= len(data); j += 24 {
			all = append(all, section{int64(binary.LittleEndian.Uint64(data[j:])), int64(binary.LittleEndian.Uint64(data[j+8:])),
				int64(binary.LittleEndian.Uint64(data[j+16:]))})
		}
	}
	t.Logf("%d critical sections, %d master kills in %v", len(all), kills, ran.Round(time.Millisecond))
	require.GreaterOrEqual(t, len(all), qEnough, "too few critical sections to prove anything")
	slices.SortFunc(all, func(a, b section) int { return cmpInt64(a.start, b.start) })
	for i := 1; i < len(all); i++ {
		assert.GreaterOrEqual(t, all[i].start, all[i-1].end, "critical sections %d and %d overlap", i-1, i)
		assert.Greater(t, all[i].fence, all[i-1].fence, "fences of sections %d and %d do not increase", i-1, i)
	}
}

// quorumChild is one child process of TestQuorum_ExclusionUnderKills.
func quorumChild(t *testing.T) {
	until, err := strconv.ParseInt(os.Getenv(qUntilEnv), 10, 64)
	require.NoError(t, err)
	stopFile := os.Getenv(qStopEnv)
	running := func() bool {
		_, err := os.Stat(stopFile)
		return os.IsNotExist(err) && time.Now().UnixNano() < until
	}
	locker := redislock.NewQuorum(quorumClients(t, strings.Split(os.Getenv(qAddrsEnv), ",")),
		redislock.WithFencing(), redislock.WithBackoff(2*time.Millisecond, 20*time.Millisecond))
	out, err := os.OpenFile(os.Getenv(qOutEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // tells the parent it started
	require.NoError(t, err)
	defer func() { require.NoError(t, out.Close()) }()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for running() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second) // then look at the stop file again
				lk, err := locker.Obtain(ctx, "q:lock", time.Second)
				cancel()
				if err != nil {
					if !errors.Is(err, redislock.ErrNotObtained) && !strings.Contains(err.Error(), "fewer than a majority") {
						fmt.Fprintln(os.Stderr, "unexpected:", err)
					}
					continue
				}
				lctx := lk.KeepAlive(context.Background())
				start := time.Now().UnixNano()
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				end := time.Now().UnixNano()
				if lctx.Err() == nil { // else lost meanwhile: not a section of the lock
					var rec [24]byte
					binary.LittleEndian.PutUint64(rec[:], uint64(start))
					binary.LittleEndian.PutUint64(rec[8:], uint64(end))
					binary.LittleEndian.PutUint64(rec[16:], uint64(lk.Fence()))
					mu.Lock()
					_, err := out.Write(rec[:])
					mu.Unlock()
					require.NoError(t, err)
				}
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = lk.Release(rctx)
				cancel()
			}
		}()
	}
	wg.Wait()
	// Give-backs to a master that was down at the end go on in the
	// background; Shutdown waits for them (each is bounded by releaseBound).
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, locker.Shutdown(sctx))
}

// delayScript makes client wait d before it sends each run of the script
// s (a slow link to that master, one way).
func delayScript(client redis.UniversalClient, s script, d time.Duration) {
	client.(*redis.Client).AddHook(hook{before: func(cmd redis.Cmder) {
		if isScript(cmd, s) {
			time.Sleep(d)
		}
	}})
}

// An attempt that a majority of the masters answered, with too few of them
// free for it, is contention (ErrNotObtained), even when the masters that
// failed answered first: with 2 of 5 masters down and the key held on the
// 3 others, TryObtain and Obtain report ErrNotObtained, not a Redis failure.
func TestQuorum_ContentionWithMinorityDown(t *testing.T) {
	servers := startMasters(t, 5)
	ctx := ctxT(t, 20*time.Second)
	holder := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))
	_, err := holder.Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	servers[0].Kill(t)
	servers[3].Kill(t)
	clients := quorumClients(t, addrsOf(servers))
	for _, i := range []int{1, 2, 4} {
		delayScript(clients[i], acquireScript, 50*time.Millisecond) // the dead answer first
	}
	other := redislock.NewQuorum(clients)

	_, err = other.TryObtain(ctx, "k", time.Second)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	_, err = other.Obtain(ctx, "k", time.Second, redislock.WithWait(time.Second))
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// An Obtain waits on while a majority may still answer: one closed client
// (a permanent error) and one master down of 3 fail the attempts, but the
// master comes back and the lock is obtained. It stops at once, with the
// closed client's error, when more than a minority failed for good (2
// closed clients of 3): a majority can no longer answer.
func TestQuorum_PermanentErrorOfAMinority(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)

	clients := quorumClients(t, addrsOf(servers))
	require.NoError(t, clients[0].Close())
	servers[1].Kill(t)
	got := obtainAsync(ctx, redislock.NewQuorum(clients), "k", time.Second, redislock.WithWait(5*time.Second))
	time.Sleep(300 * time.Millisecond)
	servers[1].Restart(t)
	o := <-got
	require.NoError(t, o.err, "a majority (masters 1 and 2) can answer again")
	require.NoError(t, o.lock.Release(ctx))

	clients = quorumClients(t, addrsOf(servers))
	require.NoError(t, clients[0].Close())
	require.NoError(t, clients[2].Close())
	start := time.Now()
	_, err := redislock.NewQuorum(clients).Obtain(ctx, "k", time.Second, redislock.WithWait(5*time.Second))
	require.ErrorIs(t, err, redis.ErrClosed)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.Less(t, time.Since(start), time.Second, "hopeless: no wait")
}

// Release is decided by a majority of the masters: nil when a majority
// released the lock, ErrNotHeld when so many did not hold it that a
// majority cannot have released it (here 2 of 3 had lost it), and an error
// that is neither when too few answered to tell (2 of 3 down).
func TestQuorum_ReleaseByMajority(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))
	obtain := func(key string) *redislock.Lock {
		lk, err := locker.Obtain(ctx, key, 10*time.Second)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return servers[2].Do(t, "EXISTS", key) == int64(1) }, time.Second, time.Millisecond)
		return lk
	}

	lk := obtain("lost on 2")
	servers[1].Do(t, "DEL", "lost on 2")
	servers[2].Do(t, "DEL", "lost on 2")
	assert.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld, "released on 1 of 3 only")
	assert.Equal(t, int64(0), servers[0].Do(t, "EXISTS", "lost on 2"))

	lk = obtain("lost on 1")
	servers[2].Do(t, "DEL", "lost on 1")
	require.NoError(t, lk.Release(ctx), "released on 2 of 3")

	lk = obtain("down")
	servers[1].Kill(t)
	servers[2].Kill(t)
	err := lk.Release(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotHeld)
	assert.Equal(t, int64(0), servers[0].Do(t, "EXISTS", "down"))
}

// Release returns once a majority released the lock, without waiting for
// a slow master, and the release on that master goes on in the background
// (Shutdown waits for it) after the caller's deadline, also with clients
// that stop at deadlines themselves (ContextTimeoutEnabled).
func TestQuorum_ReleaseSlowMaster(t *testing.T) {
	waitsInParallel(t)
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	clients := quorumClients(t, addrsOf(servers), func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	delayScript(clients[2], releaseScript, 1500*time.Millisecond)
	locker := redislock.NewQuorum(clients)
	lk, err := locker.Obtain(ctx, "k", 30*time.Second)
	require.NoError(t, err)
	// On every master before the release begins: a take that lands after
	// it is given back, and the release could not count that master.
	require.Eventually(t, func() bool {
		for _, s := range servers {
			if s.Do(t, "EXISTS", "k") != int64(1) {
				return false
			}
		}
		return true
	}, time.Second, time.Millisecond)

	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, lk.Release(rctx))
	assert.Less(t, time.Since(start), 500*time.Millisecond, "decided by masters 0 and 1")
	require.NoError(t, locker.Shutdown(ctx))
	assert.Greater(t, time.Since(start), 1500*time.Millisecond, "Shutdown waited for the slow master")
	for _, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "k"))
	}
}

// An acquisition's attempt on a slow master that lands after the lock was
// released is given back there: obtained on masters 0 and 1, released,
// then the attempt reaches master 2 and takes the key, which is released
// at once rather than left for the lease (Shutdown waits for that).
func TestQuorum_StragglerAfterRelease(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	clients := quorumClients(t, addrsOf(servers))
	delayScript(clients[2], acquireScript, 300*time.Millisecond)
	locker := redislock.NewQuorum(clients)
	start := time.Now()
	lk, err := locker.Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	assert.Equal(t, int64(0), servers[2].Do(t, "EXISTS", "k"), "the attempt on master 2 is still on its way")
	require.NoError(t, locker.Shutdown(ctx))
	for _, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "k"))
	}
	assert.Less(t, time.Since(start), 5*time.Second)
}

// A quorum lock's Until allows for clock drift as Redlock does: a lease of
// ttl set by a command sent at S ends, locally, at S + ttl - (ttl/100 +
// 2ms), for the acquisition and for each Refresh; it is never later than
// the expiry on a majority of the masters. A ttl below 10ms is refused (ErrInvalidTTL)
// by Obtain, TryObtain and Refresh before anything is sent.
func TestQuorum_Drift(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	clients := quorumClients(t, addrsOf(servers))
	var sent atomic.Int64
	for _, c := range clients {
		c.(*redis.Client).AddHook(hook{before: func(redis.Cmder) { sent.Add(1) }})
	}
	locker := redislock.NewQuorum(clients)
	drift := func(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

	before := time.Now()
	lk, err := locker.Obtain(ctx, "k", 10*time.Second)
	after := time.Now()
	require.NoError(t, err)
	assert.WithinRange(t, lk.Until(), before.Add(10*time.Second-drift(10*time.Second)), after.Add(10*time.Second-drift(10*time.Second)))
	before = time.Now()
	require.NoError(t, lk.Refresh(ctx, 20*time.Second))
	after = time.Now()
	assert.WithinRange(t, lk.Until(), before.Add(20*time.Second-drift(20*time.Second)), after.Add(20*time.Second-drift(20*time.Second)))
	covered := 0 // masters whose expiry is not before Until: a majority (the third may not have the new lease yet)
	for _, s := range servers {
		asked := time.Now()
		pttl := s.Do(t, "PTTL", "k").(int64)
		if !lk.Until().After(asked.Add(time.Duration(pttl+1) * time.Millisecond)) {
			covered++
		}
	}
	assert.GreaterOrEqual(t, covered, 2, "Until is not later than the expiry on a majority")

	n := sent.Load()
	_, err = locker.Obtain(ctx, "short", 9*time.Millisecond)
	assert.ErrorIs(t, err, redislock.ErrInvalidTTL)
	_, err = locker.TryObtain(ctx, "short", 9*time.Millisecond)
	assert.ErrorIs(t, err, redislock.ErrInvalidTTL)
	assert.ErrorIs(t, lk.Refresh(ctx, 9*time.Millisecond), redislock.ErrInvalidTTL)
	assert.Equal(t, n, sent.Load(), "nothing was sent")
	short, err := locker.Obtain(ctx, "short", 10*time.Millisecond)
	if assert.NotErrorIs(t, err, redislock.ErrInvalidTTL) && err == nil {
		_ = short.Release(ctx)
	}
	require.NoError(t, lk.Release(ctx))
}

// Fences are exact up to 2^53-1, the last integer that Lua's numbers hold
// exactly: a counter at 2^53-2 issues 2^53-1. A counter at 2^53-1 or
// beyond is refused, unchanged: with a majority of them, the fenced
// acquisition fails (not ErrNotObtained) and is released on every master;
// a minority of them leaves the fence to the others.
func TestQuorum_FenceLimit(t *testing.T) {
	const exact = 1<<53 - 1
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)), redislock.WithFencing())
	counter := fenceKey("k")
	setCounters := func(values ...int64) {
		for i, v := range values {
			servers[i].Do(t, "SET", counter, v)
		}
	}

	setCounters(exact-1, exact-1, exact-1)
	lk, err := locker.Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(exact), lk.Fence())
	require.NoError(t, lk.Release(ctx))

	setCounters(exact, exact, 1<<53+2)
	_, err = locker.Obtain(ctx, "k", 10*time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	require.NoError(t, locker.Shutdown(ctx))
	for i, want := range []string{"9007199254740991", "9007199254740991", "9007199254740994"} {
		assert.Equal(t, int64(0), servers[i].Do(t, "EXISTS", "k"), "released on master %d", i)
		assert.Equal(t, want, servers[i].Do(t, "GET", counter), "unchanged on master %d", i)
	}

	setCounters(1<<53+10, 5, 7)
	lk, err = locker.Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(8), lk.Fence())
	assert.Equal(t, "9007199254741002", servers[0].Do(t, "GET", counter))
	require.NoError(t, lk.Release(ctx))
}

// A majority that increments its fence counters to exactly 2^53-1 issues
// that fence: a master already at the limit refuses its own increment, but
// does not refuse the raise to a value its counter already has (fences are
// exact up to 2^53-1, and stay monotonic: every later fence is refused).
func TestQuorum_FenceAtTheLimitIsIssued(t *testing.T) {
	const exact = 1<<53 - 1
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)), redislock.WithFencing())
	counter := fenceKey("k")
	for i, v := range []int64{exact, exact - 1, 3} {
		servers[i].Do(t, "SET", counter, v)
	}
	lk, err := locker.Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err, "masters 1 and 2 (a majority) incremented their counters")
	assert.Equal(t, int64(exact), lk.Fence())
	require.NoError(t, lk.Release(ctx))
	_, err = locker.Obtain(ctx, "k", 10*time.Second)
	assert.ErrorContains(t, err, "fence", "a majority is at the limit: no later fence")
}

// A kept quorum lease whose renewals fail at once (2 of 3 masters down:
// connection refused) is renewed again renewRetry (50 ms) later, not in a
// hot loop, until it is reported lost.
func TestQuorum_FailedRenewalWaitsBeforeItsRetry(t *testing.T) {
	waitsInParallel(t)
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	var renewals atomic.Int64
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)), redislock.WithHooks(redislock.Hooks{
		Renew: func(context.Context, redislock.RenewEvent) { renewals.Add(1) },
	}))
	lk, err := locker.Obtain(ctx, "k", 3*time.Second)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	time.Sleep(100 * time.Millisecond)
	servers[1].Kill(t)
	servers[2].Kill(t)
	renewals.Store(0)
	time.Sleep(time.Second)
	n := renewals.Load()
	assert.Positive(t, n, "renewals are tried")
	assert.LessOrEqual(t, n, int64(time.Second/(50*time.Millisecond))+5, "a failed renewal is tried again 50 ms later")
	select {
	case <-lctx.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a lease no majority renews is reported lost within the lease")
	}
	_ = lk.Release(ctx) // only master 0 answers: an error
	require.NoError(t, locker.Shutdown(ctx))
}

// An attempt held back in the network to one master (lagConns: its bytes
// arrive 1 s late, after the lock was taken on the other two, held and
// released) takes nothing when it lands: Release spends the token on every
// master, also where it found nothing to release. Nothing is left, and the
// key is free with one more master down.
func TestQuorum_LateCopyAfterReleaseTakesNothing(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	lc := &lagConns{delay: time.Second, ran: make(chan time.Time, 1)}
	t.Cleanup(lc.wg.Wait)
	clients := quorumClients(t, addrsOf(servers), func(o *redis.Options) { o.ReadTimeout = 100 * time.Millisecond })
	lagged := redis.NewClient(&redis.Options{Addr: servers[2].Addr(), Dialer: lc.dial, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = lagged.Close() })
	clients[2] = lagged
	locker := redislock.NewQuorum(clients)
	warm, err := locker.Obtain(ctx, "warm-up", time.Minute) // the scripts run by EVALSHA from now on
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))

	lc.lagNext(sentScript(acquireScript, "k"))
	lk, err := locker.Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err, "masters 0 and 1 take the key")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, lk.Release(ctx))
	select {
	case <-lc.ran:
	case <-time.After(3 * time.Second):
		t.Fatal("the held-back attempt never reached master 2")
	}
	time.Sleep(100 * time.Millisecond) // let Redis run it
	require.NoError(t, locker.Shutdown(ctx))
	for i, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "k"), "master %d holds the released lock", i)
	}
	servers[0].Kill(t)
	_, err = redislock.NewQuorum(quorumClients(t, addrsOf(servers))).TryObtain(ctx, "k", time.Second)
	assert.NoError(t, err, "a released key, with master 0 down")
}

// A TryObtain that fails because 2 of 3 masters are frozen leaves no lock
// behind when they thaw 1.5 s later and run its attempt: the give-back is
// tried again until the master answers, and spends the token first.
func TestQuorum_FailedAttemptTakesNothingAtThaw(t *testing.T) {
	waitsInParallel(t)
	servers := startMasters(t, 3)
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))
	warm, err := locker.Obtain(ctx, "warm-up", time.Minute) // loads the scripts, pools a connection to each master
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))

	servers[1].Freeze(t)
	servers[2].Freeze(t)
	tctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = locker.TryObtain(tctx, "k", 10*time.Second)
	cancel()
	require.Error(t, err)
	require.NotErrorIs(t, err, redislock.ErrNotObtained, "frozen masters are not contention")
	time.Sleep(1500 * time.Millisecond)
	servers[1].Thaw(t)
	servers[2].Thaw(t)
	require.NoError(t, locker.Shutdown(ctx))
	time.Sleep(100 * time.Millisecond)
	for i, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "k"), "master %d holds the failed TryObtain's key", i)
	}
	_, err = redislock.NewQuorum(quorumClients(t, addrsOf(servers))).TryObtain(ctx, "k", time.Second)
	assert.NoError(t, err, "nobody holds the key")
}

// Inspect answers at the fastest majority, as Obtain, TTL, Refresh and
// Release do: with one master of three frozen, or killed, it returns in
// about a round trip, with the holder a majority reports.
func TestQuorum_InspectAtTheFastestMajority(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))
	lk := obtainOnAll(t, ctx, locker, servers, "k", 10*time.Second)
	servers[2].Freeze(t)
	start := time.Now()
	info, err := locker.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 250*time.Millisecond, "Inspect waited for the frozen master")
	require.Len(t, info.Holders, 1)
	assert.Equal(t, lk.Token(), info.Holders[0].Token)
	servers[2].Thaw(t)
	servers[1].Kill(t)
	start = time.Now()
	_, err = locker.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 250*time.Millisecond, "Inspect waited for the dead master")
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))
}

// When the fastest majority disagree on a holder (here: the lock is on
// masters 0 and 2, and 2 is frozen), Inspect does not guess from them: it
// waits for the master that decides, and returns the holder once it
// answers; if ctx ends first it returns ctx's error, not "free".
func TestQuorum_InspectWaitsWhenTheFastestMajorityDisagree(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers), longReads))
	lk := obtainOnAll(t, ctx, locker, servers, "k", 10*time.Second)
	servers[1].Do(t, "DEL", "k") // as if master 1's copy had not arrived yet
	servers[2].Freeze(t)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	info, err := locker.Inspect(short, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded, "Inspect reported %+v", info)

	thawed := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		thawed <- time.Now()
		servers[2].Thaw(t)
	}()
	info, err = locker.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.False(t, time.Now().Before(<-thawed), "Inspect returned before the deciding master answered")
	require.Len(t, info.Holders, 1, "masters 0 and 2 hold the lock")
	assert.Equal(t, lk.Token(), info.Holders[0].Token)
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))
}

// Answers that Inspect waited for are not of one moment, and it does not
// add them up as if they were. A TryObtain fails (master 0 took the key,
// master 2 holds another's string, master 1 is frozen) and gives the key
// back on master 0; its attempt runs on master 1 at the thaw. An Inspect
// sent while master 1 was frozen read the token on master 0 (before the
// give-back) and then on master 1 (after the late attempt): never on two
// masters at once. It reads master 0 again and reports no holder.
func TestQuorum_InspectReportsNoHolderOfTwoMoments(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 30*time.Second)
	clients := quorumClients(t, addrsOf(servers), func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second })
	locker := redislock.NewQuorum(clients)
	warm, err := locker.Obtain(ctx, "warm", time.Minute) // loads the scripts
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	_, err = locker.Inspect(ctx, "warm")
	require.NoError(t, err)
	var wg sync.WaitGroup // open connections, so that master 1 runs the commands below in the order sent
	for _, c := range clients {
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); c.BLPop(ctx, 50*time.Millisecond, "nothing") }()
		}
	}
	wg.Wait()
	servers[2].Do(t, "SET", "k", "foreign")
	servers[1].Freeze(t)

	done := make(chan redislock.Info, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // after the attempt, before its give-back
		info, err := locker.Inspect(ctx, "k")
		assert.NoError(t, err)
		done <- info
	}()
	octx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	lk, err := locker.TryObtain(octx, "k", 10*time.Second)
	require.Error(t, err, "%v", lk)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(0), servers[0].Do(t, "EXISTS", "k"), "given back on master 0")
	servers[1].Thaw(t)
	info := <-done
	assert.Empty(t, info.Holders, "reported the failed TryObtain's token as the holder")
	require.NoError(t, locker.Shutdown(ctx))
}

// When Inspect waited, the leases it reports are read after the wait, not
// before: master 0 had 5 s left when Inspect began, master 2 (frozen 2 s)
// 20 s; the lease reported is what master 0 has left at the end (~3 s).
func TestQuorum_InspectLeaseAfterAWait(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers), longReads))
	lk := obtainOnAll(t, ctx, locker, servers, "k", 20*time.Second)
	servers[1].Do(t, "DEL", "k")
	servers[0].Do(t, "PEXPIRE", "k", 5000)
	servers[2].Freeze(t)
	go func() { time.Sleep(2 * time.Second); servers[2].Thaw(t) }()
	info, err := locker.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, lk.Token(), info.Holders[0].Token)
	left := time.Duration(servers[0].Do(t, "PTTL", "k").(int64)) * time.Millisecond
	assert.LessOrEqual(t, info.Holders[0].TTL, left+50*time.Millisecond, "reported a longer lease than a majority has")
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))
}

// Data the library did not write, on a majority of the masters, is
// reported as on one Redis: a string as ModeForeign (its value the token, a
// negative lease: no expiry), a list as ModeOther.
func TestQuorum_InspectOthersData(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 10*time.Second)
	for _, srv := range servers[:2] {
		srv.Do(t, "SET", "string", "someone-else")
		srv.Do(t, "RPUSH", "list", "a")
	}
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers)))
	info, err := locker.Inspect(ctx, "string")
	require.NoError(t, err)
	assert.Equal(t, redislock.ModeForeign, info.Mode)
	require.Len(t, info.Holders, 1)
	assert.Equal(t, "someone-else", info.Holders[0].Token)
	assert.Negative(t, info.Holders[0].TTL)
	info, err = locker.Inspect(ctx, "list")
	require.NoError(t, err)
	assert.Equal(t, redislock.ModeOther, info.Mode)
	assert.Empty(t, info.Holders)
	require.NoError(t, locker.Shutdown(ctx))
}

// Shutdown of a quorum Locker whose clean-up waits for a frozen master
// returns when its ctx ends, with ctx's error; the clean-up goes on, and a
// later Shutdown sees it through once the master answers.
func TestQuorum_ShutdownBoundedByCtx(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.NewQuorum(quorumClients(t, addrsOf(servers), longReads))
	lk := obtainOnAll(t, ctx, locker, servers, "k", 10*time.Second)
	servers[2].Freeze(t)
	require.NoError(t, lk.Release(ctx)) // a majority released it; the frozen master's release goes on
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := locker.Shutdown(sctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second, "Shutdown outlived its ctx")
	servers[2].Thaw(t)
	require.NoError(t, locker.Shutdown(ctx))
}

// Specifies Until for a quorum lock (NewQuorum): while time.Now() is
// before Until, a majority of the masters hold the key for the lock's
// token, as read right before; with KeepAlive renewing, Refresh racing it
// with other ttls, and one master frozen (SIGSTOP) then thawed in the
// middle; and no two quorum Lockers hold the key at once.
func TestQuorum_UntilWithinMajority(t *testing.T) {
	waitsInParallel(t)
	servers := startMasters(t, 3)
	ctx := ctxT(t, 60*time.Second)
	readers := quorumClients(t, addrsOf(servers))
	h := &chaosHolders{byKey: map[string][]*chaosHeld{}, t: t}
	var lockers []*redislock.Locker
	for range 2 {
		lockers = append(lockers, redislock.NewQuorum(quorumClients(t, addrsOf(servers))))
	}
	end := time.Now().Add(6 * time.Second)
	go func() {
		time.Sleep(2 * time.Second)
		servers[1].Freeze(t)
		time.Sleep(1500 * time.Millisecond)
		servers[1].Thaw(t)
	}()
	var checks, bad int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				octx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				lk, err := l.Obtain(octx, "q", time.Duration(200+rand.N(300))*time.Millisecond)
				cancel()
				if err != nil {
					continue
				}
				h.acquire(lk, false, "quorum"+string(rune('0'+i)))
				kept := lk.KeepAlive(ctx)
				for s := 0; s < 6 && kept.Err() == nil; s++ {
					if rand.N(2) == 0 {
						_ = lk.Refresh(ctx, time.Duration(150+rand.N(400))*time.Millisecond)
					}
					n := 0
					for _, r := range readers {
						rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
						if v, err := r.Get(rctx, "q").Result(); err == nil && v == lk.Token() {
							n++
						}
						rcancel()
					}
					if now := time.Now(); now.Before(lk.Until()) {
						mu.Lock()
						checks++
						if n < 2 {
							bad++
							t.Errorf("%d of 3 masters hold the key %v before Until", n, lk.Until().Sub(now))
						}
						mu.Unlock()
					}
					time.Sleep(time.Duration(rand.N(80)) * time.Millisecond)
				}
				h.release(lk)
				_ = lk.Release(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d checks before Until, %d bad", checks, bad)
	assert.Zero(t, h.violations.Load())
	for _, l := range lockers {
		require.NoError(t, l.Shutdown(ctxT(t, 20*time.Second)))
	}
	for _, r := range readers {
		assert.Zero(t, r.(*redis.Client).Exists(ctx, "q").Val(), "key left on a master")
	}
}
