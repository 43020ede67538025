package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// A 600ms lease outlives a 2.5s job, and a competitor never gets in.
func TestWithLockRenews(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	other, _ := b.client(t)
	locker := redislock.New(rdb, redislock.WithTTL(600*time.Millisecond))
	competitor := redislock.New(other)

	var wins, tries atomic.Int64
	var returned atomic.Bool // fn returned: a win after this is no violation
	done := make(chan struct{})
	err := locker.WithLock(ctx, "job", func(ctx context.Context) error {
		defer returned.Store(true)
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				tries.Add(1)
				if lk, err := competitor.TryObtain(context.Background(), "job", time.Second); err == nil {
					if !returned.Load() {
						wins.Add(1)
					}
					_ = lk.Release(context.Background())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		select {
		case <-time.After(2500 * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		pttl := other.PTTL(ctx, "job").Val()
		assert.LessOrEqual(t, pttl, 600*time.Millisecond, "renewed to the lease, not more")
		return nil
	})
	<-done
	require.NoError(t, err)
	assert.Zero(t, wins.Load(), "the competitor got the lock while it was held")
	assert.Greater(t, tries.Load(), int64(30))
	assert.Equal(t, int64(0), other.Exists(ctx, "job").Val(), "released after fn")
}

// Another owner takes the key: fn's ctx is cancelled with ErrLockLost within
// the lease, and the new owner's key is left alone.
func TestWithLockLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		other, _ := b.client(t)
		const ttl = 600 * time.Millisecond
		locker := redislock.New(rdb, redislock.WithTTL(ttl))

		var stolenAt, noticedAt time.Time
		err := locker.WithLock(ctx, "job", func(ctx context.Context) error {
			time.Sleep(100 * time.Millisecond)
			stolenAt = time.Now()
			require.NoError(t, other.Set(ctx, "job", "intruder", time.Minute).Err())
			<-ctx.Done()
			noticedAt = time.Now()
			assert.Equal(t, redislock.ErrLockLost, context.Cause(ctx))
			return ctx.Err()
		})
		require.ErrorIs(t, err, redislock.ErrLockLost)
		assert.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
		assert.Less(t, noticedAt.Sub(stolenAt), ttl, "noticed within the lease")
		assert.Equal(t, "intruder", other.Get(ctx, "job").Val(), "the new owner's key is untouched")
		assert.Greater(t, other.PTTL(ctx, "job").Val(), 50*time.Second)
	})
}

// Redis frozen: no renewal returns, and the lease ctx ends before the lease
// can have run out in Redis. Polled, its Err reads the clock: it is never
// nil at a moment past the last renewed Until (checked every millisecond,
// so the check does not depend on when the lost-lock timer fires).
func TestKeepAliveRedisFrozen(t *testing.T) {
	b := realBackend(t)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	const ttl = 600 * time.Millisecond

	lock, err := locker.Obtain(ctxT(t, 5*time.Second), "job", ttl)
	require.NoError(t, err)
	lctx := lock.KeepAlive(context.Background())
	time.Sleep(700 * time.Millisecond) // renewals are working
	require.NoError(t, lctx.Err())

	b.srv.Freeze(t)
	frozenAt := time.Now()
	for {
		now := time.Now()
		if lctx.Err() != nil {
			break
		}
		require.True(t, now.Before(lock.Until()), "lease ctx live at %v, past the last renewed lease's end %v", now, lock.Until())
		require.Less(t, now.Sub(frozenAt), 5*time.Second, "lease context not cancelled while Redis is frozen")
		time.Sleep(time.Millisecond)
	}
	cancelledAt := time.Now()
	b.srv.Thaw(t)

	assert.Equal(t, redislock.ErrLockLost, context.Cause(lctx))
	select {
	case <-lctx.Done():
	default:
		t.Error("Err reports the loss but Done is not closed")
	}
	assert.Less(t, cancelledAt.Sub(frozenAt), ttl+timerSlack, "within the lease")
	assert.Greater(t, cancelledAt.Sub(frozenAt), ttl/3, "not before the lease nears its end")

	rctx := ctxT(t, 10*time.Second)
	_ = lock.Release(rctx) // held or expired: either way the key is gone after
	assert.Eventually(t, func() bool { return rdb.Exists(rctx, "job").Val() == 0 }, 5*time.Second, 50*time.Millisecond)
}

func TestWithLockPanic(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		assert.PanicsWithValue(t, "boom", func() {
			_ = locker.WithLock(ctx, "job", func(context.Context) error { panic("boom") })
		})
		assert.Equal(t, int64(0), rdb.Exists(ctx, "job").Val(), "released despite the panic")
	})
}

