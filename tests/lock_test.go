package tests

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
)

func TestObtainRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)

		before := time.Now()
		lock, err := locker.Obtain(ctx, "order:42", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "order:42", lock.Key())
		assert.Regexp(t, `^rl1:[A-Za-z0-9_-]{22}$`, lock.Token(), "the layout's prefix, then 128 random bits, base64url")
		assert.WithinRange(t, lock.Until(), before.Add(10*time.Second), time.Now().Add(10*time.Second))

		val, err := rdb.Get(ctx, "order:42").Result()
		require.NoError(t, err)
		assert.Equal(t, lock.Token(), val, "the key holds the lock's token")
		pttl, err := rdb.PTTL(ctx, "order:42").Result()
		require.NoError(t, err)
		assert.InDelta(t, 10*time.Second, pttl, float64(time.Second), "the key expires with the lease")

		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, int64(0), rdb.Exists(ctx, "order:42").Val(), "release deletes the key")
	})
}

func TestTokensAreUnique(t *testing.T) {
	rdb, _ := miniBackend(t).client(t)
	locker := redislock.New(rdb)
	ctx := ctxT(t, 5*time.Second)
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		lock, err := locker.Obtain(ctx, "k"+strconv.Itoa(i), time.Minute)
		require.NoError(t, err)
		require.False(t, seen[lock.Token()], "token repeated")
		seen[lock.Token()] = true
	}
}

func TestTryObtainContended(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, n := b.client(t)
		locker := redislock.New(rdb)

		holder, err := locker.TryObtain(ctx, "k", time.Minute)
		require.NoError(t, err)

		before := n.Load()
		start := time.Now()
		_, err = locker.TryObtain(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 500*time.Millisecond, "TryObtain does not wait")
		assert.Equal(t, int64(1), n.Load()-before, "TryObtain makes a single attempt")

		val, _ := rdb.Get(ctx, "k").Result()
		assert.Equal(t, holder.Token(), val, "the holder's key is untouched")

		// Once released, the key can be taken again.
		require.NoError(t, holder.Release(ctx))
		lock, err := locker.TryObtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		assert.NotEqual(t, holder.Token(), lock.Token())
	})
}

func TestObtainDeadlineAndCancel(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		_, err := locker.Obtain(ctxT(t, 5*time.Second), "k", time.Minute)
		require.NoError(t, err)

		// Deadline from ctx: the wait is not capped at the lease ttl (10ms
		// here), it lasts until the ctx deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = locker.Obtain(ctx, "k", 10*time.Millisecond)
		elapsed := time.Since(start)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.GreaterOrEqual(t, elapsed, 290*time.Millisecond, "waits until the deadline")
		assert.Less(t, elapsed, time.Second, "gives up at the deadline")

		// Deadline from WithWait.
		start = time.Now()
		_, err = locker.Obtain(context.Background(), "k", time.Minute, redislock.WithWait(200*time.Millisecond))
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.InDelta(t, 200*time.Millisecond, time.Since(start), float64(150*time.Millisecond))

		// Cancellation.
		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err = locker.Obtain(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestReleaseTwiceAndStaleHolder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, n := b.client(t)
		locker := redislock.New(rdb)

		lock, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
		before := n.Load()
		assert.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld, "double release")
		assert.ErrorIs(t, lock.Refresh(ctx, time.Minute), redislock.ErrNotHeld, "refresh after release")
		_, err = lock.TTL(ctx)
		assert.ErrorIs(t, err, redislock.ErrNotHeld, "TTL after release")
		assert.Equal(t, before, n.Load(), "a released lock does not contact Redis")

		// A stale holder: its lease expires, another takes the key.
		stale, err := locker.Obtain(ctx, "k", 50*time.Millisecond)
		require.NoError(t, err)
		b.elapse(100 * time.Millisecond)
		holder, err := locker.TryObtain(ctx, "k", time.Minute)
		require.NoError(t, err)

		assert.ErrorIs(t, stale.Refresh(ctx, time.Hour), redislock.ErrNotHeld)
		_, err = stale.TTL(ctx)
		assert.ErrorIs(t, err, redislock.ErrNotHeld)
		assert.ErrorIs(t, stale.Release(ctx), redislock.ErrNotHeld)

		val, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, holder.Token(), val, "the new holder's key is untouched")
		pttl := rdb.PTTL(ctx, "k").Val()
		assert.Greater(t, pttl, 50*time.Second)
		assert.LessOrEqual(t, pttl, time.Minute, "the stale refresh did not extend the new lease")
		require.NoError(t, holder.Release(ctx))
	})
}

