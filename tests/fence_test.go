package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
)

func TestFencesIncrease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		c1, _ := b.client(t)
		c2, _ := b.client(t)
		lockers := []*redislock.Locker{redislock.New(c1, redislock.WithFencing()), redislock.New(c2, redislock.WithFencing())}

		var last int64
		for i := 0; i < 10; i++ {
			lock, err := lockers[i%2].Obtain(ctx, "order:42", time.Minute)
			require.NoError(t, err)
			assert.Greater(t, lock.Fence(), last, "successive holders get increasing fences")
			last = lock.Fence()
			require.NoError(t, lock.Release(ctx))
		}

		// Takeover after expiry: the stale holder's fence is lower.
		stale, err := lockers[0].Obtain(ctx, "order:42", 50*time.Millisecond)
		require.NoError(t, err)
		b.elapse(100 * time.Millisecond)
		next, err := lockers[1].Obtain(ctx, "order:42", time.Minute)
		require.NoError(t, err)
		assert.Greater(t, next.Fence(), stale.Fence())
		assert.Equal(t, next.Token(), c1.Get(ctx, "order:42").Val(), "the lock key holds only the token")
		assert.Positive(t, c1.PTTL(ctx, "order:42").Val(), "fenced locks expire too")

		// Without fencing: no fence, and no counter touched.
		plain, err := redislock.New(c1).Obtain(ctx, "plain", time.Minute)
		require.NoError(t, err)
		assert.Zero(t, plain.Fence())
		assert.Equal(t, int64(0), c1.Exists(ctx, fenceKey("plain")).Val())
		// Per call.
		fenced, err := redislock.New(c1).Obtain(ctx, "per-call", time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		assert.Positive(t, fenced.Fence())
	})
}

// 8 goroutines on separate clients take the lock 25 times each; every holder
// sees a fence above its predecessor's.
func TestFencesOrderedUnderContention(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const workers, rounds = 8, 25
		ctx := ctxT(t, 60*time.Second)
		check, _ := b.client(t)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			rdb, _ := b.client(t)
			locker := redislock.New(rdb, redislock.WithFencing(), redislock.WithBackoff(time.Millisecond, 10*time.Millisecond))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					lock, err := locker.Obtain(ctx, "{shared}:lock", 5*time.Second)
					if err != nil {
						errs <- err
						return
					}
					prev, err := rdb.Get(ctx, "{shared}:last-fence").Int64()
					if err != nil && !errors.Is(err, redis.Nil) {
						errs <- err
						return
					}
					if lock.Fence() <= prev {
						errs <- errors.New("fence not above the predecessor's")
					}
					rdb.Set(ctx, "{shared}:last-fence", lock.Fence(), 0)
					rdb.Incr(ctx, "{shared}:count")
					if err := lock.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		assert.Equal(t, workers*rounds, mustInt(t, check, "{shared}:count"))
		assert.GreaterOrEqual(t, mustInt(t, check, "{shared}:last-fence"), workers*rounds)
	})
}

func mustInt(t *testing.T, rdb *redis.Client, key string) int {
	n, err := rdb.Get(context.Background(), key).Int()
	require.NoError(t, err)
	return n
}

// The paused holder: A's lease expires while it is paused, B takes over and
// writes; A wakes and its write is rejected. The resource keeps B's value.
func TestPausedHolderIsFencedOff(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		ca, _ := b.client(t)
		cb, _ := b.client(t)
		lockerA := redislock.New(ca, redislock.WithFencing())
		lockerB := redislock.New(cb, redislock.WithFencing())

		a, err := lockerA.Obtain(ctx, "stock:7", 200*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, redislock.SetFenced(ctx, ca, "stock:7:count", "10", a.Fence()), "A writes while it holds the lock")

		b.elapse(300 * time.Millisecond) // A is paused past its lease, no renewal

		bl, err := lockerB.Obtain(ctx, "stock:7", time.Minute)
		require.NoError(t, err)
		require.Greater(t, bl.Fence(), a.Fence())
		require.NoError(t, redislock.SetFenced(ctx, cb, "stock:7:count", "9", bl.Fence()))
		require.NoError(t, redislock.SetFenced(ctx, cb, "stock:7:count", "8", bl.Fence()), "the same holder writes again")

		// A wakes up, still believing it holds the lock.
		err = redislock.SetFenced(ctx, ca, "stock:7:count", "9", a.Fence())
		require.ErrorIs(t, err, redislock.ErrFenceRejected)
		assert.Equal(t, "8", ca.HGet(ctx, "stock:7:count", "value").Val(), "the resource holds B's value")
		assert.ErrorIs(t, a.Release(ctx), redislock.ErrNotHeld)
	})
}