func TestWithLockCallerCancels(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(100*time.Millisecond, cancel)
		err := locker.WithLock(ctx, "job", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, redislock.ErrLockLost)
		assert.Equal(t, int64(0), rdb.Exists(context.Background(), "job").Val(), "released after cancel")
	})
}

func TestWithLockReturnsFnError(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, n := b.client(t)
		locker := redislock.New(rdb)
		errFn := errors.New("fn failed")
		called := false
		err := locker.WithLock(ctx, "job", func(ctx context.Context) error {
			called = true
			assert.Equal(t, int64(1), rdb.Exists(ctx, "job").Val(), "held during fn")
			return errFn
		})
		assert.True(t, called)
		assert.Equal(t, errFn, err)

		// Held elsewhere: fn is not called.
		_, err = locker.Obtain(ctx, "busy", time.Minute)
		require.NoError(t, err)
		err = locker.WithLock(ctx, "busy", func(context.Context) error { t.Error("fn called"); return nil }, redislock.WithWait(0))
		assert.ErrorIs(t, err, redislock.ErrNotObtained)

		before := n.Load()
		assert.ErrorIs(t, locker.WithLock(ctx, "job", nil), redislock.ErrNilFunc)
		assert.ErrorIs(t, locker.WithLock(ctx, "", func(context.Context) error { return nil }), redislock.ErrInvalidKey)
		assert.ErrorIs(t, locker.WithLock(ctx, "job", func(context.Context) error { return nil }, redislock.WithTTL(time.Microsecond)), redislock.ErrInvalidTTL)
		assert.Equal(t, before, n.Load(), "invalid input sends nothing")
	})
}

// Release ends KeepAlive's context with a plain cancel, not ErrLockLost.
func TestKeepAliveStopsOnRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		lock, err := locker.Obtain(ctx, "job", time.Second)
		require.NoError(t, err)
		lctx := lock.KeepAlive(ctx)
		require.NoError(t, lock.Release(ctx))
		<-lctx.Done()
		assert.Equal(t, context.Canceled, context.Cause(lctx))

		// A released lock cannot be kept.
		lctx = lock.KeepAlive(ctx)
		<-lctx.Done()
		assert.ErrorIs(t, context.Cause(lctx), redislock.ErrNotHeld)
	})
}

// Renewals survive SCRIPT FLUSH.
func TestKeepAliveScriptFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		lock, err := locker.Obtain(ctx, "job", 300*time.Millisecond)
		require.NoError(t, err)
		lctx := lock.KeepAlive(ctx)
		for i := 0; i < 5; i++ {
			require.NoError(t, rdb.ScriptFlush(ctx).Err())
			b.elapse(150 * time.Millisecond)
		}
		require.NoError(t, lctx.Err(), "lease kept through SCRIPT FLUSH")
		require.NoError(t, lock.Release(ctx))
	})
}

// BenchmarkKeepAlive10k holds 10,000 locks with auto-renewal for a few lease
// periods and reports what renewing them costs per tick of the keeper: round
// trips, commands, and CPU time of this process. Run with -benchtime=1x.
func BenchmarkKeepAlive10k(b *testing.B) {
	const locks, ttl, hold = 10000, 3 * time.Second, 9 * time.Second
	be := realBackend(b)
	rdb, _ := be.client(b, func(o *redis.Options) { o.PoolSize = 4 })
	rt := &roundTrips{}
	rdb.AddHook(rt)
	locker := redislock.New(rdb)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		kctx, cancel := context.WithCancel(ctx)
		held := make([]*redislock.Lock, locks)
		for j := range held {
			lk, err := locker.TryObtain(ctx, "k"+strconv.Itoa(j), ttl)
			if err != nil {
				b.Fatal(err)
			}
			lk.KeepAlive(kctx)
			held[j] = lk
		}
		rt.reset()
		cpu0 := cpuTime()
		time.Sleep(hold)
		cpu := cpuTime() - cpu0
		trips, cmds := rt.load()
		for _, lk := range held {
			if lk.Until().Before(time.Now()) {
				b.Fatal("a lease ran out")
			}
		}
		cancel()
		if trips == 0 {
			b.Fatal("no renewals")
		}
		b.ReportMetric(float64(trips)/hold.Seconds(), "roundtrips/s")
		b.ReportMetric(float64(cmds)/float64(trips), "cmds/roundtrip")
		b.ReportMetric(float64(cpu.Microseconds())/float64(trips)/1000, "cpu-ms/roundtrip")
		b.ReportMetric(float64(cpu.Microseconds())/hold.Seconds()/1e6*100, "cpu-%")
	}
}

