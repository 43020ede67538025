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

// Resume holds again, from another Locker (another process or host), the
// lock a token holds: with the same token, a lease of its own ttl, a fence
// higher than the first holder's (whose writes SetFenced then refuses),
// and Release, Refresh, TTL and KeepAlive working as for a lock it took;
// its Release hands the key to the next in line.
func TestResume_HoldsTheLockAgain(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	ca, _ := b.client(t)
	cb, _ := b.client(t)
	first, err := redislock.New(ca, redislock.WithFencing()).Obtain(ctx, "job:7", time.Minute)
	require.NoError(t, err)
	require.NoError(t, redislock.SetFenced(ctx, ca, "job:7:state", "started", first.Fence()))

	lb := redislock.New(cb)
	lk, err := lb.Resume(ctx, []string{"job:7"}, first.Token(), 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, first.Token(), lk.Token())
	assert.Equal(t, "job:7", lk.Key())
	assert.Greater(t, lk.Fence(), first.Fence(), "a new fence")
	left, err := lk.TTL(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 2*time.Second, left, float64(100*time.Millisecond), "the lease is the resumed lock's ttl")
	assert.WithinDuration(t, time.Now().Add(2*time.Second), lk.Until(), 200*time.Millisecond)

	require.NoError(t, redislock.SetFenced(ctx, cb, "job:7:state", "done", lk.Fence()))
	assert.ErrorIs(t, redislock.SetFenced(ctx, ca, "job:7:state", "late", first.Fence()), redislock.ErrFenceRejected, "the first holder's writes are refused")

	kept := lk.KeepAlive(ctx)
	time.Sleep(2500 * time.Millisecond) // past the 2 s lease: renewed
	require.NoError(t, kept.Err())
	require.NoError(t, lk.Refresh(ctx, time.Minute))

	waiter := obtainAsync(ctx, redislock.New(ca), "job:7", time.Minute)
	waitQueued(t, ca, "job:7", 1)
	require.NoError(t, lk.Release(ctx))
	r := <-waiter
	require.NoError(t, r.err, "the release handed the key to the next in line")
	require.NoError(t, r.lock.Release(ctx))
	require.NoError(t, lb.Shutdown(ctx))
}

// A token that does not hold a key is ErrNotHeld naming the key, and
// nothing changes; bad input (no key, a ttl under 1 ms, a string that is
// no token of this library) is refused before anything is sent.
func TestResume_NotHeldChangesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, n := b.client(t)
		l := redislock.New(rdb)
		lk, err := l.Obtain(ctx, "a", time.Minute)
		require.NoError(t, err)
		other, err := l.Obtain(ctx, "b", time.Minute)
		require.NoError(t, err)
		_, err = l.Resume(ctx, []string{"a", "b"}, lk.Token(), time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotHeld)
		assert.Contains(t, err.Error(), `"b"`)
		assert.Equal(t, other.Token(), rdb.Get(ctx, "b").Val(), "b untouched")
		left, err := lk.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, left, 50*time.Second, "a's lease untouched")

		before := n.Load()
		_, err = l.Resume(ctx, nil, lk.Token(), time.Minute)
		assert.ErrorIs(t, err, redislock.ErrInvalidKey)
		_, err = l.Resume(ctx, []string{"a"}, lk.Token(), 0)
		assert.ErrorIs(t, err, redislock.ErrInvalidTTL)
		_, err = l.Resume(ctx, []string{"a"}, "not a token", time.Minute)
		assert.ErrorIs(t, err, redislock.ErrInvalidOption)
		assert.Equal(t, before, n.Load(), "nothing sent")
		require.NoError(t, lk.Release(ctx))
		require.NoError(t, other.Release(ctx))
	})
}

// A reader's lock and a set are resumed as they are held: a reader stays a
// reader (another reader shares the key), and a set's keys are all held
// and released together; the set's fences are new, one per key.
func TestResume_ReadersAndSets(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	l := redislock.New(rdb)
	reader, err := l.Obtain(ctx, "doc", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	again, err := redislock.New(rdb).Resume(ctx, []string{"doc"}, reader.Token(), time.Minute)
	require.NoError(t, err)
	other, err := l.TryObtain(ctx, "doc", time.Minute, redislock.WithShared())
	require.NoError(t, err, "still a reader's lock: another reader shares it")
	require.NoError(t, other.Release(ctx))
	require.NoError(t, again.Release(ctx))
	info, err := l.Inspect(ctx, "doc")
	require.NoError(t, err)
	assert.Equal(t, redislock.ModeFree, info.Mode)

	set, err := l.ObtainMulti(ctx, []string{"x", "y"}, time.Minute)
	require.NoError(t, err)
	lk, err := redislock.New(rdb).Resume(ctx, []string{"x", "y"}, set.Token(), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "y"}, lk.Keys())
	assert.Positive(t, lk.FenceOf("y"))
	require.NoError(t, lk.Release(ctx))
	assert.Zero(t, rdb.Exists(ctx, "x", "y").Val())
}

// A quorum lock is resumed when its token holds the key on a majority of
// the masters.
func TestResume_Quorum(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	var clients []redis.UniversalClient
	for range 3 {
		c, _ := realBackend(t).client(t)
		clients = append(clients, c)
	}
	lk, err := redislock.NewQuorum(clients).Obtain(ctx, "q", time.Minute)
	require.NoError(t, err)
	q := redislock.NewQuorum(clients)
	again, err := q.Resume(context.Background(), []string{"q"}, lk.Token(), time.Minute)
	require.NoError(t, err)
	assert.Positive(t, again.Fence())
	require.NoError(t, again.Release(ctx))
	require.NoError(t, q.Shutdown(ctx)) // the releases of the masters past the majority
	for _, c := range clients {
		assert.Zero(t, c.Exists(ctx, "q").Val())
	}
}

// A Refresh of the old Lock sent before Resume (to another length: a new
// generation of its commands) that reaches Redis after it changes nothing:
// the resumed lock's commands carry a generation far above any the old
// Lock may have in flight, so Redis refuses the late one; the lease stays
// the resumed lock's, Until within the key's expiry, and nobody else takes
// the key. (Found by an adversarial review: Resume's generation was the
// one above the last that ran, which the late Refresh carried too.)
func TestResume_LateRefreshOfTheOldLockChangesNothing(t *testing.T) {
	b := realBackend(t)
	lc := &lagConns{delay: time.Second, ran: make(chan time.Time, 1)}
	old, _ := b.client(t, func(o *redis.Options) {
		o.Dialer = lc.dial
		o.ReadTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
	})
	loadScripts(t, old)
	t.Cleanup(lc.wg.Wait)
	other, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)

	first, err := redislock.New(old).Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	lc.lagNext(sentScript(renewScript, "300")) // held back 1 s in the network
	require.Error(t, first.Refresh(ctx, 300*time.Millisecond))

	resumed, err := redislock.New(other).Resume(ctx, []string{"k"}, first.Token(), 10*time.Second)
	require.NoError(t, err)
	<-lc.ran // the old Refresh ran in Redis
	time.Sleep(50 * time.Millisecond)
	local, left := leaseGap(t, other, resumed)
	assert.LessOrEqual(t, local, left+5*time.Millisecond, "the old Lock's late Refresh changed the lease")
	assert.Greater(t, left, 9*time.Second, "the resumed lock's lease")
	time.Sleep(400 * time.Millisecond)
	_, err = redislock.New(other).TryObtain(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	require.NoError(t, resumed.Release(ctx))
}