// Refresh and Release compare the whole token: a key holding a prefix, an
// extension, another token of the same length or the token in another case
// is not held. Each variant differs from the token whatever the token is
// (the same-length one changes the first character to another; the case
// one swaps the case of every letter, and a token of 22 base64url
// characters has no letter with probability (12/64)^22).
func TestWholeTokenIsCompared(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		for _, other := range []func(string) string{
			func(tok string) string { return tok[:len(tok)-1] }, // a prefix
			func(tok string) string { return tok + "x" },        // an extension
			func(tok string) string { // same length
				if tok[0] == 'x' {
					return "y" + tok[1:]
				}
				return "x" + tok[1:]
			},
			func(tok string) string { return swapCase(tok) }, // case
		} {
			lock, err := locker.Obtain(ctx, "k", time.Minute)
			require.NoError(t, err)
			v := other(lock.Token())
			require.NotEqual(t, lock.Token(), v, "the variant must differ from the token")
			require.NoError(t, rdb.Set(ctx, "k", v, time.Minute).Err())
			assert.ErrorIs(t, lock.Refresh(ctx, time.Hour), redislock.ErrNotHeld)
			assert.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)
			assert.Equal(t, v, rdb.Get(ctx, "k").Val())
			assert.LessOrEqual(t, rdb.PTTL(ctx, "k").Val(), time.Minute)
			require.NoError(t, rdb.Del(ctx, "k").Err())
		}
	})
}

// swapCase returns s with the case of each ASCII letter swapped.
func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' {
			b[i] = c ^ 0x20
		}
	}
	return string(b)
}

func TestRefreshAndTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)

		lock, err := locker.Obtain(ctx, "k", time.Second)
		require.NoError(t, err)
		ttl, err := lock.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 800*time.Millisecond)
		assert.LessOrEqual(t, ttl, time.Second)

		until := lock.Until()
		require.NoError(t, lock.Refresh(ctx, time.Minute))
		ttl, err = lock.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 59*time.Second)
		assert.Greater(t, lock.Until().Sub(until), 58*time.Second, "Until follows the refresh")

		// A short refresh shortens the lease, and the lock then expires.
		require.NoError(t, lock.Refresh(ctx, 50*time.Millisecond))
		b.elapse(100 * time.Millisecond)
		_, err = lock.TTL(ctx)
		assert.ErrorIs(t, err, redislock.ErrNotHeld)
		assert.ErrorIs(t, lock.Refresh(ctx, time.Minute), redislock.ErrNotHeld, "an expired lock cannot be revived")
		assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val())
	})
}

func TestWaiterGetsLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		ctx := ctxT(t, 10*time.Second)

		t.Run("on release", func(t *testing.T) {
			holder, err := locker.Obtain(ctx, "released", time.Minute)
			require.NoError(t, err)
			var releasedAt time.Time
			time.AfterFunc(200*time.Millisecond, func() {
				releasedAt = time.Now()
				_ = holder.Release(ctx)
			})
			lock, err := locker.Obtain(ctx, "released", time.Minute)
			require.NoError(t, err)
			assert.Less(t, time.Since(releasedAt), 2*redislock.DefaultMaxBackoff, "takes the lock within a backoff")
			assert.Equal(t, lock.Token(), rdb.Get(ctx, "released").Val())
		})
		t.Run("on expiry", func(t *testing.T) {
			_, err := locker.Obtain(ctx, "expired", 200*time.Millisecond)
			require.NoError(t, err)
			go b.elapse(200 * time.Millisecond)
			start := time.Now()
			lock, err := locker.Obtain(ctx, "expired", time.Minute)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "not before the lease ends")
			assert.Equal(t, lock.Token(), rdb.Get(ctx, "expired").Val())
		})
	})
}