// BenchmarkKeepAlive_Spikes counts the false alarms of kept leases under
// latency spikes: 2,000 locks with 300 ms leases kept by one Locker (a pool
// of 20 connections), whose replies come a spike late for a spike of each
// second, for 3 s. Nobody else takes the keys and Redis runs every renewal
// as it comes (only the replies are late), so every holder told its lock
// is lost is a false alarm: Redis held its key, renewed, when it was told.
// 2/3 ttl - ttl/100 - min(50 ms, ttl/4) = 147 ms is the longest stall a
// 300 ms lease rides out (see KeepAlive).
//
//	cd tests && go test -run '^$' -bench BenchmarkKeepAlive_Spikes -benchtime=1x .
func BenchmarkKeepAlive_Spikes(b *testing.B) {
	for _, spike := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond} {
		b.Run(spike.String(), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(float64(keptUnderSpikes(b, spike))/2000, "false-alarms/lock")
			}
		})
	}
}

// keptUnderSpikes runs BenchmarkKeepAlive_Spikes's scene once and returns
// how many holders were told their lock is lost.
func keptUnderSpikes(b *testing.B, spike time.Duration) (told int) {
	const n, ttl, run = 2000, 300 * time.Millisecond, 3 * time.Second
	be := realBackend(b)
	ctx := ctxT(b, time.Minute)
	sc := &spikyConns{lag: spike}
	rdb, _ := be.client(b, func(o *redis.Options) { o.Dialer, o.PoolSize = sc.dial, 20 })
	locker := redislock.New(rdb)
	kept := make([]context.Context, n)
	for i := range n {
		lk, err := locker.TryObtain(ctx, "k"+strconv.Itoa(i), ttl)
		if err != nil {
			b.Fatal(err)
		}
		kept[i] = lk.KeepAlive(ctx)
	}
	for start := time.Now(); time.Since(start) < run; time.Sleep(5 * time.Millisecond) {
		sc.on.Store(time.Since(start)%time.Second < spike)
	}
	for _, c := range kept {
		if errors.Is(context.Cause(c), redislock.ErrLockLost) {
			told++
		}
	}
	return told
}

// roundTrips counts pipelined round trips and the commands in them.
type roundTrips struct{ trips, cmds atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
func (r *roundTrips) reset()               { r.trips.Store(0); r.cmds.Store(0) }
func (r *roundTrips) load() (int64, int64) { return r.trips.Load(), r.cmds.Load() }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// watchLost records when lctx is cancelled.
func watchLost(lctx context.Context) func() time.Time {
	var at atomic.Pointer[time.Time]
	context.AfterFunc(lctx, func() { now := time.Now(); at.Store(&now) })
	return func() time.Time {
		if p := at.Load(); p != nil {
			return *p
		}
		return time.Time{}
	}
}

// competeUntil has another client try to obtain key every few milliseconds
// until d has passed; it returns when it first got it (zero if never).
// held, if not nil, is the holder's kept context: once another client has
// the key, its Err (which reads the clock, whenever the lost-lock timer
// fires) must report the loss.
func competeUntil(t *testing.T, rdb *redis.Client, key string, d time.Duration, held context.Context) time.Time {
	t.Helper()
	other := redislock.New(rdb)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if lk, err := other.TryObtain(context.Background(), key, time.Minute); err == nil {
			got := time.Now()
			if held != nil {
				assert.Error(t, held.Err(), "another client obtained the key while the kept context was live")
			}
			_ = lk.Release(context.Background())
			return got
		}
		time.Sleep(3 * time.Millisecond)
	}
	return time.Time{}
}

// A Refresh to a shorter lease (900 ms to 100 ms) races a renewal that
// Redis runs first but whose reply is held back until after the Refresh
// returned: the kept context is never live while another client can obtain
// the key. (Before the lease clock, the late reply made the lock look held
// for the old ttl, and renewals kept the old schedule.)
func TestKeepAlive_RefreshRacingRenewal(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var first atomic.Bool
	renewed, refreshed := make(chan struct{}), make(chan struct{})
	rdb.AddHook(hook{after: func(cmd redis.Cmder, err error) {
		if err == nil && isScript(cmd, renewScript) && first.CompareAndSwap(false, true) {
			close(renewed) // the renewal has run; its reply waits
			<-refreshed
		}
	}})
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 900*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	lostAt := watchLost(lctx)
	<-renewed
	// Refresh runs on another connection, after the renewal in Redis; the
	// renewal's reply comes in just after the Refresh returned.
	err = lk.Refresh(ctx, 100*time.Millisecond)
	close(refreshed)
	require.NoError(t, err)

	other, _ := b.client(t)
	got := competeUntil(t, other, "k", 2*time.Second, lctx)
	if !got.IsZero() {
		t.Logf("lost %v before another client obtained the key", got.Sub(lostAt()))
		assert.ErrorIs(t, context.Cause(lctx), redislock.ErrLockLost)
	} else {
		assert.NoError(t, lctx.Err(), "the lease was kept")
	}
	_ = lk.Release(ctx)
}

