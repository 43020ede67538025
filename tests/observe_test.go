package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// recorder collects the events of a Locker's hooks.
type recorder struct {
	mu       sync.Mutex
	obtains  []redislock.ObtainEvent
	handoffs []redislock.HandOffEvent
	renewals []redislock.RenewEvent
	losses   []redislock.LostEvent
	releases []redislock.ReleaseEvent
}

func (r *recorder) hooks() redislock.Hooks {
	return redislock.Hooks{
		Obtain: func(_ context.Context, e redislock.ObtainEvent) {
			r.mu.Lock()
			r.obtains = append(r.obtains, e)
			r.mu.Unlock()
		},
		HandOff: func(_ context.Context, e redislock.HandOffEvent) {
			r.mu.Lock()
			r.handoffs = append(r.handoffs, e)
			r.mu.Unlock()
		},
		Renew: func(_ context.Context, e redislock.RenewEvent) {
			r.mu.Lock()
			r.renewals = append(r.renewals, e)
			r.mu.Unlock()
		},
		Lost: func(_ context.Context, e redislock.LostEvent) {
			r.mu.Lock()
			r.losses = append(r.losses, e)
			r.mu.Unlock()
		},
		Release: func(_ context.Context, e redislock.ReleaseEvent) {
			r.mu.Lock()
			r.releases = append(r.releases, e)
			r.mu.Unlock()
		},
	}
}

// snapshot returns a copy of what r recorded.
func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{obtains: append(r.obtains[:0:0], r.obtains...), handoffs: append(r.handoffs[:0:0], r.handoffs...),
		renewals: append(r.renewals[:0:0], r.renewals...), losses: append(r.losses[:0:0], r.losses...),
		releases: append(r.releases[:0:0], r.releases...)}
}

// The Obtain hook reports each acquisition attempt once, with its outcome:
// acquired (with the token, fence, one attempt and the wait), joined (no
// attempt), not obtained (ErrNotObtained), and an error when Redis is down
// (not "not obtained"). Bad input reports nothing.
func TestHooks_Obtain(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		var rec recorder
		locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
		lk, err := locker.Obtain(ctx, "k", time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		joined, err := locker.Obtain(lk.Context(ctx), "k", time.Minute)
		require.NoError(t, err)
		_, err = redislock.New(rdb, redislock.WithHooks(rec.hooks())).TryObtain(ctx, "k", time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		_, err = locker.Obtain(ctx, "", time.Minute)
		require.ErrorIs(t, err, redislock.ErrInvalidKey)

		got := rec.snapshot().obtains
		require.Len(t, got, 3)
		assert.Equal(t, redislock.OutcomeAcquired, got[0].Outcome)
		assert.Equal(t, lk.Token(), got[0].Token)
		assert.Equal(t, lk.Fence(), got[0].Fence)
		assert.Equal(t, 1, got[0].Attempts)
		assert.Positive(t, got[0].Wait)
		assert.True(t, got[1].Joined)
		assert.Zero(t, got[1].Attempts)
		assert.Equal(t, redislock.OutcomeNotObtained, got[2].Outcome)
		assert.ErrorIs(t, got[2].Err, redislock.ErrNotObtained)
		require.NoError(t, joined.Release(ctx))
		require.NoError(t, lk.Release(ctx))
	})

	t.Run("redis down", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		var rec recorder
		_, err = redislock.New(rdb, redislock.WithHooks(rec.hooks())).TryObtain(context.Background(), "k", time.Minute)
		require.Error(t, err)
		got := rec.snapshot().obtains
		require.Len(t, got, 1)
		assert.Equal(t, redislock.OutcomeError, got[0].Outcome)
		assert.Equal(t, err, got[0].Err)
	})
}