func TestScriptFlush(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)

		lock, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lock.Refresh(ctx, time.Minute)) // scripts loaded now
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		require.NoError(t, lock.Refresh(ctx, 2*time.Minute))
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		_, err = lock.TTL(ctx)
		require.NoError(t, err)
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		require.NoError(t, lock.Release(ctx))
		assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val())
	})
}

// A reply lost on the network must not leave a lock nobody owns.
func TestLostSetReply(t *testing.T) {
	b := realBackend(t)
	isSet := faultproxy.MatchCommand("evalsha") // the acquire attempt
	direct, _ := b.client(t)
	ctx := ctxT(t, 10*time.Second)

	for _, tc := range []struct {
		name    string
		retries int // go-redis MaxRetries: it retries the SET itself, or we do
	}{{"go-redis retries", 3}, {"no go-redis retries", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := faultproxy.New(t, b.addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: tc.retries})
			t.Cleanup(func() { _ = rdb.Close() })
			locker := redislock.New(rdb)
			key := "lost:" + tc.name

			proxy.DropNextReply(isSet)
			start := time.Now()
			lock, err := locker.Obtain(ctx, key, time.Minute)
			require.NoError(t, err)
			assert.Less(t, time.Since(start), 5*time.Second, "acquired at once, not after the lease")
			assert.Equal(t, lock.Token(), direct.Get(ctx, key).Val(), "the key the lost SET wrote is ours")
			expiry := time.Now().Add(direct.PTTL(ctx, key).Val())
			assert.False(t, lock.Until().After(expiry.Add(time.Millisecond)), "Until %v is after the key's expiry %v", lock.Until(), expiry)
			require.NoError(t, lock.Release(ctx))
		})
	}

	t.Run("giving up cleans up", func(t *testing.T) {
		proxy := faultproxy.New(t, b.addr)
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		locker := redislock.New(rdb)

		proxy.DropNextReply(isSet)
		_, err := locker.TryObtain(ctx, "lost:giveup", time.Minute)
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotObtained, "a lost reply is not another owner")
		assert.Equal(t, int64(0), direct.Exists(ctx, "lost:giveup").Val(), "no orphan lock")
	})
}

// Mutual exclusion: a non-atomic read-modify-write under the lock loses no
// update.
func TestMutualExclusion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		const workers, rounds = 32, 20
		ctx := ctxT(t, 60*time.Second)
		c1, _ := b.client(t)
		c2, _ := b.client(t)
		lockers := []*redislock.Locker{
			redislock.New(c1, redislock.WithBackoff(time.Millisecond, 20*time.Millisecond)),
			redislock.New(c2, redislock.WithBackoff(time.Millisecond, 20*time.Millisecond)),
		}
		clients := []*redis.Client{c1, c2}

		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(locker *redislock.Locker, rdb *redis.Client) {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					lock, err := locker.Obtain(ctx, "mutex", 5*time.Second)
					if err != nil {
						errs <- err
						return
					}
					n, err := rdb.Get(ctx, "counter").Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						errs <- err
						return
					}
					time.Sleep(100 * time.Microsecond) // widen the race window
					if err := rdb.Set(ctx, "counter", n+1, 0).Err(); err != nil {
						errs <- err
						return
					}
					if err := lock.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}(lockers[w%2], clients[w%2])
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got, err := c1.Get(ctx, "counter").Int()
		require.NoError(t, err)
		assert.Equal(t, workers*rounds, got, "lost updates mean two holders at once")
	})
}