// A Refresh to a longer lease (300 ms to 5 s) on a kept lock is not undone
// by a renewal: the Refresh's reply is held back until a renewal sent after
// the Refresh ran has run too, and still the lease left when Refresh
// returns is the Refresh's (renewals set the length of the latest Refresh
// sent, from the moment it is sent; before, a renewal sent in that window
// set the old 300 ms again, a later generation than the Refresh's).
func TestKeepAlive_RenewalAfterALongerRefreshKeepsItsLength(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var refreshRan atomic.Bool
	renewedSince := make(chan struct{}, 1)
	isRefresh := func(cmd redis.Cmder) bool {
		return isScript(cmd, renewScript) && slices.ContainsFunc(cmd.Args(), func(a any) bool { return fmt.Sprint(a) == "5000" })
	}
	rdb.AddHook(hook{after: func(cmd redis.Cmder, err error) {
		switch {
		case err == nil && isRefresh(cmd) && refreshRan.CompareAndSwap(false, true):
			select { // the Refresh has run; its reply waits for a renewal
			case <-renewedSince:
			case <-time.After(2 * time.Second):
			}
		case isScript(cmd, renewScript) && refreshRan.Load():
			select {
			case renewedSince <- struct{}{}:
			default:
			}
		}
	}})
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 300*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))
	assert.Greater(t, rdb.PTTL(ctx, "k").Val(), 4*time.Second, "the lease left after Refresh(5s)")
	require.NoError(t, lctx.Err())
	require.NoError(t, lk.Release(ctx))
}

// KeepAlive follows a shorter Refresh: renewals are rescheduled from the new
// ttl, so a lease shortened from 3 s to 300 ms is kept through 1.5 s with no
// fault at all.
func TestKeepAlive_FollowsShorterRefresh(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 3*time.Second)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	require.NoError(t, lk.Refresh(ctx, 300*time.Millisecond))
	other, _ := b.client(t)
	assert.True(t, competeUntil(t, other, "k", 1500*time.Millisecond, nil).IsZero(), "another client got the key")
	require.NoError(t, lctx.Err(), "lost: %v", context.Cause(lctx))
	assert.LessOrEqual(t, rdb.PTTL(ctx, "k").Val(), 300*time.Millisecond, "renewed to the Refresh's ttl")
	require.NoError(t, lk.Release(ctx))
}

// One silently dead connection (what is written to it is dropped, and reads
// wait for go-redis's read timeout, 5 s) costs no lease: a renewal that is not
// answered is sent again on another connection, long before the lease ends.
func TestKeepAlive_DeadConnectionCostsNoLease(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	dc := &deadConns{}
	rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer = dc.dial })
	locker := redislock.New(rdb)
	const ttl = 1500 * time.Millisecond
	var kept []context.Context
	for _, key := range []string{"a", "b"} {
		lk, err := locker.Obtain(ctx, key, ttl)
		require.NoError(t, err)
		kept = append(kept, lk.KeepAlive(ctx))
		defer func() { _ = lk.Release(ctx) }()
	}
	dc.killNext(func(b []byte) bool { return sentScript(renewScript, "")(b) })
	time.Sleep(2 * ttl)
	require.Equal(t, int64(1), dc.dead.Load(), "a renewal's connection died")
	for i, lctx := range kept {
		assert.NoError(t, lctx.Err(), "lease %d lost: %v", i, context.Cause(lctx))
	}
}

