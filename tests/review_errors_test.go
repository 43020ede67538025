package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Specifies the error texts of sets (Obtain's doc, errors.go): a key of the
// set that holds data this library did not write (a list) fails
// ObtainMulti and TryObtainMulti with ErrWrongKind, at once, never with
// ErrNotObtained or "held by another owner", also when another key of the
// set is held by another owner; a set whose key is held until the deadline
// wraps ErrNotObtained and context.DeadlineExceeded; a frozen Redis is not
// ErrNotObtained, and the deadline's error stays in the chain.
func TestReview_SetErrorTexts(t *testing.T) {
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