func BenchmarkObtainRelease(b *testing.B) {
	be := realBackend(b)
	rdb, _ := be.client(b)
	locker := redislock.New(rdb)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lock, err := locker.Obtain(ctx, "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Two concurrent Releases of one lock, while an Obtain of the same Locker
// waits: one of them releases (here: passes the lock on), the other returns
// ErrNotHeld and does nothing, so the waiter holds what it was passed.
func TestRelease_ConcurrentCallsReleaseOnce(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	for range 50 {
		lk, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		w := obtainAsync(ctx, locker, "k", time.Minute)
		time.Sleep(2 * time.Millisecond) // the waiter lines up
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- lk.Release(ctx) }()
		}
		e1, e2 := <-errs, <-errs
		assert.True(t, (e1 == nil) != (e2 == nil), "one Release succeeds: %v, %v", e1, e2)
		r := <-w
		require.NoError(t, r.err)
		assert.Equal(t, r.lock.Token(), rdb.Get(ctx, "k").Val(), "the waiter holds the key")
		require.NoError(t, r.lock.Release(ctx))
	}
}

// A lock its holder was told is lost (Refresh said ErrNotHeld) is not
// passed on by Release: Release says ErrNotHeld, and the waiter of the same
// Locker gets the key from Redis, really held.
func TestRelease_LostLockIsNotPassed(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	lk, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	w := obtainAsync(ctx, locker, "k", time.Minute)
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, rdb.Del(ctx, "k").Err()) // lost: a restart without persistence, say
	require.ErrorIs(t, lk.Refresh(ctx, time.Minute), redislock.ErrNotHeld)
	require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
	r := <-w
	require.NoError(t, r.err)
	assert.Equal(t, r.lock.Token(), rdb.Get(ctx, "k").Val(), "the waiter holds the key")
	require.NoError(t, r.lock.Release(ctx))
}

// A Release whose reply came after the client's ReadTimeout (go-redis sent
// it again on another connection; here Redis was frozen, and ran both
// copies when it thawed: the second found the key gone) reports success:
// a release that may have run twice, and finds the key gone before its
// lease could have run out, released it.
func TestRelease_LostReplyIsSuccess(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 300*time.Millisecond, 2 })
	direct, _ := b.client(t)
	loadScripts(t, rdb)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	b.srv.Freeze(t)
	thawed := time.AfterFunc(450*time.Millisecond, func() { b.srv.Thaw(t) })
	defer thawed.Stop()
	require.NoError(t, lk.Release(ctx), "the release ran; its reply was lost")
	assert.Equal(t, int64(0), direct.Exists(ctx, "k").Val())
}

// A Release whose reply was lost on a reset connection (Redis ran it, and
// go-redis sent it again at once: the second run finds the key gone) cannot
// be told from a lock that Redis lost before its lease's end: it returns
// ErrNotHeld saying that an earlier run may have released it
// (docs/guarantees.md says what go-redis lets the library see).
func TestRelease_LostReplyOnAResetIsNotHeld(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	proxy := faultproxy.New(t, b.addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis retries
	t.Cleanup(func() { _ = rdb.Close() })
	direct, _ := b.client(t)
	loadScripts(t, rdb)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	proxy.DropNextReply(faultproxy.MatchCommand("evalsha"))
	err = lk.Release(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), "an earlier run of this release")
	assert.Equal(t, int64(0), direct.Exists(ctx, "k").Val())
}

// `defer lock.Release(ctx)` with a request ctx that has ended: the release
// still happens, in the background, and the error says so; no lock is left
// for its ttl.
func TestRelease_DoneContextStillReleases(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		done, cancel := context.WithCancel(ctx)
		cancel()
		err = lk.Release(done)
		require.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "background")
		assert.Eventually(t, func() bool { return rdb.Exists(ctx, "k").Val() == 0 }, 5*time.Second, 10*time.Millisecond,
			"the lock was left behind")
		assert.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld, "released once")
	})
}

// A Release frees the key in Redis, and Redis never frees the lock before
// Until (see Lock.Until): once Release has returned, Until is no later than
// that moment, whether Release waited for Redis or, its ctx already done,
// releases in the background.
func TestLock_UntilNotAfterRelease(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"waited for", ctx}, {"in the background", done}} {
		lk, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		_ = lk.Release(c.ctx)
		returned := time.Now()
		assert.False(t, lk.Until().After(returned), "released %s: Until is %v after Release returned", c.name, lk.Until().Sub(returned))
		require.Eventually(t, func() bool { return rdb.Exists(ctx, "k").Val() == 0 }, 5*time.Second, time.Millisecond)
	}
	require.NoError(t, locker.Shutdown(ctx))
}