// On a real 3-master Cluster, killing the master that serves one lock costs
// no lease of the locks the two other masters serve: each master's leases
// are renewed on their own (in a pipeline per master, or per slot while
// the client's slot map is being reloaded), so no renewal on a healthy
// master waits on the dead one.
//
// How long the healthy masters serve depends on Redis, not on us. With
// cluster-require-full-coverage no they serve all along: every renewal
// there must succeed, and one that failed shared a pipeline or a wait with
// the dead master's (with one pipeline for all nodes, the healthy leases'
// renewals ran out of time behind the dead master's dial retries). With
// Redis's default, yes, every master refuses commands (CLUSTERDOWN) from
// when the dead master is flagged as failed until its replica has taken
// over: 0.62-1.06 s in 12 runs with two processes spinning on the 2 cores
// (0.87 s on an idle machine). A lease lives through that window only if
// what it has left when the window opens, at worst ttl − ttl/3 − margin, is
// longer; a 1.5 s lease has 0.94 s at worst and was lost on the healthy
// masters about 1 run in 10 under load, every renewal refused with
// CLUSTERDOWN until the window closed. A 4 s lease has 2.58 s at worst: it
// must live through the window, and be renewed once the replica took over.
func TestKeepAlive_KilledShardCostsNoLeaseElsewhere(t *testing.T) {
	waitsInParallel(t)
	t.Run("full coverage no", func(t *testing.T) {
		const ttl = 1500 * time.Millisecond
		k := killShard(t, ttl, "--cluster-require-full-coverage", "no")
		time.Sleep(2 * ttl)
		for key, lctx := range k.kept {
			if key == k.victim {
				t.Logf("lease on the killed master: %v", context.Cause(lctx))
				continue
			}
			assert.NoError(t, lctx.Err(), "lease of %q on a healthy master lost: %v", key, context.Cause(lctx))
			for _, r := range k.renewals(key) {
				assert.Equal(t, redislock.OutcomeRenewed, r.Outcome,
					"a renewal of %q on a healthy master, sent %v after the kill: %v", key, r.sent.Sub(k.killed), r.Err)
			}
		}
		failed := 0
		for _, r := range k.renewals(k.victim) {
			if r.Outcome == redislock.OutcomeError {
				failed++
			}
		}
		require.Positive(t, failed, "no renewal on the killed master failed: the test proves nothing")
	})
	t.Run("full coverage yes", func(t *testing.T) {
		const ttl = 4 * time.Second
		k := killShard(t, ttl)
		k.cluster.WaitFailover(t, k.dead)
		failedOver := time.Now()
		t.Logf("failed over %v after the kill", failedOver.Sub(k.killed))
		for key, lctx := range k.kept {
			if key == k.victim {
				continue
			}
			renewedSince := func() bool {
				for _, r := range k.renewals(key) {
					if r.Outcome == redislock.OutcomeRenewed && r.sent.After(failedOver) {
						return true
					}
				}
				return false
			}
			for deadline := time.Now().Add(ttl); !renewedSince() && lctx.Err() == nil && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			refused := 0
			for _, r := range k.renewals(key) {
				if r.Outcome == redislock.OutcomeError {
					refused++
				}
			}
			t.Logf("%q: renewals failed during the failover: %d", key, refused)
			assert.NoError(t, lctx.Err(), "lease of %q on a healthy master lost: %v", key, context.Cause(lctx))
			assert.True(t, renewedSince(), "lease of %q not renewed after the failover", key)
		}
	})
}

// A shardKill is a 3-master Cluster with a lease kept on each master, and
// the master of one of them killed.
type shardKill struct {
	cluster *redistest.Cluster
	dead    *redistest.Server          // the killed master
	victim  string                     // the key it served
	killed  time.Time                  // when it was killed
	kept    map[string]context.Context // key -> its KeepAlive context

	mu   sync.Mutex
	logs map[string][]sentRenewal // key -> its renewals since the kill
}

// A sentRenewal is a renewal, with when it was sent.
type sentRenewal struct {
	redislock.RenewEvent
	sent time.Time
}

// killShard starts a Cluster with args for each node, keeps a lease of ttl
// on each master, and kills the master of one of them.
func killShard(t *testing.T, ttl time.Duration, args ...string) *shardKill {
	t.Helper()
	k := &shardKill{logs: map[string][]sentRenewal{}, kept: map[string]context.Context{}}
	k.cluster = redistest.StartCluster(t, func(c *redistest.ClusterConfig) { c.ServerArgs = args })
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.New(k.cluster.Client(t), redislock.WithHooks(redislock.Hooks{
		Renew: func(_ context.Context, e redislock.RenewEvent) {
			k.mu.Lock()
			defer k.mu.Unlock()
			if sent := time.Now().Add(-e.Latency); !k.killed.IsZero() && sent.After(k.killed) {
				k.logs[e.Key] = append(k.logs[e.Key], sentRenewal{e, sent})
			}
		},
	}))
	masters := map[string]string{} // master address -> key
	for i := 0; len(masters) < 3; i++ {
		key := "lock:" + strconv.Itoa(i)
		if m := k.cluster.MasterFor(t, key).Addr(); masters[m] == "" {
			masters[m] = key
		}
	}
	for _, key := range masters {
		lk, err := locker.Obtain(ctx, key, ttl)
		require.NoError(t, err)
		k.kept[key] = lk.KeepAlive(ctx)
	}
	k.victim = masters[k.cluster.MasterFor(t, "lock:0").Addr()]
	k.mu.Lock()
	k.killed = time.Now()
	k.mu.Unlock()
	k.dead = k.cluster.KillMaster(t, k.victim)
	return k
}

// renewals returns the renewals of key sent since the kill.
func (k *shardKill) renewals(key string) []sentRenewal {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]sentRenewal(nil), k.logs[key]...)
}

