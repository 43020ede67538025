package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
)

// Losing the subscription again and again degrades waiting to polling: the
// waiter still gets the lock.
func TestSubscription_SurvivesConnectionKills(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	c1, _ := b.client(t)
	c2, _ := b.client(t)
	admin, _ := b.client(t)
	holder, err := redislock.New(c1).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)

	// Keep killing every pub/sub connection while the waiter waits.
	stop := make(chan struct{})
	var kills atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if n, _ := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); n > 0 {
					kills.Add(n)
				}
			}
		}
	}()
	defer close(stop)
	time.AfterFunc(500*time.Millisecond, func() { _ = holder.Release(ctx) })
	start := time.Now()
	lock, err := redislock.New(c2, redislock.WithBackoff(50*time.Millisecond, 100*time.Millisecond)).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Positive(t, kills.Load(), "the subscription was killed")
	assert.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, lock.Release(ctx))
}

// While the network hangs and go-redis redials the subscription's
// connection, a waiting Obtain still returns at its deadline: nothing about
// the subscription runs in the caller's path. Once the network is back, no
// place is left in line.
func TestSubscription_ObtainKeepsDeadlineWhileRedialing(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	direct, _ := b.client(t)
	require.NoError(t, direct.Set(ctx, "k", "holder", time.Minute).Err())
	proxy := faultproxy.New(t, b.addr)
	rdb := defaultClient(t, proxy.Addr())
	locker := redislock.New(rdb, slowPolling)

	const deadline = 1500 * time.Millisecond
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	ch := obtainAsync(wctx, locker, "k", time.Minute)
	waitQueued(t, direct, "k", 1)
	require.Eventually(t, func() bool {
		return wakeSubscribers(ctx, direct) == 1
	},
		2*time.Second, time.Millisecond, "subscribed")

	// Kill the subscription's connection, then hang the network: go-redis
	// redials through the proxy, and its SUBSCRIBE gets no answer.
	require.NoError(t, direct.ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	proxy.Pause()
	t.Cleanup(proxy.Resume)
	r := <-ch
	took := r.at.Sub(start)
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	assert.Less(t, took, deadline+hangMargin, "returned %v after the deadline", took-deadline)

	proxy.Resume()
	assert.Eventually(t, func() bool { return len(queued(t, direct, "k")) == 0 }, settle, 10*time.Millisecond,
		"a place was left in line: %v", queued(t, direct, "k"))
}

// The subscription ends by itself once nobody has waited for a while.
func TestSubscription_RetiresWhenIdle(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	held, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	time.AfterFunc(100*time.Millisecond, func() { _ = held.Release(ctx) })
	lk, err := redislock.New(rdb, slowPolling).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	waitGoroutinesGone(t, "redislock.(*subscription).run", time.Second)
}

// wakeSubscribers returns how many subscriptions listen on the wake
// channels of Lockers (rl1:wake:<id>, see keyspace.wake) on rdb's Redis, a
// single node: a Locker subscribes to its channel while it waits in line.
func wakeSubscribers(ctx context.Context, rdb *redis.Client) int64 {
	channels := rdb.PubSubChannels(ctx, "rl1:wake:*").Val()
	if len(channels) == 0 {
		return 0
	}
	var n int64
	for _, c := range rdb.PubSubNumSub(ctx, channels...).Val() {
		n += c
	}
	return n
}