// A contended Obtain reports the time it waited, from the call to the
// hand-off; the Release that handed the key over reports the hand-off:
// through Redis when the key went to the next place in line (here another
// Locker's), local when the Locker passed it to its own next Obtain within
// its turn.
func TestHooks_HandOff(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	checker, _ := b.client(t)
	var rec recorder
	holder := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
	waiter := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
	lk, err := holder.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	first := obtainAsync(ctx, waiter, "k", time.Minute)
	waitQueued(t, checker, "k", 1)
	second := obtainAsync(ctx, waiter, "k", time.Minute)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, lk.Release(ctx))
	r1 := <-first
	require.NoError(t, r1.err)
	require.NoError(t, r1.lock.Release(ctx))
	r2 := <-second
	require.NoError(t, r2.err)
	require.NoError(t, r2.lock.Release(ctx))

	got := rec.snapshot()
	require.Len(t, got.handoffs, 2)
	assert.Equal(t, redislock.HandOffEvent{Key: "k", Local: false, To: 1}, got.handoffs[0])
	assert.Equal(t, redislock.HandOffEvent{Key: "k", Local: true, To: 1}, got.handoffs[1])
	require.Len(t, got.obtains, 3)
	for _, e := range got.obtains[1:] {
		assert.Equal(t, redislock.OutcomeAcquired, e.Outcome)
		assert.GreaterOrEqual(t, e.Wait, 100*time.Millisecond)
	}
}

// Renewals of a kept lease are reported as renewed, with their latency; a
// renewal sent while an earlier one of the same lease is unanswered is
// reported as a hedge.
func TestHooks_Renew(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var stall sync.Once
	rdb.AddHook(hook{pipeline: func(cmds []redis.Cmder) {
		if isScript(cmds[0], renewScript) {
			stall.Do(func() { time.Sleep(300 * time.Millisecond) }) // the first renewal is slow
		}
	}})
	var rec recorder
	lk, err := redislock.New(rdb, redislock.WithHooks(rec.hooks())).Obtain(ctx, "k", 600*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, lctx.Err())
	require.NoError(t, lk.Release(ctx))
	got := rec.snapshot().renewals
	require.GreaterOrEqual(t, len(got), 3)
	hedges, slow := 0, 0
	for _, e := range got {
		assert.Equal(t, redislock.OutcomeRenewed, e.Outcome, "%+v", e)
		assert.Equal(t, lk.Token(), e.Token)
		if e.Hedge {
			hedges++
		}
		if e.Latency >= 300*time.Millisecond {
			slow++
		}
	}
	assert.Positive(t, hedges, "the slow renewal was hedged")
	assert.Equal(t, 1, slow, "one renewal took 300 ms")
}

// A lost lock is reported once, with the key, how long it was held and the
// cause: "gone or held by another owner" when a renewal found the key
// deleted; the last renewal's error when renewals failed until the lease
// ran out (here: the client was closed, which the cause names). The
// Release that follows reports not_held.
func TestHooks_Lost(t *testing.T) {
	t.Run("deleted", func(t *testing.T) {
		b := realBackend(t)
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		var rec recorder
		lk, err := redislock.New(rdb, redislock.WithHooks(rec.hooks())).Obtain(ctx, "k", 600*time.Millisecond)
		require.NoError(t, err)
		lctx := lk.KeepAlive(ctx)
		require.NoError(t, rdb.Del(ctx, "k").Err())
		<-lctx.Done()
		require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
		require.Eventually(t, func() bool { return len(rec.snapshot().losses) == 1 }, time.Second, 5*time.Millisecond)
		got := rec.snapshot()
		e := got.losses[0]
		assert.Equal(t, "k", e.Key)
		assert.ErrorIs(t, e.Err, redislock.ErrLockLost)
		assert.Contains(t, e.Err.Error(), "gone or held by another owner")
		assert.Positive(t, e.Held)
		require.Len(t, got.releases, 1)
		assert.Equal(t, redislock.OutcomeNotHeld, got.releases[0].Outcome)
	})
	t.Run("client closed", func(t *testing.T) {
		b := realBackend(t)
		ctx := ctxT(t, 10*time.Second)
		rdb := redis.NewClient(&redis.Options{Addr: b.addr})
		var rec recorder
		lk, err := redislock.New(rdb, redislock.WithHooks(rec.hooks())).Obtain(ctx, "k", 600*time.Millisecond)
		require.NoError(t, err)
		lctx := lk.KeepAlive(ctx)
		require.NoError(t, rdb.Close())
		<-lctx.Done()
		require.Eventually(t, func() bool { return len(rec.snapshot().losses) == 1 }, time.Second, 5*time.Millisecond)
		e := rec.snapshot().losses[0]
		assert.ErrorIs(t, e.Err, redislock.ErrLockLost)
		assert.ErrorIs(t, e.Err, redis.ErrClosed, "the cause names the closed client: %v", e.Err)
		var failed int
		for _, r := range rec.snapshot().renewals {
			if r.Outcome == redislock.OutcomeError {
				failed++
			}
		}
		assert.Positive(t, failed)
	})
}