// Kept leases under CPU load: 1,000 leases of 300 ms whose renewals are
// held back until after the leases ran out in Redis (so every key expires),
// while 4 goroutines spin on the 2 cores (Go timers then fire tens of
// milliseconds late); a checker reads every key every 10 ms. No key is ever
// gone while its holder's context says it is live (Err): the lost-lock
// signal keeps a margin for timers that fire late, and Err reads the clock
// besides.
func TestKeepAlive_NoKeyGoneWhileLiveUnderLoad(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb, _ := b.client(t)
	var hold atomic.Bool
	rdb.AddHook(hook{pipeline: func(cmds []redis.Cmder) {
		if hold.Load() && isScript(cmds[0], renewScript) {
			time.Sleep(400 * time.Millisecond)
		}
	}})
	checker, _ := b.client(t)
	locker := redislock.New(rdb)
	const n, ttl = 1000, 300 * time.Millisecond
	keys := make([]string, n)
	kept := make([]context.Context, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		lk, err := locker.TryObtain(ctx, keys[i], ttl)
		require.NoError(t, err)
		kept[i] = lk.KeepAlive(ctx)
		defer func() { _ = lk.Release(context.Background()) }()
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for i := 0; i < 1e6; i++ {
				}
			}
		}()
	}
	hold.Store(true)
	var gone, violations, doneLate int
	seen := make([]bool, n)
	end := time.Now().Add(time.Second)
	for time.Now().Before(end) {
		cmds, err := checker.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Exists(ctx, k)
			}
			return nil
		})
		require.NoError(t, err)
		for i, c := range cmds {
			if c.(*redis.IntCmd).Val() == 0 && !seen[i] {
				seen[i] = true
				gone++
				select {
				case <-kept[i].Done():
				default:
					doneLate++ // the timer has not fired yet
				}
				if kept[i].Err() == nil {
					violations++
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	hold.Store(false)
	t.Logf("%d of %d keys expired under load; Done was closed late for %d", gone, n, doneLate)
	require.Positive(t, gone, "no lease ran out: the test proves nothing")
	assert.Zero(t, violations, "keys gone while their holders' contexts were live")
	waitGoroutinesGone(t, "redislock.(*keeper).renew", 2*time.Second)
}

// A Refresh to a shorter lease that is stuck on a silently dead connection
// costs no lease: as it is sent, it lowers Until (and the lost-lock timer)
// to its own lease, and makes the next renewal due a third of that lease
// later, which goes out on a healthy connection and keeps the lock. The key
// stays held, and the kept context live, all along.
func TestKeepAlive_RefreshStuckOnADeadConnectionCostsNoLease(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	dc := &deadConns{}
	rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer = dc.dial; o.ReadTimeout = time.Second })
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 3*time.Second)
	require.NoError(t, err)
	require.NoError(t, lk.Refresh(ctx, 3*time.Second)) // loads the refresh script
	lctx := lk.KeepAlive(ctx)

	dc.killNext(sentScript(renewScript, "300"))
	other, _ := b.client(t)
	rivalGot := make(chan time.Time, 1)
	go func() { rivalGot <- competeUntil(t, other, "k", 2*time.Second, lctx) }()
	refreshed := make(chan error, 1)
	go func() { refreshed <- lk.Refresh(ctx, 300*time.Millisecond) }()
	require.True(t, (<-rivalGot).IsZero(), "another client got the key")
	require.NoError(t, lctx.Err(), "lost (%v), while the key was held all along", context.Cause(lctx))
	<-refreshed // go-redis sends it again after its 1 s read timeout
	require.NoError(t, lk.Release(ctx))
}

// Once a holder is told that its kept lock is lost (the KeepAlive context
// ends with ErrLockLost), Until is no later than the moment of that
// decision: KeepAlive gives the key back then (see KeepAlive), and Redis
// never frees the lock before Until (see Lock.Until). Here the renewals of
// a 300 ms lease are held back, unsent, past the lost-lock timer (at Until
// - 53 ms), and the give-back is not: it frees the key while the lease the
// acquisition set still has about 53 ms to run. Until, read as soon as the
// context is seen to end, is not after that moment; and a client that then
// finds the key gone finds it so no earlier than Until.
func TestKeepAlive_UntilNotAfterGiveBack(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 300 * time.Millisecond
	rdb, _ := b.client(t)
	rdb.AddHook(hook{pipeline: func(cmds []redis.Cmder) {
		if isScript(cmds[0], renewScript) {
			time.Sleep(ttl) // past the lost-lock timer: sent after the give-back
		}
	}})
	direct, _ := b.client(t)
	locker := redislock.New(rdb)
	lk, err := locker.Obtain(ctx, "k", ttl)
	require.NoError(t, err)
	before := lk.Until()
	lctx := lk.KeepAlive(ctx)

	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the kept context outlived a lease whose renewals were never sent")
	}
	told := time.Now()
	until := lk.Until()
	require.ErrorIs(t, context.Cause(lctx), redislock.ErrLockLost)
	assert.False(t, until.After(told), "Until is %v after the holder was told the lock is lost", until.Sub(told))

	var gone time.Time
	require.Eventually(t, func() bool {
		n := direct.Exists(ctx, "k").Val()
		gone = time.Now()
		return n == 0
	}, 5*time.Second, time.Millisecond, "the lost lock was not given back")
	t.Logf("told %v before the acquisition's lease ended; the key found gone %v before it", before.Sub(told), before.Sub(gone))
	assert.False(t, until.After(gone), "Redis freed the lock %v before the Until read before that", until.Sub(gone))
	require.NoError(t, locker.Shutdown(ctx))
}