func TestSetFencedInvalidInput(t *testing.T) {
	b := miniBackend(t)
	rdb, n := b.client(t)
	ctx := ctxT(t, 5*time.Second)
	assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "k", "v", 0), redislock.ErrInvalidOption)
	assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "k", "v", -1), redislock.ErrInvalidOption)
	assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "", "v", 1), redislock.ErrInvalidKey)
	assert.ErrorIs(t, redislock.SetFenced(ctx, nil, "k", "v", 1), redislock.ErrNilClient)
	assert.Zero(t, n.Load())
}

// A lost reply of the fenced acquire: the retry finds our token and issues a
// new, larger fence.
func TestFencedLostReply(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	direct, _ := b.client(t)
	proxy := faultproxy.New(t, b.addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := redislock.New(rdb, redislock.WithFencing())

	first, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	proxy.DropNextReply(faultproxy.MatchCommand("evalsha"))
	lock, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lock.Token(), direct.Get(ctx, "k").Val())
	assert.Greater(t, lock.Fence(), first.Fence()+1, "a fence was issued to the lost reply, and a new one after")
}

// A fenced acquire is all or nothing: when the fence counter cannot be
// incremented (it holds something else than a non-negative integer, or is
// at 2^53-1 or beyond),
// the acquire fails with an error (not ErrNotObtained) and leaves no key:
// on a free key, when the counter breaks while the waiter is in line and
// the key is handed to it, and when it is broken as the waiter lines up.
// The waiter behind it gets the key at once.
func TestFence_FailedIncrementLeavesNoKey(t *testing.T) {
	for name, counter := range map[string]string{"not an integer": "abc", "negative": "-7",
		"at its maximum": "9007199254740991", "beyond it": "9223372036854775807"} {
		t.Run(name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				ctx := ctxT(t, 10*time.Second)
				rdb, _ := b.client(t)
				fenceKey := fenceKey("k")
				require.NoError(t, rdb.Set(ctx, fenceKey, counter, 0).Err())
				fenced := redislock.New(rdb, redislock.WithFencing())

				_, err := fenced.TryObtain(ctx, "k", time.Minute)
				require.Error(t, err)
				assert.NotErrorIs(t, err, redislock.ErrNotObtained)
				assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val(), "a free key was taken without a fence")

				held, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
				require.NoError(t, err)
				_, err = fenced.Obtain(ctx, "k", time.Minute)
				require.Error(t, err, "a fenced waiter lines up with a broken counter")
				assert.NotErrorIs(t, err, redislock.ErrNotObtained)
				assert.Empty(t, queued(t, rdb, "k"), "it took no place")

				// The counter breaks while the fenced waiter is in line: the
				// release drops its place and tells it; the unfenced waiter
				// behind it gets the key.
				require.NoError(t, rdb.Del(ctx, fenceKey).Err())
				c2, _ := b.client(t)
				first := obtainAsync(ctx, redislock.New(c2, redislock.WithFencing(), slowPolling), "k", time.Minute)
				waitQueued(t, rdb, "k", 1)
				c3, _ := b.client(t)
				second := obtainAsync(ctx, redislock.New(c3, slowPolling), "k", time.Minute)
				waitQueued(t, rdb, "k", 2)
				require.NoError(t, rdb.Set(ctx, fenceKey, counter, 0).Err())
				require.NoError(t, held.Release(ctx))
				s := <-second
				require.NoError(t, s.err)
				assert.Equal(t, s.lock.Token(), rdb.Get(ctx, "k").Val())
				r := <-first
				require.Error(t, r.err)
				assert.NotErrorIs(t, r.err, redislock.ErrNotObtained)
				assert.Nil(t, r.lock)
				require.NoError(t, s.lock.Release(ctx))
				assert.Equal(t, counter, rdb.Get(ctx, fenceKey).Val(), "the counter is untouched")
			})
		})
	}
}