// Release reports its outcome: released, not_held, or background when its
// ctx was done (the release goes on).
func TestHooks_Release(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		var rec recorder
		locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
		for _, c := range []struct {
			want    redislock.Outcome
			prepare func(lk *redislock.Lock) context.Context
		}{
			{redislock.OutcomeReleased, func(*redislock.Lock) context.Context { return ctx }},
			{redislock.OutcomeNotHeld, func(lk *redislock.Lock) context.Context {
				require.NoError(t, rdb.Del(ctx, lk.Key()).Err())
				return ctx
			}},
			{redislock.OutcomeBackground, func(*redislock.Lock) context.Context {
				done, cancel := context.WithCancel(ctx)
				cancel()
				return done
			}},
		} {
			lk, err := locker.Obtain(ctx, "k:"+string(c.want), time.Minute)
			require.NoError(t, err)
			err = lk.Release(c.prepare(lk))
			got := rec.snapshot().releases
			require.NotEmpty(t, got)
			e := got[len(got)-1]
			assert.Equal(t, c.want, e.Outcome)
			assert.Equal(t, err, e.Err)
			assert.Equal(t, lk.Token(), e.Token)
		}
		assert.Eventually(t, func() bool { return rdb.Exists(ctx, "k:background").Val() == 0 }, 5*time.Second, 10*time.Millisecond)
	})
}

// WithHooks given twice calls both, in order.
func TestHooks_Join(t *testing.T) {
	b := miniBackend(t)
	rdb, _ := b.client(t)
	var order []string
	h := func(name string) redislock.Hooks {
		return redislock.Hooks{Obtain: func(context.Context, redislock.ObtainEvent) { order = append(order, name) }}
	}
	lk, err := redislock.New(rdb, redislock.WithHooks(h("a")), redislock.WithHooks(h("b"))).Obtain(context.Background(), "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lk.Release(context.Background()))
	assert.Equal(t, []string{"a", "b"}, order)
}

// SlogHooks logs a lost lock at level ERROR with the key, how long it was
// held and the cause; acquisitions at DEBUG, which an INFO logger drops.
func TestSlogHooks_Lost(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	lk, err := redislock.New(rdb, redislock.WithHooks(redislock.SlogHooks(logger))).Obtain(ctx, "orders:42", 600*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	require.NoError(t, rdb.Del(ctx, "orders:42").Err())
	<-lctx.Done()
	var rec map[string]any
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "redislock: lock lost" {
				return true
			}
		}
		return false
	}, time.Second, 5*time.Millisecond)
	assert.Equal(t, "ERROR", rec["level"])
	assert.Equal(t, "orders:42", rec["key"])
	assert.Contains(t, rec["err"], "gone or held by another owner")
	assert.Contains(t, rec, "held")
	mu.Lock()
	assert.NotContains(t, buf.String(), `"outcome":"acquired"`, "DEBUG events are below the logger's level")
	mu.Unlock()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// The uncontended Obtain + Release cycle with no hooks, no-op hooks and