// Many kept locks under latency spikes: 1,000 locks with 300 ms leases kept
// by one Locker (pool of 20 connections), whose replies come 150 ms late
// for 150 ms of each half second (see spikyConns), so that some renewals
// are answered after the lost-lock timer fired (false alarms: Redis had run
// them) and their locks are given back. Every 25 ms a checker reads each
// lock's Until, then every key with one MGET from another client. Once a
// holder was told (its context ended with ErrLockLost) before its Until was
// read, that Until is not in the future, and no MGET finds the key gone
// before it: Redis never frees the lock before Until (see Lock.Until), and
// KeepAlive gives the key back only after moving Until to the moment it
// decided the lock was lost. With go-redis's default options and with
// ContextTimeoutEnabled.
//
// A key found gone before an Until read before its holder was told is
// logged, not failed: what is promised is Until no later than the decision
// once it is made, and the decision may come between the read and the MGET.
func TestKeepAlive_UntilNotAfterGiveBackUnderLatencySpikes(t *testing.T) {
	for _, c := range []struct {
		name       string
		ctxTimeout bool
	}{{"default options", false}, {"ContextTimeoutEnabled", true}} {
		t.Run(c.name, func(t *testing.T) { untilUnderSpikes(t, c.ctxTimeout) })
	}
}

func untilUnderSpikes(t *testing.T, ctxTimeout bool) {
	const (
		n      = 1000
		ttl    = 300 * time.Millisecond
		run    = 2 * time.Second
		period = 500 * time.Millisecond // with a spike at its start
		spike  = 150 * time.Millisecond
		every  = 25 * time.Millisecond
	)
	b := realBackend(t)
	ctx := ctxT(t, 60*time.Second)
	sc := &spikyConns{lag: spike}
	rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer, o.PoolSize, o.ContextTimeoutEnabled = sc.dial, 20, ctxTimeout })
	direct, _ := b.client(t)
	locker := redislock.New(rdb)

	keys := make([]string, n)
	locks := make([]*redislock.Lock, n)
	kept := make([]context.Context, n)
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 20 {
				keys[i] = "k" + strconv.Itoa(i)
				// A reply later than ttl/2 fails an acquisition: on a busy
				// machine, try again (waiting for a key given back).
				lk, err := locker.Obtain(ctx, keys[i], ttl)
				for try := 1; err != nil && try < 5; try++ {
					lk, err = locker.Obtain(ctx, keys[i], ttl)
				}
				if !assert.NoError(t, err) {
					return
				}
				locks[i], kept[i] = lk, lk.KeepAlive(ctx)
			}
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())

	var (
		told, falseAlarms, goneEarly, lateUntil, beforeTold int
		worstGone, worstUntil, worstBefore                  time.Duration
	)
	seen := make([]bool, n)  // told, as the checker saw
	alarm := make([]bool, n) // counted as a false alarm
	tolds := make([]bool, n) // this round: told before Until was read
	untils := make([]time.Time, n)
	start := time.Now()
	for time.Now().Before(start.Add(run)) {
		sc.on.Store(time.Since(start)%period < spike)
		for i, lk := range locks {
			select {
			case <-kept[i].Done():
				tolds[i] = true
			default:
				tolds[i] = false
			}
			untils[i] = lk.Until()
			read := time.Now()
			if tolds[i] && !seen[i] {
				seen[i] = true
				told++
				assert.ErrorIs(t, context.Cause(kept[i]), redislock.ErrLockLost)
			}
			if d := untils[i].Sub(read); tolds[i] && d > 0 {
				lateUntil++
				worstUntil = max(worstUntil, d)
			}
		}
		vals, err := direct.MGet(ctx, keys...).Result()
		require.NoError(t, err)
		mget := time.Now()
		for i, v := range vals {
			d := untils[i].Sub(mget)
			switch {
			case v != nil:
				if tolds[i] && !alarm[i] {
					alarm[i] = true // told lost while Redis still held the key
					falseAlarms++
				}
			case d <= 0:
			case tolds[i]:
				goneEarly++
				worstGone = max(worstGone, d)
			default:
				beforeTold++
				worstBefore = max(worstBefore, d)
			}
		}
		time.Sleep(every)
	}
	sc.on.Store(false)
	t.Logf("%d of %d locks told lost, %d of them while Redis still held their key (false alarms)", told, n, falseAlarms)
	t.Logf("keys found gone before an Until read before the holder was told: %d (worst %v)", beforeTold, worstBefore)
	assert.Zero(t, lateUntil, "Until read after the holder was told the lock is lost is in the future (worst: %v)", worstUntil)
	assert.Zero(t, goneEarly, "keys found gone before the Until read after their holders were told (worst: %v before Until)", worstGone)

	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 20 {
				_ = locks[i].Release(ctx)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, locker.Shutdown(ctx))
}

