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