// Fences are exact up to 2^53-1, the largest integer a Lua number (a double)
// holds exactly: a counter at 2^53-2 issues 2^53-1, exactly, and then no
// more (the next fenced acquire fails and leaves no key; the counter is not
// changed), so that no fence is ever rounded to one issued before.
func TestFence_ExactUpTo2To53(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		fenceKey := fenceKey("k")
		require.NoError(t, rdb.Set(ctx, fenceKey, strconv.FormatInt(1<<53-2, 10), 0).Err())
		locker := redislock.New(rdb, redislock.WithFencing())

		lk, err := locker.TryObtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, int64(1<<53-1), lk.Fence())
		require.NoError(t, lk.Release(ctx))

		_, err = locker.TryObtain(ctx, "k", time.Minute)
		require.Error(t, err)
		assert.NotErrorIs(t, err, redislock.ErrNotObtained)
		assert.Contains(t, err.Error(), "maximum")
		assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val())
		assert.Equal(t, strconv.FormatInt(1<<53-1, 10), rdb.Get(ctx, fenceKey).Val())
	})
}

// Fence counters are one per Redis Cluster hash slot (and namespace), not
// one per key: 2,000 fenced keys of 50 hash tags leave 50 counters, 3,000
// random keys at most one per slot they hash to (16,384 at most in all);
// each key's fences increase from one acquisition to the next, and a
// counter never expires.
func TestFencing_OneCounterPerSlot(t *testing.T) {
	b := realBackend(t)
	ctx := context.Background()
	rdb, _ := b.client(t)
	locker := redislock.New(rdb, redislock.WithFencing())
	last := map[string]int64{}
	acquire := func(key string) {
		lk, err := locker.Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		require.Greater(t, lk.Fence(), last[key], "%q's fence went down", key)
		last[key] = lk.Fence()
		require.NoError(t, lk.Release(ctx))
	}
	counters := map[string]bool{}
	for range 2 {
		for i := range 2000 {
			key := fmt.Sprintf("{user:%d}:order:%d", i%50, i)
			acquire(key)
			counters[fenceKey(key)] = true
		}
	}
	assert.Len(t, counters, 50)
	assert.Equal(t, int64(50), rdb.DBSize(ctx).Val(), "a counter per hash tag's slot, nothing else")
	var key string
	for range 3000 {
		key = fmt.Sprintf("order:%x", rand.Uint64())
		acquire(key)
		counters[fenceKey(key)] = true
	}
	assert.Equal(t, int64(len(counters)), rdb.DBSize(ctx).Val(), "a counter per slot, nothing else")
	assert.Less(t, len(counters), 3050, "one counter per key")
	assert.Equal(t, time.Duration(-1), rdb.PTTL(ctx, fenceKey(key)).Val(), "a counter expires")
}

