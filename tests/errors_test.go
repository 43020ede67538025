package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Error texts quote the key cut to 64 bytes: every error that names a key
// (not obtained, by another owner or by the caller's own Locker, after a
// wait or not; another kind of data; Redis failing an acquire, a wait, a
// release, a Refresh, a TTL, an Inspect, a renewal or SetFenced's write;
// a release going on in the background; a fence rejected; a side key's
// name; a lock lost, as the Lost hook's error and as the error of a call
// whose ctx carries the lost lock) quotes its first 64 bytes, followed by
// "... (N bytes)", N the key's length, and nothing after those 64 bytes:
// a 1 MiB key makes an error of a few hundred bytes.
func TestErrors_KeysCutTo64Bytes(t *testing.T) {
	head := strings.Repeat("0123456789abcdef", 4)
	key := head + "<after 64 bytes>" + strings.Repeat("z", 1000)
	side := head + "}:rl1:" + strings.Repeat("z", 1000) // the name of a key the library keeps beside locks
	quoted := func(key string) string { return strconv.Quote(key[:64]) + fmt.Sprintf("... (%d bytes)", len(key)) }
	check := func(t *testing.T, key string, err error) {
		t.Helper()
		require.Error(t, err)
		msg := err.Error()
		assert.Contains(t, msg, quoted(key))
		assert.NotContains(t, msg, key[64:80], "more than 64 bytes of the key")
		assert.Less(t, len(msg), 500, "%d bytes of error", len(msg))
	}
	b := miniBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	closed, _ := b.client(t)
	require.NoError(t, closed.Close())
	locker := redislock.New(rdb)
	held, err := locker.Obtain(ctx, key, time.Minute)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	require.NoError(t, ln.Close()) // nothing listens there any more

	t.Run("not obtained", func(t *testing.T) {
		_, err := redislock.New(b.mustClient(t)).TryObtain(ctx, key, time.Minute)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		check(t, key, err)
	})
	t.Run("not obtained, a 1 MiB key", func(t *testing.T) {
		huge := head + "<after 64 bytes>" + strings.Repeat("z", 1<<20)
		_, err := locker.TryObtain(ctx, huge, time.Minute)
		require.NoError(t, err)
		_, err = redislock.New(b.mustClient(t)).TryObtain(ctx, huge, time.Minute)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		check(t, huge, err)
	})
	t.Run("not obtained: this Locker holds it", func(t *testing.T) {
		_, err := locker.TryObtain(ctx, key, time.Minute)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		check(t, key, err)
	})
	t.Run("not obtained after a wait", func(t *testing.T) {
		_, err := redislock.New(b.mustClient(t)).Obtain(ctx, key, time.Minute, redislock.WithWait(200*time.Millisecond))
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		check(t, key, err)
	})
	t.Run("another kind of data", func(t *testing.T) {
		other := head + "<after 64 bytes> hash"
		require.NoError(t, rdb.HSet(ctx, other, "f", "v").Err())
		_, err := locker.TryObtain(ctx, other, time.Minute)
		assert.ErrorIs(t, err, redislock.ErrWrongKind)
		check(t, other, err)
	})
	t.Run("Redis failed an acquire", func(t *testing.T) {
		_, err := redislock.New(closed).TryObtain(ctx, key, time.Minute)
		assert.ErrorIs(t, err, redis.ErrClosed)
		check(t, key, err)
	})
	t.Run("a wait whose attempts failed", func(t *testing.T) {
		_, err := redislock.New(down).Obtain(ctx, key, time.Minute, redislock.WithWait(100*time.Millisecond))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, redislock.ErrNotObtained)
		check(t, key, err)
	})
	t.Run("a side key's name", func(t *testing.T) {
		_, err := locker.TryObtain(ctx, side, time.Minute)
		assert.ErrorIs(t, err, redislock.ErrInvalidKey)
		check(t, side, err)
	})
	t.Run("fence rejected", func(t *testing.T) {
		err := redislock.SetFenced(ctx, rdb, key+":x", "v", 2)
		require.NoError(t, err)
		err = redislock.SetFenced(ctx, rdb, key+":x", "v", 1)
		assert.ErrorIs(t, err, redislock.ErrFenceRejected)
		check(t, key+":x", err)
	})
	t.Run("Redis failed SetFenced's write", func(t *testing.T) {
		check(t, key, redislock.SetFenced(ctx, closed, key, "v", 1))
	})
	t.Run("Redis failed an Inspect", func(t *testing.T) {
		_, err := redislock.New(closed).Inspect(ctx, key)
		check(t, key, err)
	})

	// Calls on a lock whose client is then closed.
	c, _ := b.client(t)
	rec := &recorder{}
	failing := redislock.New(c, redislock.WithHooks(rec.hooks()))
	lk, err := failing.Obtain(ctx, head+"<after 64 bytes> 2", time.Minute)
	require.NoError(t, err)
	k2 := lk.Key()
	require.NoError(t, c.Close())
	t.Run("Redis failed a Refresh", func(t *testing.T) {
		check(t, k2, lk.Refresh(ctx, time.Minute))
	})
	t.Run("Redis failed a TTL", func(t *testing.T) {
		_, err := lk.TTL(ctx)
		check(t, k2, err)
	})
	t.Run("Redis failed a release", func(t *testing.T) {
		check(t, k2, lk.Release(ctx))
	})
	t.Run("a release in the background", func(t *testing.T) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		err := held.Release(done)
		assert.ErrorContains(t, err, "goes on in the background")
		check(t, key, err)
		require.NoError(t, locker.Shutdown(ctx))
	})
	t.Run("a renewal failed, the lock lost", func(t *testing.T) {
		c, _ := b.client(t)
		rec := &recorder{}
		k3 := head + "<after 64 bytes> 3"
		lk, err := redislock.New(c, redislock.WithHooks(rec.hooks())).Obtain(ctx, k3, 300*time.Millisecond)
		require.NoError(t, err)
		kept := lk.KeepAlive(ctx)
		require.NoError(t, c.Close())
		<-kept.Done()
		assert.ErrorIs(t, context.Cause(kept), redislock.ErrLockLost)
		var s recorder
		require.Eventually(t, func() bool { s = rec.snapshot(); return len(s.losses) > 0 }, time.Second, time.Millisecond)
		check(t, k3, s.losses[0].Err)
		require.NotEmpty(t, s.renewals)
		check(t, k3, s.renewals[0].Err)
	})
	t.Run("a lock found gone", func(t *testing.T) {
		k4 := head + "<after 64 bytes> 4"
		rec := &recorder{}
		locker := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
		lk, err := locker.Obtain(ctx, k4, time.Minute)
		require.NoError(t, err)
		require.NoError(t, rdb.Del(ctx, k4).Err())
		require.ErrorIs(t, lk.Refresh(ctx, time.Minute), redislock.ErrNotHeld)
		var s recorder
		require.Eventually(t, func() bool { s = rec.snapshot(); return len(s.losses) > 0 }, time.Second, time.Millisecond)
		check(t, k4, s.losses[0].Err)
		_, err = locker.Obtain(lk.Context(ctx), k4, time.Minute)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "a nested Obtain of a lost lock")
		check(t, k4, err)
	})
}