// A Refresh to a short lease whose first copy is delayed in the network
// (go-redis times the read out and retries it on another connection, which
// succeeds), then a Refresh to a long lease: the delayed copy of the short
// one runs last in Redis. Until must never be later than the expiry.
func TestLeaseClock_DelayedCopyOfShortRefresh(t *testing.T) {
	b := realBackend(t)
	lc := &lagConns{delay: time.Second, ran: make(chan time.Time, 1)}
	rdb, _ := b.client(t, func(o *redis.Options) {
		o.Dialer = lc.dial
		o.ReadTimeout = 100 * time.Millisecond
	})
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 5*time.Second)
	require.NoError(t, err)

	lc.lagNext(func(b []byte) bool {
		return sentScript(renewScript, "300")(b)
	})
	require.NoError(t, lk.Refresh(ctx, 300*time.Millisecond), "go-redis retried it on another connection")
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))
	requireUntilAfterDelayedCopy(t, lc, checker, lk)
}

// The same with KeepAlive: a renewal of a 300 ms lease whose first copy is
// delayed (go-redis retries it), then Refresh to 5 s. The kept context must
// never be live while another client can obtain the key.
func TestLeaseClock_DelayedRenewalThenLongerRefresh(t *testing.T) {
	b := realBackend(t)
	lc := &lagConns{delay: time.Second, ran: make(chan time.Time, 1)}
	rdb, _ := b.client(t, func(o *redis.Options) {
		o.Dialer = lc.dial
		o.ReadTimeout = 60 * time.Millisecond
	})
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 300*time.Millisecond)
	require.NoError(t, err)
	renewedOK := make(chan struct{})
	var once sync.Once
	rdb.AddHook(hook{after: func(cmd redis.Cmder, err error) {
		if err == nil && isScript(cmd, renewScript) && lc.hits.Load() == 1 {
			once.Do(func() { close(renewedOK) })
		}
	}})
	lc.lagNext(func(b []byte) bool {
		return sentScript(renewScript, "300")(b)
	})
	lctx := lk.KeepAlive(ctx)
	lostAt := watchLost(lctx)
	<-renewedOK // the renewal was retried and succeeded; its first copy is still on the way
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))
	other, _ := b.client(t)
	got := competeUntil(t, other, "k", 2*time.Second, lctx)
	local, left := leaseGap(t, checker, lk)
	t.Logf("got=%v lost=%v live=%v Until-now=%v PTTL=%v", got.Format("15:04:05.000"), lostAt().Format("15:04:05.000"), lctx.Err() == nil, local, left)
	_ = lk.Release(ctx)
	lc.wg.Wait()
}

// A Refresh to a short lease that fails (go-redis gives up after a read
// timeout, no retries) while its bytes are still on their way, then a
// Refresh to a long lease that succeeds: the late short one runs last in
// Redis, which refuses it (an older generation), and Until is never later
// than the expiry.
func TestLeaseClock_FailedShortRefreshRunsLate(t *testing.T) {
	b := realBackend(t)
	lc := &lagConns{delay: time.Second, ran: make(chan time.Time, 1)}
	rdb, _ := b.client(t, func(o *redis.Options) {
		o.Dialer = lc.dial
		o.ReadTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
	})
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 5*time.Second)
	require.NoError(t, err)
	lc.lagNext(func(b []byte) bool {
		return sentScript(renewScript, "300")(b)
	})
	err = lk.Refresh(ctx, 300*time.Millisecond)
	t.Logf("short Refresh: %v", err)
	require.Error(t, err)
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))
	requireUntilAfterDelayedCopy(t, lc, checker, lk)
}