// spikyConns is a go-redis Dialer whose connections deliver what Redis
// sends lag late while on is set: a link whose latency spikes. Redis runs
// the commands as they come; only their replies are late. A read deadline
// that passes first fails the read with a timeout, as on a slow link
// (go-redis then drops the connection).
type spikyConns struct {
	lag time.Duration
	on  atomic.Bool
}

func (s *spikyConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &spikyConn{Conn: c, owner: s}, nil
}

type spikyConn struct {
	net.Conn
	owner    *spikyConns
	deadline atomic.Pointer[time.Time] // the read deadline go-redis set
}

func (c *spikyConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetReadDeadline(t)
}

func (c *spikyConn) SetDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetDeadline(t)
}

func (c *spikyConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n == 0 || !c.owner.on.Load() {
		return n, err
	}
	due := time.Now().Add(c.owner.lag)
	if d := c.deadline.Load(); d != nil && !d.IsZero() && d.Before(due) {
		time.Sleep(time.Until(*d))
		return 0, os.ErrDeadlineExceeded
	}
	time.Sleep(time.Until(due))
	return n, err
}

// WithSafetyMargin sets when the lost-lock signal comes: with Redis frozen
// (no renewal returns), a kept 1 s lease's context ends at Until - ttl/100
// - min(margin, ttl/4) (see KeepAlive): 10 ms before Until with a margin of
// 0, 110 ms with 100 ms, and 260 ms with 1 s (capped at a quarter of the
// ttl). The context's Err reads the clock (see KeepAlive), so this needs no
// allowance for timers that fire late: Err is nil whenever it is read
// before that instant (the margin is not larger), and once it is not nil,
// that instant has passed (the margin is not smaller: the signal does not
// come earlier than the margin asks).
func TestKeepAlive_SafetyMarginSetsTheSignal(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	const ttl = time.Second
	type kept struct {
		margin time.Duration
		lk     *redislock.Lock
		lctx   context.Context
		until  time.Time // Until, read while the context was live
		told   time.Time // when Err was first seen not nil
	}
	var ks []*kept
	for _, margin := range []time.Duration{0, 100 * time.Millisecond, time.Second} {
		locker := redislock.New(rdb, redislock.WithSafetyMargin(margin))
		lk, err := locker.Obtain(ctx, "k"+margin.String(), ttl)
		require.NoError(t, err)
		ks = append(ks, &kept{margin: margin, lk: lk, lctx: lk.KeepAlive(ctx)})
	}
	b.srv.Freeze(t)
	frozen := time.Now()
	for live := len(ks); live > 0; {
		require.Less(t, time.Since(frozen), 3*ttl, "a kept context outlived the frozen lease")
		for _, k := range ks {
			if !k.told.IsZero() {
				continue
			}
			until := k.lk.Until()
			before := time.Now()
			err := k.lctx.Err()
			after := time.Now()
			signal := until.Add(-ttl/100 - min(k.margin, ttl/4))
			if err == nil {
				require.True(t, before.Before(signal), "margin %v: the context is live %v after Until - ttl/100 - min(margin, ttl/4)", k.margin, before.Sub(signal))
				k.until = until
				continue
			}
			k.told = after
			live--
			require.False(t, k.until.IsZero(), "margin %v: the context ended before Redis was frozen: %v", k.margin, context.Cause(k.lctx))
			assert.ErrorIs(t, context.Cause(k.lctx), redislock.ErrLockLost)
			signal = k.until.Add(-ttl/100 - min(k.margin, ttl/4))
			assert.False(t, after.Before(signal), "margin %v: the context ended %v before Until - ttl/100 - min(margin, ttl/4)", k.margin, signal.Sub(after))
			t.Logf("margin %v: told %v before Until", k.margin, k.until.Sub(after))
		}
		time.Sleep(time.Millisecond)
	}
	b.srv.Thaw(t)
	for _, k := range ks {
		_ = k.lk.Release(ctx)
	}
}
