package tests

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// slotOrdered returns keys sorted by their Cluster hash slot (the order in
// which a set across slots takes them), failing t unless they are in
// distinct slots.
func slotOrdered(t *testing.T, cc *redis.ClusterClient, keys []string) []string {
	t.Helper()
	slots := map[string]int64{}
	for _, k := range keys {
		slots[k] = cc.ClusterKeySlot(context.Background(), k).Val()
	}
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b string) int { return int(slots[a] - slots[b]) })
	for i := 1; i < len(out); i++ {
		require.NotEqual(t, slots[out[i-1]], slots[out[i]], "keys in distinct slots")
	}
	return out
}

// TestReview_ClusterSets attacks sets across Cluster slots.
func TestReview_ClusterSets(t *testing.T) {
	cluster := redistest.StartCluster(t)
	rdb, other := cluster.Client(t), cluster.Client(t)
	ctx := ctxT(t, 90*time.Second)

	// Specifies docs/lock-family.md ("While such a call waits for a later
	// slot, the keys of the earlier slots are held ... if it fails or
	// gives up, they are given back before it returns"): an ObtainMulti
	// across slots that gives up at its deadline, and a TryObtainMulti
	// that finds the last slot's key held, return with none of the
	// earlier slots' keys held.
	for _, lag := range []time.Duration{0, 30 * time.Millisecond} {
		t.Run("GiveUpGivesBackBeforeReturning/lag="+lag.String(), func(t *testing.T) {
			keys := slotOrdered(t, rdb, []string{"ga", "gb", "gc"})
			last := keys[len(keys)-1]
			competitor := redislock.New(other)
			held, err := competitor.Obtain(ctx, last, time.Minute)
			require.NoError(t, err)
			// The locker's client is on a link whose writes are lag late
			// (a WAN), the checker's is not.
			slow := &slowConns{lag: lag}
			locker := redislock.New(cluster.Client(t, func(o *redis.ClusterOptions) { o.Dialer = slow.dial }))
			stillHeld := 0
			for i := 0; i < 10; i++ {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				start := time.Now()
				_, err = locker.ObtainMulti(cctx, keys, time.Minute)
				cancel()
				assert.ErrorIs(t, err, redislock.ErrNotObtained, "after %v", time.Since(start))
				if n := existing(t, other, keys[:len(keys)-1]); n > 0 {
					stillHeld++
					ret := time.Now()
					for existing(t, other, keys[:len(keys)-1]) > 0 && time.Since(ret) < 5*time.Second {
						time.Sleep(time.Millisecond)
					}
					t.Logf("ObtainMulti returned with %d earlier keys held; freed %v later", n, time.Since(ret))
				}
				_, err = locker.TryObtainMulti(ctx, keys, time.Minute)
				assert.ErrorIs(t, err, redislock.ErrNotObtained)
				if n := existing(t, other, keys[:len(keys)-1]); n > 0 {
					stillHeld++
				}
			}
			assert.Zero(t, stillHeld, "of 20 calls that gave up, this many returned with an earlier slot's key still held")
			require.NoError(t, held.Release(ctx))
			require.NoError(t, locker.Shutdown(ctx))
			for _, k := range keys {
				requireOnlyMarksOf(t, rdb, k, "fence")
			}
		})
	}

	// Specifies Lock.Until for a set across slots: while kept, and after
	// Refresh, Until is never later than any key's expiry in Redis; a
	// nested one-key call on a key of the set joins it with no acquire
	// sent; FromContext in WithLockMulti gives the lock; fences per key
	// grow across holders.
	t.Run("UntilJoinFencesAcross", func(t *testing.T) {
		keys := slotOrdered(t, rdb, []string{"ua", "ub", "uc"})
		locker := redislock.New(rdb)
		var prev []int64
		for round := 0; round < 3; round++ {
			err := locker.WithLockMulti(ctx, keys, func(fctx context.Context) error {
				lk := redislock.FromContext(fctx)
				require.NotNil(t, lk)
				require.Equal(t, keys, lk.Keys())
				f := lk.Fences()
				for i := range f {
					require.Positive(t, f[i], "fence of %s", keys[i])
					if prev != nil {
						assert.Greater(t, f[i], prev[i], "fence of %s grows", keys[i])
					}
				}
				prev = f
				for i := 0; i < 5; i++ {
					u := lk.Until()
					for _, k := range keys {
						left := other.PTTL(ctx, k).Val()
						assert.LessOrEqual(t, time.Until(u), left+5*time.Millisecond, "Until after %s's expiry", k)
					}
					time.Sleep(70 * time.Millisecond)
				}
				require.NoError(t, lk.Refresh(fctx, 150*time.Millisecond))
				u := lk.Until()
				for _, k := range keys {
					left := other.PTTL(ctx, k).Val()
					assert.LessOrEqual(t, time.Until(u), left+5*time.Millisecond, "Until after %s's expiry (after a shorter Refresh)", k)
				}
				inner, err := locker.Obtain(fctx, keys[1], time.Second)
				require.NoError(t, err)
				assert.Equal(t, lk.FenceOf(keys[1]), inner.Fence())
				require.NoError(t, inner.Release(ctx))
				return nil
			}, redislock.WithTTL(300*time.Millisecond), redislock.WithFencing())
			require.NoError(t, err)
		}
		require.NoError(t, locker.Shutdown(ctx))
		for _, k := range keys {
			requireOnlyMarksOf(t, rdb, k, "fence")
		}
	})

	// Specifies losing one key of a set across slots: the kept context
	// ends with ErrLockLost; Until is then no later than the moment of the
	// loss; a nested call joins nothing (ErrLockLost); Release returns
	// ErrNotHeld naming the lost key and frees the others; the intruder's
	// value is untouched.
	t.Run("LostPartAcross", func(t *testing.T) {
		keys := slotOrdered(t, rdb, []string{"la", "lb", "lc"})
		locker := redislock.New(rdb)
		lk, err := locker.ObtainMulti(ctx, keys, 300*time.Millisecond)
		require.NoError(t, err)
		kept := lk.KeepAlive(ctx)
		require.NoError(t, other.Set(ctx, keys[1], "intruder", time.Minute).Err())
		select {
		case <-kept.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the loss of a part was not found")
		}
		lostAt := time.Now()
		assert.ErrorIs(t, context.Cause(kept), redislock.ErrLockLost)
		assert.False(t, lk.Until().After(lostAt), "Until after the loss was found")
		_, err = locker.Obtain(lk.Context(context.Background()), keys[0], time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "a nested call joined a lost set")
		time.Sleep(100 * time.Millisecond)
		err = lk.Release(ctx)
		assert.ErrorIs(t, err, redislock.ErrNotHeld)
		if err != nil {
			assert.Contains(t, err.Error(), keys[1])
		}
		assert.Equal(t, "intruder", other.Get(ctx, keys[1]).Val())
		assert.Zero(t, existing(t, other, []string{keys[0], keys[2]}), "other keys freed")
		require.NoError(t, other.Del(ctx, keys[1]).Err())
		require.NoError(t, locker.Shutdown(ctx))
	})

	// Specifies a set across slots racing one-key callers and an
	// overlapping set in another order: every call finishes (no deadlock),
	// and no key is ever held by two (each holder checks the key holds its
	// token at the end of its critical section).
	t.Run("NoDeadlockAcross", func(t *testing.T) {
		keys := slotOrdered(t, rdb, []string{"da", "db", "dc", "dd"})
		var errs = make(chan error, 100)
		done := make(chan struct{})
		var n int
		run := func(set []string) {
			n++
			go func() {
				l := redislock.New(cluster.Client(t))
				for i := 0; i < 10; i++ {
					err := l.WithLockMulti(ctx, set, func(fctx context.Context) error {
						lk := redislock.FromContext(fctx)
						time.Sleep(2 * time.Millisecond)
						for _, k := range set {
							if v := other.Get(ctx, k).Val(); v == "" {
								return errors.New("key " + k + " not held in the critical section")
							}
						}
						_ = lk
						return nil
					}, redislock.WithTTL(2*time.Second))
					if err != nil {
						errs <- err
					}
				}
				_ = l.Shutdown(ctx)
				done <- struct{}{}
			}()
		}
		run(keys)
		run([]string{keys[3], keys[0]})
		run([]string{keys[2], keys[1], keys[0]})
		run([]string{keys[1]})
		run([]string{keys[3]})
		timeout := time.After(40 * time.Second)
		for i := 0; i < n; i++ {
			select {
			case <-done:
			case <-timeout:
				t.Fatal("deadlock: calls did not finish")
			}
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, k := range keys {
			requireOnlyMarksOf(t, rdb, k, "fence")
		}
	})
}

// existing counts the keys of keys that exist (one EXISTS per key: they
// may be in different slots).
func existing(t *testing.T, rdb redis.UniversalClient, keys []string) int {
	t.Helper()
	n := 0
	for _, k := range keys {
		v, err := rdb.Exists(context.Background(), k).Result()
		require.NoError(t, err)
		n += int(v)
	}
	return n
}