// Default client options (ReadTimeout 5 s, 3 retries): a renewal's first
// copy is delayed 6.5 s (a TCP segment retransmitted with backoff); hedged
// renewals keep the lease, go-redis gives up on the stuck one; then the
// holder Refreshes to a longer lease, and the delayed copy runs after it.
// The kept context is never live while another client can take the key.
func TestLeaseClock_DelayedRenewalDefaultOptions(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	lc := &lagConns{delay: 6500 * time.Millisecond, ran: make(chan time.Time, 1)}
	rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer = lc.dial })
	ctx := ctxT(t, 30*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 1500*time.Millisecond)
	require.NoError(t, err)
	lc.lagNext(func(b []byte) bool {
		return sentScript(renewScript, "1500")(b)
	})
	lctx := lk.KeepAlive(ctx)
	lostAt := watchLost(lctx)
	time.Sleep(5700 * time.Millisecond) // the stuck renewal timed out (go-redis's 5 s read timeout) and settled
	require.NoError(t, lctx.Err())
	require.NoError(t, lk.Refresh(ctx, 10*time.Second))
	other, _ := b.client(t)
	got := competeUntil(t, other, "k", 3*time.Second, lctx)
	t.Logf("got=%v lost=%v live=%v", got.Format("15:04:05.000"), lostAt().Format("15:04:05.000"), lctx.Err() == nil)
	_ = lk.Release(ctx)
	lc.wg.Wait()
}

// TestLeaseClock_DelayedCopyOfShortRefresh with default client options:
// the short Refresh's first copy is delayed 4 s.
func TestLeaseClock_DelayedCopyOfShortRefreshDefaultOptions(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	lc := &lagConns{delay: 4 * time.Second, ran: make(chan time.Time, 1)}
	rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer = lc.dial })
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	lc.lagNext(func(b []byte) bool {
		return sentScript(renewScript, "2000")(b)
	})
	t0 := time.Now()
	err = lk.Refresh(ctx, 2*time.Second)
	t.Logf("short Refresh after %v: %v", time.Since(t0), err)
	require.NoError(t, lk.Refresh(ctx, 10*time.Second))
	requireUntilAfterDelayedCopy(t, lc, checker, lk)
}

// The holder's own TTL (or Refresh) finds the key gone: Until drops to now,
// and the kept context ends at once (ErrLockLost), before another client
// can hold the key.
func TestLeaseClock_OwnCallFindsTheLockLost(t *testing.T) {
	for _, op := range []string{"TTL", "Refresh"} {
		t.Run(op, func(t *testing.T) {
			b := realBackend(t)
			ctx := ctxT(t, 20*time.Second)
			rdb, _ := b.client(t)
			other, _ := b.client(t)
			lk, err := redislock.New(rdb).Obtain(ctx, "k", 3*time.Second)
			require.NoError(t, err)
			lctx := lk.KeepAlive(ctx)
			require.NoError(t, rdb.Del(ctx, "k").Err()) // lost: restart without persistence, eviction
			if op == "TTL" {
				_, err = lk.TTL(ctx)
			} else {
				err = lk.Refresh(ctx, 3*time.Second)
			}
			require.ErrorIs(t, err, redislock.ErrNotHeld)
			t.Logf("Until-now after ErrNotHeld: %v", time.Until(lk.Until()))
			theirs, err := redislock.New(other).TryObtain(ctx, "k", 10*time.Second)
			require.NoError(t, err, "another client takes the key")
			defer func() { _ = theirs.Release(ctx) }()
			assert.Error(t, lctx.Err(), "kept context live after the holder's own %s said ErrNotHeld and Until() passed, while another client holds the key", op)
			assert.ErrorIs(t, context.Cause(lctx), redislock.ErrLockLost)
		})
	}
}

