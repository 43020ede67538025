package tests

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Shutdown returns once the Locker's clean-up has reached Redis: the place
// in line of an Obtain that gave up is gone (so a release right after
// cannot hand the key to a process that is exiting), and a Release whose
// ctx had ended has released the key.
func TestShutdown(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	holderC, _ := b.client(t)
	checker, _ := b.client(t)
	for range 10 {
		lk, err := redislock.New(holderC).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		waiterC, _ := b.client(t)
		// A slow link: the waiter's clean-up takes a while to reach Redis.
		waiterC.AddHook(hook{before: func(redis.Cmder) { time.Sleep(20 * time.Millisecond) }})
		waiter := redislock.New(waiterC)
		wctx, cancel := context.WithCancel(ctx)
		w := obtainAsync(wctx, waiter, "k", time.Minute)
		waitQueued(t, checker, "k", 1)
		cancel()
		require.ErrorIs(t, (<-w).err, context.Canceled)
		require.NoError(t, waiter.Shutdown(ctx))
		assert.Empty(t, queued(t, checker, "k"), "the place is gone when Shutdown returns")
		require.NoError(t, lk.Release(ctx))
		assert.Zero(t, checker.Exists(ctx, "k").Val(), "nobody was handed the key")
	}

	locker := redislock.New(holderC)
	lk, err := locker.Obtain(ctx, "k2", time.Minute)
	require.NoError(t, err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, lk.Release(done)) // goes on in the background
	require.NoError(t, locker.Shutdown(ctx))
	assert.Zero(t, checker.Exists(ctx, "k2").Val(), "released when Shutdown returns")

	expired, cancel := context.WithCancel(ctx)
	cancel()
	slow, _ := b.client(t)
	slow.AddHook(hook{before: func(cmd redis.Cmder) {
		if releases(cmd) {
			time.Sleep(time.Second)
		}
	}})
	slowLocker := redislock.New(slow)
	lk, err = slowLocker.TryObtain(ctx, "k3", time.Minute)
	require.NoError(t, err)
	_ = lk.Release(expired)
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, slowLocker.Shutdown(short), context.DeadlineExceeded, "Shutdown keeps ctx's deadline")
	require.NoError(t, slowLocker.Shutdown(ctx))
}

// A Refresh and a TTL abandoned at their deadline (Redis frozen) go on
// until go-redis gives up on them, as clean-up Shutdown waits for: when
// Shutdown returns nil, no goroutine of the Locker is left.
func TestShutdown_WaitsForAbandonedCalls(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	c, _ := b.client(t, func(o *redis.Options) { o.ReadTimeout = 500 * time.Millisecond; o.MaxRetries = -1 })
	l := redislock.New(c)
	lk, err := l.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	gone := noLibraryGoroutinesLeft(t)
	b.srv.Freeze(t)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	assert.Error(t, lk.Refresh(short, time.Minute))
	cancel()
	short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = lk.TTL(short)
	assert.Error(t, err)
	cancel()
	require.NoError(t, l.Shutdown(ctx))
	gone(50 * time.Millisecond)
	b.srv.Thaw(t)
	require.NoError(t, lk.Release(ctx))
}

// Specifies Lock.Release ("Release returns when ctx is done even if Redis
// does not answer; the release then goes on in the background") and
// Hooks.HandOff ("Releases that go on in the background report theirs when
// they run") when another Locker waits in the key's line: a Release whose
// ctx ends while Redis is frozen hands the key to that waiter as soon as
// Redis answers again, not when the holder's lease runs out, and reports
// the hand-off; nothing of the lock is left afterwards.
func TestRelease_GoesOnInTheBackgroundWithAWaiterInAnotherLocker(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	checker, _ := b.client(t)
	handOffs := make(chan redislock.HandOffEvent, 10)
	holderC, _ := b.client(t)
	holder := redislock.New(holderC, redislock.WithHooks(redislock.Hooks{
		HandOff: func(_ context.Context, e redislock.HandOffEvent) { handOffs <- e },
	}))
	waiterC, _ := b.client(t)
	waiter := redislock.New(waiterC)
	const ttl = 20 * time.Second // the lease the key would wait out
	lk, err := holder.Obtain(ctx, "k", ttl)
	require.NoError(t, err)
	w := obtainAsync(ctxT(t, 10*time.Second), waiter, "k", time.Minute)
	waitQueued(t, checker, "k", 1)

	b.srv.Freeze(t)
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = lk.Release(rctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "goes on in the background")
	b.srv.Thaw(t)
	thawed := time.Now()

	got := <-w
	require.NoError(t, got.err, "the waiter was not handed the key (%v after the thaw)", time.Since(thawed))
	assert.Less(t, got.at.Sub(thawed), 2*time.Second, "the key was handed over late, after the holder's lease ran out?")
	select {
	case e := <-handOffs:
		assert.Equal(t, redislock.HandOffEvent{Key: "k", Local: false, To: 1}, e)
	case <-time.After(5 * time.Second):
		t.Fatal("the background release's hand-off was not reported")
	}
	require.NoError(t, got.lock.Release(ctx))
	require.NoError(t, holder.Shutdown(ctx))
	require.NoError(t, waiter.Shutdown(ctx))
	requireOnlyMarksOf(t, checker, "k")
}
