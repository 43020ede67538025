package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Inspect reports, in one round trip and without writing, who holds a key
// of each mode (the holder's token and description, and its lease as Redis
// sees it), the latest fence and the places in line; a free key is
// reported as such.
func TestInspect(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, n := b.client(t)
		checker, _ := b.client(t)
		locker := redislock.New(rdb, redislock.WithHolder("billing job 7"))

		info, err := locker.Inspect(ctx, "free")
		require.NoError(t, err)
		assert.Equal(t, redislock.Info{Key: "free"}, info)

		lk, err := locker.Obtain(ctx, "x", time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		waiter, _ := b.client(t)
		w := obtainAsync(ctx, redislock.New(waiter), "x", time.Minute)
		waitQueued(t, checker, "x", 1)
		before := n.Load()
		info, err = locker.Inspect(ctx, "x")
		require.NoError(t, err)
		assert.Equal(t, int64(1), n.Load()-before, "one round trip")
		assert.Equal(t, redislock.ModeExclusive, info.Mode)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, lk.Token(), info.Holders[0].Token)
		assert.Equal(t, "billing job 7", info.Holders[0].Description)
		assert.InDelta(t, time.Minute, info.Holders[0].TTL, float64(time.Second))
		assert.Equal(t, lk.Fence(), info.Fence)
		assert.Equal(t, 1, info.Waiting)
		require.NoError(t, lk.Release(ctx))
		r := <-w
		require.NoError(t, r.err)
		require.NoError(t, r.lock.Release(ctx))

		var readers []*redislock.Lock
		for range 2 {
			lk, err := locker.Obtain(ctx, "rw", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			readers = append(readers, lk)
		}
		info, err = locker.Inspect(ctx, "rw")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeShared, info.Mode)
		assert.Len(t, info.Holders, 2)

		permit, err := locker.Obtain(ctx, "sem", time.Minute, redislock.WithPermits(3))
		require.NoError(t, err)
		info, err = locker.Inspect(ctx, "sem")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeSemaphore, info.Mode)
		assert.Equal(t, 3, info.Permits)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, permit.Token(), info.Holders[0].Token)

		for _, lk := range append(readers, permit) {
			require.NoError(t, lk.Release(ctx))
		}

		require.NoError(t, checker.RPush(ctx, "list", "a").Err())
		info, err = locker.Inspect(ctx, "list")
		require.NoError(t, err)
		assert.Equal(t, redislock.Info{Key: "list", Mode: redislock.ModeOther}, info, "data of another kind: not free")
		require.NoError(t, checker.Del(ctx, "list").Err())
		require.NoError(t, checker.Del(ctx, fenceKey("x")).Err()) // fence counters stay
		requireOnlyMarks(t, checker)
	})
}

// WithHolder's description is what Inspect reports; without WithHolder,
// or with WithHolder(""), none is stored; bad input (not UTF-8, control or
// format characters such as a newline, a tab, an escape or a direction
// override, more than 200 bytes) is refused before any I/O.
func TestInspect_HolderDescription(t *testing.T) {
	b := miniBackend(t)
	rdb, n := b.client(t)
	ctx := context.Background()
	lk, err := redislock.New(rdb, redislock.WithHolder("web-3 pid 4711")).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	info, err := redislock.New(rdb).Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "web-3 pid 4711", info.Holders[0].Description)
	require.NoError(t, lk.Release(ctx))
	lk, err = redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), rdb.DBSize(ctx).Val(), "the lock key alone: no description stored")
	require.NoError(t, lk.Release(ctx))

	lk, err = redislock.New(rdb, redislock.WithHolder("")).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Zero(t, rdb.Exists(ctx, sideKey("k", "holders")).Val(), "no description stored")
	info, err = redislock.New(rdb).Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Empty(t, info.Holders[0].Description)
	require.NoError(t, lk.Release(ctx))

	before := n.Load()
	for _, bad := range []string{string([]byte{0xff}), "two\nlines", "a \x1b[31m red", "tab\there", "rlo \u202e", strings.Repeat("x", 201)} {
		_, err = redislock.New(rdb, redislock.WithHolder(bad)).Obtain(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, redislock.ErrInvalidOption, "%q", bad)
	}
	_, err = redislock.New(rdb).Inspect(ctx, "")
	assert.ErrorIs(t, err, redislock.ErrInvalidKey)
	assert.Equal(t, before, n.Load(), "nothing sent")
}

// Inspect is one round trip; the first after Redis lost its scripts
// (SCRIPT FLUSH, a restart) is two: go-redis sends the script in full once.
func TestInspect_RoundTrips(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, sent := b.client(t)
	locker := redislock.New(rdb)
	lk, err := locker.Obtain(ctx, "x", time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	for _, want := range []int64{2, 1} {
		before := sent.Load()
		info, err := locker.Inspect(ctx, "x")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeExclusive, info.Mode)
		assert.Equal(t, want, sent.Load()-before)
	}
	require.NoError(t, lk.Release(ctx))
}