// SlogHooks on a logger at INFO (the events of the cycle are DEBUG): hooks
// must not cost more than 5% (compare the ns/op of the three).
func BenchmarkHooks(b *testing.B) {
	be := realBackend(b)
	rdb, _ := be.client(b)
	noop := redislock.Hooks{
		Obtain:  func(context.Context, redislock.ObtainEvent) {},
		HandOff: func(context.Context, redislock.HandOffEvent) {},
		Renew:   func(context.Context, redislock.RenewEvent) {},
		Lost:    func(context.Context, redislock.LostEvent) {},
		Release: func(context.Context, redislock.ReleaseEvent) {},
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, c := range []struct {
		name string
		opts []redislock.Option
	}{
		{"none", nil},
		{"noop", []redislock.Option{redislock.WithHooks(noop)}},
		{"slog", []redislock.Option{redislock.WithHooks(redislock.SlogHooks(logger))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			locker := redislock.New(rdb, c.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				lk, err := locker.Obtain(ctx, "bench", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
					b.Fatal(err)
				}
			}
		})
	}
}

// A lock released while one of its renewals is on its way is not reported
// lost: the renewal reaches Redis after the release and finds the key gone,
// which is the release's doing. The Release reports released, and no Lost
// event follows.
func TestHooks_NoLostAfterRelease(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	inFlight := make(chan struct{})
	var once sync.Once
	rdb.AddHook(hook{pipeline: func(cmds []redis.Cmder) {
		if isScript(cmds[0], renewScript) {
			once.Do(func() {
				close(inFlight)
				time.Sleep(300 * time.Millisecond) // the renewal reaches Redis after the release
			})
		}
	}})
	var rec recorder
	lk, err := redislock.New(rdb, redislock.WithHooks(rec.hooks())).Obtain(ctx, "k", 600*time.Millisecond)
	require.NoError(t, err)
	lk.KeepAlive(ctx)
	<-inFlight
	require.NoError(t, lk.Release(ctx))
	time.Sleep(500 * time.Millisecond) // the renewal's reply has come
	got := rec.snapshot()
	assert.Empty(t, got.losses, "a released lock is not lost")
	require.Len(t, got.releases, 1)
	assert.Equal(t, redislock.OutcomeReleased, got.releases[0].Outcome)
}

// A lock kept inside the fn of another kept lock, when the outer one is
// lost: the inner lock's context ends too (its parent did), but the inner
// lock is not lost, and is not reported lost; the inner WithLock's error
// does not say ErrLockLost for it, and its release succeeds.
func TestHooks_OuterLossIsNotInnerLoss(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var rec recorder
	locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()), redislock.WithTTL(time.Second))
	var innerErr error
	outerErr := locker.WithLock(ctx, "outer", func(ctx context.Context) error {
		innerErr = locker.WithLock(ctx, "inner", func(ctx context.Context) error {
			require.NoError(t, rdb.Del(ctx, "outer").Err())
			<-ctx.Done()
			return nil
		})
		return nil
	})
	assert.ErrorIs(t, outerErr, redislock.ErrLockLost)
	assert.NotErrorIs(t, innerErr, redislock.ErrLockLost, "the inner lock was not lost")
	assert.NoError(t, innerErr)
	got := rec.snapshot()
	require.Len(t, got.losses, 1)
	assert.Equal(t, "outer", got.losses[0].Key)
	for _, e := range got.releases {
		if e.Key == "inner" {
			assert.Equal(t, redislock.OutcomeReleased, e.Outcome)
		}
	}
}

// A release that goes on in the background reports the hand-off it makes
// when it runs, as a Release does: when its ctx had ended before the call,
// and when it ended during the call (a slow link: the release reaches
// Redis 300 ms late, the ctx ends after 50 ms).
func TestHooks_BackgroundReleaseReportsHandOff(t *testing.T) {
	for name, midCall := range map[string]bool{"ended before": false, "ended during the call": true} {
		t.Run(name, func(t *testing.T) {
			b := realBackend(t)
			ctx := ctxT(t, 10*time.Second)
			rdb, _ := b.client(t)
			checker, _ := b.client(t)
			var slow atomic.Bool
			rdb.AddHook(hook{before: func(cmd redis.Cmder) {
				if slow.Load() && isScript(cmd, releaseScript) {
					time.Sleep(300 * time.Millisecond)
				}
			}})
			var rec recorder
			lk, err := redislock.New(rdb, redislock.WithHooks(rec.hooks())).Obtain(ctx, "k", time.Minute)
			require.NoError(t, err)
			other, _ := b.client(t)
			waiter := obtainAsync(ctx, redislock.New(other), "k", time.Minute)
			waitQueued(t, checker, "k", 1)
			rctx, cancel := context.WithCancel(ctx)
			if midCall {
				slow.Store(true)
				rctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			}
			defer cancel()
			if !midCall {
				cancel()
			}
			require.ErrorContains(t, lk.Release(rctx), "background")
			w := <-waiter
			require.NoError(t, w.err)
			require.Eventually(t, func() bool { return len(rec.snapshot().handoffs) == 1 }, time.Second, 5*time.Millisecond)
			assert.Equal(t, redislock.HandOffEvent{Key: "k", Local: false, To: 1}, rec.snapshot().handoffs[0])
			require.NoError(t, w.lock.Release(ctx))
		})
	}
}