// Specifies the error texts of sets (Obtain's doc, errors.go): a key of the
// set that holds data this library did not write (a list) fails
// ObtainMulti and TryObtainMulti with ErrWrongKind, at once, never with
// ErrNotObtained or "held by another owner", also when another key of the
// set is held by another owner; a set whose key is held until the deadline
// wraps ErrNotObtained and context.DeadlineExceeded; a frozen Redis is not
// ErrNotObtained, and the deadline's error stays in the chain.
func TestErrors_SetTexts(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	other := b.mustClient(t)
	locker := redislock.New(rdb)
	require.NoError(t, other.RPush(ctx, "e:list", "x").Err())
	held, err := redislock.New(other).Obtain(ctx, "e:held", time.Minute)
	require.NoError(t, err)

	for _, keys := range [][]string{{"e:a", "e:list"}, {"e:held", "e:list"}, {"e:list", "e:held"}} {
		for name, obtain := range map[string]func(context.Context, []string, time.Duration, ...redislock.Option) (*redislock.Lock, error){
			"ObtainMulti": locker.ObtainMulti, "TryObtainMulti": locker.TryObtainMulti,
		} {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			start := time.Now()
			lk, err := obtain(cctx, keys, time.Minute)
			took := time.Since(start)
			cancel()
			if lk != nil {
				_ = lk.Release(ctx)
			}
			assert.ErrorIs(t, err, redislock.ErrWrongKind, "%s %v: %v", name, keys, err)
			assert.NotErrorIs(t, err, redislock.ErrNotObtained, "%s %v: %v", name, keys, err)
			if err != nil {
				assert.NotContains(t, err.Error(), "held by another owner", "%s %v", name, keys)
			}
			assert.Less(t, took, 500*time.Millisecond, "%s %v waited", name, keys)
		}
	}
	assert.Zero(t, other.Exists(ctx, "e:a").Val(), "a key of a failed set left held")

	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = locker.ObtainMulti(cctx, []string{"e:a", "e:held"}, time.Minute)
	cancel()
	assert.ErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, held.Release(ctx))
	b.srv.Freeze(t)
	for name, obtain := range map[string]func(context.Context, []string, time.Duration, ...redislock.Option) (*redislock.Lock, error){
		"ObtainMulti": locker.ObtainMulti, "TryObtainMulti": locker.TryObtainMulti,
	} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		lk, err := obtain(cctx, []string{"e:a", "e:b"}, time.Minute)
		cancel()
		assert.Nil(t, lk)
		assert.Error(t, err, name)
		assert.NotErrorIs(t, err, redislock.ErrNotObtained, "%s on a frozen Redis: %v", name, err)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%s on a frozen Redis: %v", name, err)
		if err != nil {
			assert.NotContains(t, err.Error(), "another owner", name)
		}
	}
	b.srv.Thaw(t)
	require.NoError(t, locker.Shutdown(ctxT(t, 15*time.Second)))
	assert.Zero(t, other.Exists(ctx, "e:a", "e:b").Val(), "a key of a failed set left held")
}
