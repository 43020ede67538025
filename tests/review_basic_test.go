package tests

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Specifies (reentrant.go, "A context that carries a lock that is lost
// joins nothing: the nested call returns an error wrapping ErrLockLost at
// once"): the context WithLock gives fn carries its lock; once that lock is
// lost (an intruder overwrote the key, a renewal found it), a nested
// Obtain, TryObtain, WithLock or ObtainMulti of the key with fn's own
// context returns an error wrapping ErrLockLost.
func TestReview_NestedCallOnFnContextAfterLossWrapsErrLockLost(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	other := b.mustClient(t)
	locker := redislock.New(rdb)
	err := locker.WithLock(ctx, "k", func(fctx context.Context) error {
		require.NoError(t, other.Set(ctx, "k", "intruder", time.Minute).Err())
		select {
		case <-fctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the loss was not found")
		}
		require.ErrorIs(t, context.Cause(fctx), redislock.ErrLockLost)
		_, err := locker.Obtain(fctx, "k", time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "Obtain: %v", err)
		_, err = locker.TryObtain(fctx, "k", time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "TryObtain: %v", err)
		err = locker.WithLock(fctx, "k", func(context.Context) error { return nil })
		assert.ErrorIs(t, err, redislock.ErrLockLost, "WithLock: %v", err)
		_, err = locker.ObtainMulti(fctx, []string{"k", "k2"}, time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "ObtainMulti: %v", err)
		return nil
	}, redislock.WithTTL(300*time.Millisecond))
	require.ErrorIs(t, err, redislock.ErrLockLost)
	require.NoError(t, locker.Shutdown(ctx))
}

// Specifies ObtainMulti's doc ("keys must be 1 to MaxKeys distinct valid
// keys; WithPermits does not apply (ErrInvalidOption), nor does a quorum
// Locker"): also a set of one key is refused with ErrInvalidOption with
// WithPermits, and on a quorum Locker, with nothing sent.
func TestReview_OneKeySetRefusesPermitsAndQuorum(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	locker := redislock.New(rdb)
	quorum := redislock.NewQuorum([]redis.UniversalClient{rdb})
	before := n.Load()
	lk, err := locker.ObtainMulti(ctx, []string{"a"}, time.Minute, redislock.WithPermits(2))
	assert.ErrorIs(t, err, redislock.ErrInvalidOption, "WithPermits on a one-key set")
	if lk != nil {
		_ = lk.Release(ctx)
	}
	lk, err = quorum.TryObtainMulti(ctx, []string{"q"}, time.Second)
	assert.ErrorIs(t, err, redislock.ErrInvalidOption, "a one-key set on a quorum Locker")
	if lk != nil {
		_ = lk.Release(ctx)
	}
	assert.Equal(t, before, n.Load(), "commands sent")
}

// handOffRec records HandOff events.
type handOffRec struct {
	mu sync.Mutex
	hs []redislock.HandOffEvent
}

func (r *handOffRec) hooks() redislock.Hooks {
	return redislock.Hooks{HandOff: func(_ context.Context, e redislock.HandOffEvent) {
		r.mu.Lock()
		r.hs = append(r.hs, e)
		r.mu.Unlock()
	}}
}

func (r *handOffRec) all() []redislock.HandOffEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]redislock.HandOffEvent(nil), r.hs...)
}

// Specifies the fairness of docs/how-it-works.md ("Waiting": Lockers take
// turns in the order they took their places; "Passes, bounded": a Locker
// that holds a key passes it to its own waiters for a round of at most 16
// passes and 10 ms, a plain lock's round starting when it was taken):
// Locker A holds a plain lock; a waiter of another Locker (C) takes its
// place in the key's line first, then a second Obtain of A's Locker (B)
// queues behind it. A Release more than 10 ms after A's Obtain gives the
// key to C, never to B; one within the round may pass it to B (a local
// hand-off), and then C is next.
func TestReview_PlainLockPassOvertakesOtherProcess(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb, _ := b.client(t)
	crdb, _ := b.client(t)
	checker := b.mustClient(t)
	overtaken, late := 0, 0
	for i := 0; i < 20; i++ {
		var rec handOffRec
		la := redislock.New(rdb, redislock.WithHooks(rec.hooks()))
		lc := redislock.New(crdb)
		key := "fair" + time.Now().Format("150405.000000")
		a, err := la.Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		start := time.Now()
		cch := obtainAsync(ctx, lc, key, time.Minute)
		for len(queued(t, checker, key)) < 1 {
		}
		bch := obtainAsync(ctx, la, key, time.Minute)
		for len(queued(t, checker, key)) < 2 {
		}
		if i%2 == 1 {
			time.Sleep(15 * time.Millisecond) // past the round
		}
		took := time.Since(start)
		require.NoError(t, a.Release(ctx))
		var first obtained
		var firstIsB bool
		select {
		case first = <-cch:
		case first = <-bch:
			firstIsB = true
		}
		require.NoError(t, first.err)
		if took > 10*time.Millisecond {
			late++
			assert.False(t, firstIsB, "round %d: released %v after the Obtain, past the round: B overtook C", i, took)
		} else if firstIsB {
			overtaken++
			hs := rec.all()
			require.NotEmpty(t, hs)
			assert.True(t, hs[0].Local, "a pass within the round is local: %+v", hs)
		}
		require.NoError(t, first.lock.Release(ctx))
		var second obtained
		if firstIsB {
			second = <-cch // C is next: B's release goes through Redis, whatever the round
		} else {
			second = <-bch
		}
		require.NoError(t, second.err)
		require.NoError(t, second.lock.Release(ctx))
		require.NoError(t, la.Shutdown(ctx))
		require.NoError(t, lc.Shutdown(ctx))
	}
	t.Logf("%d releases past the round; %d passes within it", late, overtaken)
	assert.Positive(t, late)
}

// Specifies docs/lock-family.md ("Losing any key is losing the lock: the
// kept context ends with ErrLockLost, and Release returns ErrNotHeld naming
// the keys that were lost (it releases the others)"): also when the loss
// was found by KeepAlive, the Release that follows names the lost key.
func TestReview_SetReleaseAfterKeptLossNamesLostKey(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	lk, err := locker.ObtainMulti(ctx, []string{"s:1", "s:2", "s:3"}, 300*time.Millisecond)
	require.NoError(t, err)
	kept := lk.KeepAlive(ctx)
	require.NoError(t, rdb.Set(ctx, "s:2", "intruder", time.Minute).Err())
	select {
	case <-kept.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the kept context outlived a lost key")
	}
	time.Sleep(100 * time.Millisecond) // KeepAlive's give-back runs first
	err = lk.Release(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), `"s:2"`, "Release's error: %v", err)
	require.NoError(t, locker.Shutdown(ctx))
	assert.Equal(t, "intruder", rdb.Get(ctx, "s:2").Val())
	assert.Zero(t, rdb.Exists(ctx, "s:1", "s:3").Val())
}