// When WithLock's release fails on Redis (here: its first run's reply is
// lost, as with a reset connection), nobody can call Release
// again: the release goes on in the background, WithLock's error says so,
// and the Release event's outcome is background (the acquisition ended),
// not error.
func TestHooks_WithLockFailedReleaseGoesOn(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	checker, _ := b.client(t)
	var failRelease sync.Once
	rdb.AddHook(hook{after: func(cmd redis.Cmder, err error) {
		if releases(cmd) && err == nil {
			failRelease.Do(func() { cmd.SetErr(errors.New("connection reset by peer")) })
		}
	}})
	var rec recorder
	locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
	err := locker.WithLock(ctx, "k", func(context.Context) error { return nil })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "background")
	got := rec.snapshot().releases
	require.Len(t, got, 1)
	assert.Equal(t, redislock.OutcomeBackground, got[0].Outcome)
	assert.Eventually(t, func() bool { return checker.Exists(ctx, "k").Val() == 0 }, 5*time.Second, 10*time.Millisecond,
		"the release went on and freed the key")
	require.NoError(t, locker.Shutdown(ctx))
}

// Lost reports acquisitions that a call returned: a TryObtain whose reply
// came with less than half of its 40 ms lease left renews the lease before
// returning, and when that renewal reaches Redis after the lease ran out,
// the TryObtain fails (outcome error, no token) and no Lost event follows;
// nor for an Obtain in line whose claim came late, which waits on and
// acquires in the end.
func TestHooks_NoLostForALockNeverReturned(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	loadScripts(t, rdb)
	var slowReply, slowRenew atomic.Bool
	rdb.AddHook(hook{
		before: func(cmd redis.Cmder) {
			if slowRenew.Load() && isScript(cmd, renewScript) {
				time.Sleep(60 * time.Millisecond) // the renewal reaches Redis after the lease
			}
		},
		after: func(cmd redis.Cmder, _ error) {
			if slowReply.Load() && acquires(cmd) {
				time.Sleep(30 * time.Millisecond) // less than ttl/2 is left when the reply is read
			}
		},
	})
	var rec recorder
	locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
	slowReply.Store(true)
	slowRenew.Store(true)
	_, err := locker.TryObtain(ctx, "k", 40*time.Millisecond)
	require.Error(t, err)
	time.Sleep(100 * time.Millisecond)
	got := rec.snapshot()
	require.Len(t, got.obtains, 1)
	assert.Equal(t, redislock.OutcomeError, got.obtains[0].Outcome)
	assert.Empty(t, got.losses, "a Lost event for a lock that no call returned")
}

// An exclusive Obtain on a ctx that carries a shared lock of the key is bad
// input (ErrInvalidOption, nothing sent): the Obtain hook does not report
// it, as for any call rejected as bad input.
func TestHooks_ObtainNotForAnInvalidUpgrade(t *testing.T) {
	b := miniBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var rec recorder
	locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
	reader, err := locker.Obtain(ctx, "k", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	_, err = locker.Obtain(reader.Context(ctx), "k", time.Minute)
	require.ErrorIs(t, err, redislock.ErrInvalidOption)
	assert.Len(t, rec.snapshot().obtains, 1, "only the reader's Obtain is reported")
	require.NoError(t, reader.Release(ctx))
}

// A slow HandOff hook delays nothing but what it reports on, after the
// work is done: a Release whose ctx is shorter than the hook still returns
// nil (Redis released the key and handed it over), and Shutdown does not
// wait for the hook of a background release that has reached Redis.
func TestHooks_SlowHandOffHookChangesNoOutcome(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	other, _ := b.client(t)
	checker, _ := b.client(t)
	handed, hooked := make(chan struct{}, 2), make(chan struct{}, 2)
	var rec recorder
	holder := redislock.New(rdb, redislock.WithHooks(rec.hooks()), redislock.WithHooks(redislock.Hooks{
		HandOff: func(context.Context, redislock.HandOffEvent) {
			handed <- struct{}{}
			time.Sleep(500 * time.Millisecond)
			hooked <- struct{}{}
		},
	}))

	lk, err := holder.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	waiter := obtainAsync(ctx, redislock.New(other), "k", time.Minute)
	waitQueued(t, checker, "k", 1)
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	assert.NoError(t, lk.Release(rctx), "Redis released the key; only the hook was slow")
	w := <-waiter
	require.NoError(t, w.err)
	require.NoError(t, w.lock.Release(ctx))
	got := rec.snapshot().releases
	require.Len(t, got, 1)
	assert.Equal(t, redislock.OutcomeReleased, got[0].Outcome)
	<-handed

	lk, err = holder.Obtain(ctx, "k2", time.Minute)
	require.NoError(t, err)
	waiter = obtainAsync(ctx, redislock.New(other), "k2", time.Minute)
	waitQueued(t, checker, "k2", 1)
	dead, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorContains(t, lk.Release(dead), "background")
	w = <-waiter
	require.NoError(t, w.err)
	require.NoError(t, w.lock.Release(ctx))
	<-handed // the release has reached Redis
	start := time.Now()
	require.NoError(t, holder.Shutdown(ctx))
	assert.Less(t, time.Since(start), 200*time.Millisecond, "Shutdown waited for the slow HandOff hook")
	<-hooked
	<-hooked
}

// slogRecord is what a slogCapture received of one log record.
type slogRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// slogCapture is a slog.Handler that keeps the records at or above level,
// and counts the calls to Enabled.
type slogCapture struct {
	level   slog.Level
	mu      sync.Mutex
	enabled int
	records []slogRecord
}

func (h *slogCapture) Enabled(_ context.Context, l slog.Level) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.enabled++
	return l >= h.level
}

