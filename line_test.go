package redislock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// slowPolling makes polling useless for these tests: a waiter that got the
// lock quickly was woken by the release.
var slowPolling = redislock.WithBackoff(2*time.Second, 2*time.Second)

func TestWaiterWakesOnRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		c1, _ := b.client(t)
		c2, _ := b.client(t)
		holder, err := redislock.New(c1).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)

		var releasedAt time.Time
		time.AfterFunc(300*time.Millisecond, func() {
			releasedAt = time.Now()
			_ = holder.Release(ctx)
		})
		lock, err := redislock.New(c2, slowPolling).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		assert.Less(t, time.Since(releasedAt), 100*time.Millisecond, "woken by the release, not by polling")
		require.NoError(t, lock.Release(ctx))
	})
}

// A release between the failed attempt and the subscription is not missed.
func TestReleaseBeforeSubscribeIsSeen(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		c1, _ := b.client(t)
		c2, _ := b.client(t)
		holder, err := redislock.New(c1).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)

		// Release the lock right after the waiter's first attempt failed,
		// before it subscribes.
		var once sync.Once
		c2.AddHook(afterHook(func(cmd redis.Cmder) {
			if cmd.Name() == "set" {
				once.Do(func() { require.NoError(t, holder.Release(context.Background())) })
			}
		}))
		start := time.Now()
		lock, err := redislock.New(c2, slowPolling).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 500*time.Millisecond, "the re-check after subscribing saw the release")
		require.NoError(t, lock.Release(ctx))
	})
}

// A lease that expires publishes nothing: the wait is capped by the holder's
// remaining lease.
func TestWaiterWakesOnExpiry(t *testing.T) {
	b := realBackend(t) // miniredis expires keys only when told
	ctx := ctxT(t, 10*time.Second)
	c1, _ := b.client(t)
	c2, _ := b.client(t)
	_, err := redislock.New(c1).Obtain(ctx, "k", 400*time.Millisecond)
	require.NoError(t, err)
	start := time.Now()
	lock, err := redislock.New(c2, slowPolling).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.InDelta(t, 400*time.Millisecond, time.Since(start), float64(200*time.Millisecond))
	require.NoError(t, lock.Release(ctx))
}

// Losing the subscription degrades to polling: the waiter still gets the lock.
func TestWaiterSurvivesPubSubLoss(t *testing.T) {
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

// Waiters of one process get the lock in the order they asked for it.
func TestLocalFIFO(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 20*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb, slowPolling)
		holder, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)

		const n = 8
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lock, err := locker.Obtain(ctx, "k", time.Minute)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				assert.NoError(t, lock.Release(ctx))
			}()
			time.Sleep(30 * time.Millisecond) // let waiter i line up before i+1
		}
		require.NoError(t, holder.Release(ctx))
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order)
	})
}

// Two Lockers (two "processes") with 4 workers each take turns: every worker
// gets its share, one release causes about one attempt, and no update is
// lost.
func TestFairHandOff(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const workers, duration = 8, 1500 * time.Millisecond
		ctx := ctxT(t, 20*time.Second)
		var lockers []*redislock.Locker
		var counters []*counter
		var clients []*redis.Client
		for i := 0; i < 2; i++ {
			rdb, n := b.client(t)
			lockers = append(lockers, redislock.New(rdb, slowPolling))
			counters = append(counters, n)
			clients = append(clients, rdb)
		}
		data, _ := b.client(t)

		counts := make([]int, workers)
		var wg sync.WaitGroup
		end := time.Now().Add(duration)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					lock, err := lockers[w%2].Obtain(ctx, "k", time.Minute)
					if !assert.NoError(t, err) {
						return
					}
					v, _ := data.Get(ctx, "counter").Int()
					time.Sleep(time.Millisecond)
					data.Set(ctx, "counter", v+1, 0)
					counts[w]++
					assert.NoError(t, lock.Release(ctx))
				}
			}()
		}
		wg.Wait()
		total, least := 0, counts[0]
		for _, c := range counts {
			total += c
			least = min(least, c)
		}
		got, _ := data.Get(ctx, "counter").Int()
		assert.Equal(t, total, got, "no lost update")
		mean := float64(total) / workers
		assert.GreaterOrEqual(t, float64(least)/mean, 0.7, "fairness: counts %v", counts)
		sent := counters[0].Load() + counters[1].Load()
		assert.LessOrEqual(t, float64(sent)/float64(total), 4.0, "commands per acquisition")
		t.Logf("%d acquisitions, counts %v, %.2f commands sent per acquisition", total, counts, float64(sent)/float64(total))
	})
}

// A waiter whose process died keeps its place only for a while: the others
// get the lock after it lapsed.
func TestDeadWaiterLosesItsPlace(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	other, _ := b.client(t)
	holder, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)

	// A waiter lines up in Redis, then its process "dies": its Obtain ends
	// without leaving the queue (its client is gone).
	dead, _ := b.client(t)
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	go func() { _, _ = redislock.New(dead, slowPolling).Obtain(dctx, "k", time.Minute) }()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, dead.Close()) // its clean-up cannot reach Redis
	<-dctx.Done()
	cancel()
	queue := rdb.Keys(ctx, "{k}:redislock:queue:k").Val()
	require.Len(t, queue, 1, "the dead waiter holds a place")

	// A live waiter lines up behind it; the release announces the dead
	// waiter's turn, which nobody takes until its place lapses.
	time.AfterFunc(100*time.Millisecond, func() { _ = holder.Release(ctx) })
	start := time.Now()
	lock, err := redislock.New(other, slowPolling).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	waited := time.Since(start)
	assert.Greater(t, waited, time.Second, "the dead waiter's place was respected for a while")
	assert.Less(t, waited, 6*time.Second, "the dead waiter's place lapsed")
	require.NoError(t, lock.Release(ctx))
}

// afterHook calls f after each command a client sends.
type afterHook func(redis.Cmder)

func (h afterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h(cmd)
		return err
	}
}
func (h afterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