// A Lock is safe for concurrent use: a Refresh to a short lease racing the
// Release that passes the lock to the next Obtain of the same Locker either
// runs before the pass (which then does not pass while it is in flight) or
// is refused (ErrNotHeld): the passed lock's Until is never later than the
// key's expiry.
func TestRelease_RefreshRacingPass(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 120*time.Second)
	rdb, _ := b.client(t)
	checker, _ := b.client(t)
	locker := redislock.New(rdb)
	bad, passed := 0, 0
	for i := range 100 {
		lk, err := locker.Obtain(ctx, "k", 10*time.Second)
		require.NoError(t, err)
		w := obtainAsync(ctx, locker, "k", 10*time.Second)
		waitQueued(t, checker, "k", 1)
		var wg sync.WaitGroup
		wg.Add(2)
		var rerr, ferr error
		go func() { defer wg.Done(); ferr = lk.Refresh(ctx, 30*time.Millisecond) }()
		go func() { defer wg.Done(); rerr = lk.Release(ctx) }()
		wg.Wait()
		r := <-w
		require.NoError(t, r.err)
		pttl := checker.PTTL(ctx, "k").Val()
		local := time.Until(r.lock.Until())
		if r.lock.Token() == lk.Token() {
			passed++
		}
		if r.lock.Token() == lk.Token() && local > pttl+5*time.Millisecond {
			bad++
			t.Logf("#%d: passed lock: Until-now=%v PTTL=%v (refresh: %v, release: %v)", i, local, pttl, ferr, rerr)
		}
		_ = r.lock.Release(context.Background())
		_ = checker.Del(ctx, "k").Err()
	}
	t.Logf("passed %d of 100", passed)
	require.Zero(t, bad)
}

// A late copy of an old Refresh cannot shorten the lease even after the
// lease was kept, at one length, for longer than the Refresh that started
// that length's generation: Redis keeps the holder's generation as long as
// its lease. (Refresh(100ms), whose first copy reaches Redis 1.5 s late;
// Refresh(1s) at once, and again at 0.8 s; the late copy finds its
// generation superseded and changes nothing: Until stays within the key's
// expiry.)
func TestLeaseClock_GenerationOutlivesItsFirstCommand(t *testing.T) {
	b := realBackend(t)
	rdb, lc := lateCopyClient(t, b, 1500*time.Millisecond)
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Second)
	require.NoError(t, err)

	lc.lagNext(sentScript(renewScript, "100"))
	t0 := time.Now()
	require.NoError(t, lk.Refresh(ctx, 100*time.Millisecond), "go-redis sent it again")
	require.NoError(t, lk.Refresh(ctx, time.Second))
	time.Sleep(time.Until(t0.Add(800 * time.Millisecond)))
	require.NoError(t, lk.Refresh(ctx, time.Second))

	untilWithinExpiry(t, checker, lk, <-lc.ran, 150*time.Millisecond) // the first copy of Refresh(100ms) reached Redis
	require.NoError(t, lk.Release(ctx))
}

// A Refresh abandoned at its deadline, whose copy go-redis sent again ran,
// does not share its generation with the next Refresh of another length: a
// late first copy of it is refused, and Until stays within the key's
// expiry. (Refresh(5s); Refresh(300ms) with a 150 ms ctx, its first copy
// 500 ms late and its second's reply 100 ms late; Refresh(5s); the first
// copy runs.)
func TestLeaseClock_AbandonedRefreshKeepsItsGeneration(t *testing.T) {
	b := realBackend(t)
	rdb, lc := lateCopyClient(t, b, 500*time.Millisecond)
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))

	lc.lagNext(sentScript(renewScript, "300"))
	rdb.AddHook(hook{after: func(cmd redis.Cmder, err error) {
		// renew.lua's ARGV: token, ttl, generation, fenced, mode, described
		if err == nil && isScript(cmd, renewScript) && cmd.Args()[len(cmd.Args())-5] == int64(300) {
			time.Sleep(100 * time.Millisecond) // the second copy's reply is slow
		}
	}})
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	err = lk.Refresh(short, 300*time.Millisecond)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	time.Sleep(100 * time.Millisecond) // go-redis's second copy has run
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))

	untilWithinExpiry(t, checker, lk, <-lc.ran, 350*time.Millisecond)
	require.NoError(t, lk.Release(ctx))
}