// SetFenced on a key that holds data of another kind than its resource (a
// hash whose "fence" field is an integer) returns an error wrapping
// ErrWrongKind whose text names the key and says it holds data of another
// kind, without Redis's script internals (no "script", no SHA, no Lua);
// it is not ErrFenceRejected, and nothing is written: the key's value
// and expiry are as before, and no other key appears.
func TestSetFenced_DataOfAnotherKind(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	sha := regexp.MustCompile(`\b[0-9a-f]{40}\b`)
	for kind, put := range map[string]func(key string) error{
		"string":     func(key string) error { return rdb.Set(ctx, key, "a lock's token", time.Minute).Err() },
		"list":       func(key string) error { return rdb.RPush(ctx, key, "a").Err() },
		"set":        func(key string) error { return rdb.SAdd(ctx, key, "a").Err() },
		"sorted set": func(key string) error { return rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "a"}).Err() },
		"stream": func(key string) error {
			return rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []string{"f", "v"}}).Err()
		},
		"hash whose fence is not an integer": func(key string) error {
			return rdb.HSet(ctx, key, "value", "v", "fence", "abc").Err()
		},
	} {
		t.Run(kind, func(t *testing.T) {
			key := "resource:" + strings.ReplaceAll(kind, " ", "-")
			require.NoError(t, put(key))
			dump, pttl, keys := rdb.Dump(ctx, key).Val(), rdb.PTTL(ctx, key).Val(), rdb.DBSize(ctx).Val()
			err := redislock.SetFenced(ctx, rdb, key, "new value", 7)
			require.Error(t, err)
			assert.ErrorIs(t, err, redislock.ErrWrongKind)
			assert.NotErrorIs(t, err, redislock.ErrFenceRejected)
			msg := err.Error()
			assert.Contains(t, msg, strconv.Quote(key), "the key is not named")
			assert.Contains(t, msg, "another kind")
			assert.NotContains(t, strings.ToLower(msg), "script")
			assert.NotRegexp(t, sha, msg)
			for _, lua := range []string{"redis.call", "HGET", "tonumber", "@user", "stack traceback"} {
				assert.NotContains(t, msg, lua)
			}
			assert.Equal(t, dump, rdb.Dump(ctx, key).Val(), "the value changed")
			assert.InDelta(t, pttl, rdb.PTTL(ctx, key).Val(), float64(time.Second), "the expiry changed")
			assert.Equal(t, keys, rdb.DBSize(ctx).Val(), "a key was written")
		})
	}
}

// On a key whose hash slot no other key uses, fences have no gaps: every
// fence the counter issues goes to an acquisition that returns it. Here 4
// Lockers of 3 goroutines each contend for 2 s through the line
// (hand-offs between the Lockers' places, passes within a Locker, and now
// and then an attempt that finds the key handed to its own place): the
// fences, sorted, are 1, 2, 3, ..., each the previous + 1, and the counter
// (Info.Fence) is the last of them. (A lease that runs out before the
// next waiter gets the key: TestFencing_NextFenceAfterAnExpiry.)
func TestFencing_ConsecutiveOnOneKey(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	checker, _ := b.client(t)
	const lockers, workers, run = 4, 3, 2 * time.Second
	stop := time.Now().Add(run)
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	for range lockers {
		locker := redislock.New(b.mustClient(t), redislock.WithFencing())
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					lk, err := locker.Obtain(ctx, "k", 5*time.Second) // no deadline before ctx's: nobody gives up
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					fences = append(fences, lk.Fence())
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					if !assert.NoError(t, lk.Release(ctx)) {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	slices.Sort(fences)
	t.Logf("%d fences", len(fences))
	require.Greater(t, len(fences), 100, "too little contention to prove anything")
	assert.Equal(t, int64(1), fences[0], "the first fence of a new counter")
	var gaps []string
	for i := 1; i < len(fences); i++ {
		if fences[i] != fences[i-1]+1 {
			gaps = append(gaps, fmt.Sprintf("%d then %d", fences[i-1], fences[i]))
		}
	}
	assert.Empty(t, gaps, "%d of %d fences are not the previous + 1", len(gaps), len(fences))
	info, err := redislock.New(checker).Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, fences[len(fences)-1], info.Fence, "fences were issued that no acquisition returned")
}

// A waiter that gets the key when its holder's lease runs out (it waits
// in line, and its attempt at the expiry hands the key to its own place)
// gets the next fence: the holder's + 1, each of 5 times.
func TestFencing_NextFenceAfterAnExpiry(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	checker, _ := b.client(t)
	holder := redislock.New(b.mustClient(t), redislock.WithFencing())
	waiter := redislock.New(b.mustClient(t), redislock.WithFencing())
	for range 5 {
		lk, err := holder.Obtain(ctx, "k", 400*time.Millisecond)
		require.NoError(t, err)
		w := obtainAsync(ctx, waiter, "k", time.Minute)
		waitQueued(t, checker, "k", 1)
		require.True(t, time.Now().Before(lk.Until()), "the waiter lined up after the lease ran out")
		r := <-w // when lk's lease runs out
		require.NoError(t, r.err)
		assert.Equal(t, lk.Fence()+1, r.lock.Fence())
		require.NoError(t, r.lock.Release(ctx))
	}
}