func (h *slogCapture) Handle(_ context.Context, r slog.Record) error {
	rec := slogRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, rec)
	return nil
}

func (h *slogCapture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *slogCapture) WithGroup(string) slog.Handler      { return h }

func (h *slogCapture) take() []slogRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.records
	h.records = nil
	return r
}

// SlogHooks logs each event at the level its doc gives, with the key and
// the outcome as attributes (and the error, when there is one): ERROR for
// a lost lock; WARN for an Obtain or a Release that failed on Redis, a
// renewal that failed and a Release that found the lock no longer held;
// INFO for a Release that goes on in the background; DEBUG for
// acquisitions (joined ones too), hand-offs, renewals and releases, and
// for an Obtain that did not get a lock another owner kept
// (OutcomeNotObtained: a cron fleet's skipped ticks are noise).
func TestSlogHooks_Levels(t *testing.T) {
	h := &slogCapture{level: slog.LevelDebug}
	hooks := redislock.SlogHooks(slog.New(h))
	ctx := context.Background()
	failed := errors.New("redis: connection refused")
	cases := []struct {
		name  string
		fire  func()
		level slog.Level
		msg   string
		attrs map[string]string
	}{
		{"lost", func() {
			hooks.Lost(ctx, redislock.LostEvent{Key: "k", Held: time.Second, Err: redislock.ErrLockLost})
		}, slog.LevelError, "redislock: lock lost", map[string]string{"held": "1s", "err": redislock.ErrLockLost.Error()}},
		{"obtain failed", func() {
			hooks.Obtain(ctx, redislock.ObtainEvent{Key: "k", Outcome: redislock.OutcomeError, Err: failed})
		}, slog.LevelWarn, "redislock: obtain", map[string]string{"outcome": "error", "err": failed.Error()}},
		{"release failed", func() {
			hooks.Release(ctx, redislock.ReleaseEvent{Key: "k", Outcome: redislock.OutcomeError, Err: failed})
		}, slog.LevelWarn, "redislock: release", map[string]string{"outcome": "error", "err": failed.Error()}},
		{"renewal failed", func() {
			hooks.Renew(ctx, redislock.RenewEvent{Key: "k", Outcome: redislock.OutcomeError, Err: failed})
		}, slog.LevelWarn, "redislock: renewal", map[string]string{"outcome": "error", "err": failed.Error()}},
		{"release found it not held", func() {
			hooks.Release(ctx, redislock.ReleaseEvent{Key: "k", Outcome: redislock.OutcomeNotHeld, Err: redislock.ErrNotHeld})
		}, slog.LevelWarn, "redislock: release", map[string]string{"outcome": "not_held", "err": redislock.ErrNotHeld.Error()}},
		{"release in the background", func() {
			hooks.Release(ctx, redislock.ReleaseEvent{Key: "k", Outcome: redislock.OutcomeBackground, Err: context.Canceled})
		}, slog.LevelInfo, "redislock: release", map[string]string{"outcome": "background", "err": context.Canceled.Error()}},
		{"not obtained", func() {
			hooks.Obtain(ctx, redislock.ObtainEvent{Key: "k", Outcome: redislock.OutcomeNotObtained, Err: redislock.ErrNotObtained})
		}, slog.LevelDebug, "redislock: obtain", map[string]string{"outcome": "not_obtained", "err": redislock.ErrNotObtained.Error()}},
		{"acquired", func() {
			hooks.Obtain(ctx, redislock.ObtainEvent{Key: "k", Outcome: redislock.OutcomeAcquired, Attempts: 1, Fence: 7})
		}, slog.LevelDebug, "redislock: obtain", map[string]string{"outcome": "acquired", "fence": "7", "attempts": "1"}},
		{"joined", func() {
			hooks.Obtain(ctx, redislock.ObtainEvent{Key: "k", Outcome: redislock.OutcomeAcquired, Joined: true})
		}, slog.LevelDebug, "redislock: obtain", map[string]string{"outcome": "acquired"}},
		{"hand-off", func() {
			hooks.HandOff(ctx, redislock.HandOffEvent{Key: "k", To: 2})
		}, slog.LevelDebug, "redislock: hand-off", map[string]string{"to": "2", "local": "false"}},
		{"local hand-off", func() {
			hooks.HandOff(ctx, redislock.HandOffEvent{Key: "k", Local: true, To: 1})
		}, slog.LevelDebug, "redislock: hand-off", map[string]string{"local": "true"}},
		{"renewed", func() {
			hooks.Renew(ctx, redislock.RenewEvent{Key: "k", Outcome: redislock.OutcomeRenewed})
		}, slog.LevelDebug, "redislock: renewal", map[string]string{"outcome": "renewed"}},
		{"renewal superseded", func() {
			hooks.Renew(ctx, redislock.RenewEvent{Key: "k", Outcome: redislock.OutcomeSuperseded})
		}, slog.LevelDebug, "redislock: renewal", map[string]string{"outcome": "superseded"}},
		{"released", func() {
			hooks.Release(ctx, redislock.ReleaseEvent{Key: "k", Outcome: redislock.OutcomeReleased})
		}, slog.LevelDebug, "redislock: release", map[string]string{"outcome": "released"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fire()
			recs := h.take()
			require.Len(t, recs, 1)
			r := recs[0]
			assert.Equal(t, c.level, r.level)
			assert.Equal(t, c.msg, r.msg)
			assert.Equal(t, "k", r.attrs["key"])
			for k, v := range c.attrs {
				assert.Equal(t, v, r.attrs[k], "attribute %q", k)
			}
			if c.attrs["err"] == "" {
				assert.NotContains(t, r.attrs, "err", "an error attribute without an error")
			}
		})
	}
	// Below the logger's level, an event costs a call to Enabled, and is
	// not handled.
	quiet := &slogCapture{level: slog.LevelError + 1}
	hooks = redislock.SlogHooks(slog.New(quiet))
	hooks.Lost(ctx, redislock.LostEvent{Key: "k"})
	hooks.Obtain(ctx, redislock.ObtainEvent{Key: "k", Outcome: redislock.OutcomeAcquired})
	assert.Empty(t, quiet.take())
	assert.Equal(t, 2, quiet.enabled)
}

// A cron fleet's skipped tick is quiet at INFO: with SlogHooks on a logger
// at INFO, a TryObtain, and an Obtain that waits until its deadline, that
// do not get a lock another owner keeps log nothing.
func TestSlogHooks_NotObtainedIsQuietAtInfo(t *testing.T) {
	b := miniBackend(t)
	ctx := ctxT(t, 5*time.Second)
	rdb, _ := b.client(t)
	_, err := redislock.New(rdb).Obtain(ctx, "cron:nightly", time.Minute)
	require.NoError(t, err)
	h := &slogCapture{level: slog.LevelInfo}
	fleet := redislock.New(b.mustClient(t), redislock.WithHooks(redislock.SlogHooks(slog.New(h))))
	_, err = fleet.TryObtain(ctx, "cron:nightly", time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	_, err = fleet.Obtain(ctx, "cron:nightly", time.Minute, redislock.WithWait(50*time.Millisecond))
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	assert.Empty(t, h.take(), "a skipped tick was logged at INFO or above")
}