// A late copy of the acquire (go-redis sent it again; the second copy took
// the key) never shortens the lease a later Refresh set: it sets the lease
// only when that lengthens it. Until stays within the key's expiry, and
// the kept context is live only while nobody else can take the key.
func TestLeaseClock_LateCopyOfTheAcquireNeverShortens(t *testing.T) {
	b := realBackend(t)
	rdb, lc := lateCopyClient(t, b, time.Second)
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lc.lagNext(sentScript(takeScript, "k"))
	lk, err := redislock.New(rdb).TryObtain(ctx, "k", 300*time.Millisecond)
	require.NoError(t, err, "go-redis sent the acquire again; the second copy took the key")
	require.NoError(t, lk.Refresh(ctx, 5*time.Second))
	lctx := lk.KeepAlive(ctx)

	untilWithinExpiry(t, checker, lk, <-lc.ran, 350*time.Millisecond)
	_, err = redislock.New(checker).TryObtain(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	require.NoError(t, lctx.Err())
	require.NoError(t, lk.Release(ctx))
}

// A released token is spent: a late copy of the acquire that took the lock
// (go-redis sent it again; the second copy took the key) reaches Redis
// after the Release and takes nothing, so the key is free for the next
// owner, not held for the ttl by a token nobody owns.
func TestRelease_LateCopyOfTheAcquireTakesNothing(t *testing.T) {
	b := realBackend(t)
	rdb, lc := lateCopyClient(t, b, time.Second)
	checker, _ := b.client(t)
	ctx := ctxT(t, 20*time.Second)
	lc.lagNext(sentScript(takeScript, "k"))
	lk, err := redislock.New(rdb).TryObtain(ctx, "k", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	<-lc.ran
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, checker.Exists(ctx, "k").Val(), "the late copy took the key for a released token")
}

// A release whose reply is lost on a reset connection (go-redis sends it
// again; the second run finds the key handed on) still tells the releasing
// Locker's own waiter that the key was handed to it: a release that finds
// the key not held makes the Locker's waiters for it ask Redis. The first
// in line (an Obtain of the releasing Locker, ttl 1 s) is served before the
// second (another Locker's), at once: well before its place's next renewal
// (333 ms) could have found the hand-off. The release itself cannot be
// told from a lost lock: ErrNotHeld, saying an earlier run may have
// released it.
func TestRelease_LostReplyKeepsItsHandOffs(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	direct, _ := b.client(t)
	proxy := faultproxy.New(t, b.addr)
	ca, _ := b.client(t, func(o *redis.Options) { o.Addr = proxy.Addr() })
	loadScripts(t, ca)
	la := redislock.New(ca, slowPolling)
	held, err := la.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	first := obtainAsync(ctx, la, "k", time.Second) // not passed: 60 s of lease left
	waitQueued(t, direct, "k", 1)
	cb, _ := b.client(t)
	second := obtainAsync(ctx, redislock.New(cb, slowPolling), "k", time.Minute)
	waitQueued(t, direct, "k", 2)

	proxy.DropNextReply(func(req []byte) bool { return sentScript(releaseScript, "")(req) })
	err = held.Release(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld, "go-redis sent the release again: the key was handed on by its first run")
	assert.Contains(t, err.Error(), "an earlier run of this release")
	released := time.Now()
	select {
	case r := <-first:
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(released), 200*time.Millisecond, "the first in line was told late")
		require.NoError(t, r.lock.Release(ctx))
		r = <-second
		require.NoError(t, r.err)
		require.NoError(t, r.lock.Release(ctx))
	case r := <-second:
		require.NoError(t, r.err)
		t.Errorf("the second in line was served first, %v after the release", r.at.Sub(released))
		require.NoError(t, r.lock.Release(ctx))
		require.NoError(t, (<-first).err)
	}
}

// A release that deleted the key reports it, also when another client put
// data of another kind in the lock's side keys (holders, generations):
// their clean-up cannot undo the release or fail it.
func TestRelease_BrokenSideKeysDoNotFailIt(t *testing.T) {
	b := realBackend(t)
	rdb, _ := b.client(t)
	ctx := ctxT(t, 10*time.Second)
	locker := redislock.New(rdb)
	for _, kind := range []string{"holders", "gens"} {
		lk, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, sideKey("k", kind), "junk", 0).Err())
		require.NoError(t, lk.Release(ctx), kind)
		assert.Zero(t, rdb.Exists(ctx, "k").Val(), kind)
		require.NoError(t, rdb.Del(ctx, sideKey("k", kind)).Err())
	}
	require.NoError(t, locker.Shutdown(ctx))
}
