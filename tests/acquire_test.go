package tests

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// "Busy" is not "broken": with Redis down (nothing listens on the port),
// TryObtain returns the network error at once and Obtain returns at its
// deadline with both the deadline and the network error in the chain;
// neither is ErrNotObtained, so a caller never takes a dead Redis for
// another owner.
func TestAcquire_RedisDownIsNotContention(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	locker := redislock.New(rdb)

	_, err = locker.TryObtain(context.Background(), "k", time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	var opErr *net.OpError
	assert.ErrorAs(t, err, &opErr, "the dial error is kept: %v", err)

	// go-redis retries a failed dial for a while, so give the attempts
	// time to fail.
	const deadline = 2 * time.Second
	took, err := timed(deadline, func(ctx context.Context) error {
		_, err := locker.Obtain(ctx, "k", time.Second)
		return err
	})
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorAs(t, err, &opErr, "the dial error is kept beside the deadline: %v", err)
	assert.Less(t, took, deadline+hangMargin)
}

// A closed client ends every call at once, even an Obtain without a
// deadline, with go-redis's ErrClosed, not ErrNotObtained.
func TestAcquire_ClosedClientReturnsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		held, err := locker.Obtain(context.Background(), "held", time.Minute)
		require.NoError(t, err)
		require.NoError(t, rdb.Close())
		for name, call := range map[string]func() error{
			"Obtain":    func() error { _, err := locker.Obtain(context.Background(), "k", time.Second); return err },
			"TryObtain": func() error { _, err := locker.TryObtain(context.Background(), "k", time.Second); return err },
			"WithLock": func() error {
				return locker.WithLock(context.Background(), "k", func(context.Context) error { return nil })
			},
			"Refresh": func() error { return held.Refresh(context.Background(), time.Minute) },
		} {
			start := time.Now()
			err := call()
			assert.ErrorIs(t, err, redis.ErrClosed, name)
			assert.NotErrorIs(t, err, redislock.ErrNotObtained, name)
			assert.Less(t, time.Since(start), time.Second, "%s did not return at once", name)
		}
	})
}

// A client closed while Obtains wait in line (polling slowly: WithBackoff
// of 2 s) ends every wait at once, with redis.ErrClosed: the Locker's
// subscription sees the close, and tells every waiter.
func TestAcquire_ClosedClientEndsWaitsAtOnce(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	direct, _ := b.client(t)
	_, err := redislock.New(direct).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	wc := redis.NewClient(&redis.Options{Addr: b.addr})
	locker := redislock.New(wc, slowPolling)
	first := obtainAsync(ctx, locker, "k", time.Minute)
	second := obtainAsync(ctx, locker, "k", time.Minute)
	waitQueued(t, direct, "k", 1)
	time.Sleep(50 * time.Millisecond)
	closed := time.Now()
	require.NoError(t, wc.Close())
	for _, ch := range []<-chan obtained{first, second} {
		r := <-ch
		assert.ErrorIs(t, r.err, redis.ErrClosed)
		assert.NotErrorIs(t, r.err, redislock.ErrNotObtained)
		assert.Less(t, r.at.Sub(closed), 150*time.Millisecond, "the wait went on after the client was closed")
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	assert.NoError(t, locker.Shutdown(sctx))
}

// Redis killed (SIGKILL) while an Obtain waits for a held key is a Redis
// failure, not contention: the wait ends at its deadline with the deadline
// and a note that Redis did not answer, and the error is not
// ErrNotObtained, whatever the client's options, although the last answer
// Redis gave said the key was held.
func TestAcquire_RedisKilledDuringAWaitIsNotContention(t *testing.T) {
	for name, set := range map[string]func(*redis.Options){
		"default options":       func(*redis.Options) {},
		"ContextTimeoutEnabled": func(o *redis.Options) { o.ContextTimeoutEnabled = true },
	} {
		t.Run(name, func(t *testing.T) {
			b := realBackend(t)
			ctx := ctxT(t, 20*time.Second)
			direct, _ := b.client(t)
			require.NoError(t, direct.Set(ctx, "k", "foreign", time.Minute).Err())
			c, _ := b.client(t, set)
			wctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
			defer cancel()
			ch := obtainAsync(wctx, redislock.New(c), "k", time.Minute)
			waitQueued(t, direct, "k", 1)
			time.Sleep(50 * time.Millisecond)
			b.srv.Kill(t)
			r := <-ch
			assert.ErrorIs(t, r.err, context.DeadlineExceeded)
			assert.NotErrorIs(t, r.err, redislock.ErrNotObtained, "Redis down reported as contention")
		})
	}
}

// A network that goes silent mid-wait (both ways), as the holder releases
// to the waiter's own place: the waiter's last look before its deadline
// goes unanswered, and the wait ends as a Redis failure, not as contention
// (nobody else held the key; no answer came for the last 1.4 s).
func TestAcquire_SilentNetworkMidWaitIsNotContention(t *testing.T) {
	x, _, direct, locker := toxiSetup(t)
	ctx := ctxT(t, 20*time.Second)
	holder, err := redislock.New(direct).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond) // room for the set-up before the last look (at 1.3 s)
	defer cancel()
	ch := obtainAsync(wctx, locker, "k", time.Minute)
	waitQueued(t, direct, "k", 1)
	require.Eventually(t, func() bool {
		return wakeSubscribers(ctx, direct) == 1
	}, time.Second, time.Millisecond, "subscribed")
	time.Sleep(20 * time.Millisecond)
	x.add("hole-up", "blackhole", "upstream", nil)
	x.add("hole-down", "blackhole", "downstream", nil)
	require.NoError(t, holder.Release(ctx))
	r := <-ch
	assert.ErrorIs(t, r.err, context.DeadlineExceeded)
	assert.NotErrorIs(t, r.err, redislock.ErrNotObtained, "Redis unreachable: reported as contention")
	x.remove("hole-up")
	x.remove("hole-down")
	require.NoError(t, locker.Shutdown(ctx))
}

// A late copy of a TryObtain's attempt (go-redis sent it again after a read
// timeout; the second copy found the key held) that reaches Redis after
// the holder released takes nothing: the TryObtain, which took long enough
// for go-redis to send it twice, marked its token spent. The key is free.
func TestAcquire_LateCopyOfTryObtainTakesNothing(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	direct, _ := b.client(t)
	rdb, lc := lateCopyClient(t, b, time.Second)
	holder, err := redislock.New(direct).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)

	lc.lagNext(sentScript(takeScript, "k"))
	locker := redislock.New(rdb)
	_, err = locker.TryObtain(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	require.NoError(t, locker.Shutdown(ctx))
	require.NoError(t, holder.Release(ctx))

	<-lc.ran
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, direct.Exists(ctx, "k").Val(), "the late copy took the free key for a TryObtain that had failed")
}

// Data this library did not write, of a kind no lock can take (a hash),
// ends a wait at once with ErrWrongKind, not ErrNotObtained, with an error
// that names both kinds and no script internals, and writes nothing.
func TestAcquire_ErrorReplyEndsTheWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		require.NoError(t, rdb.HSet(ctx, "k", "f", "v").Err())
		start := time.Now()
		_, err := redislock.New(rdb).Obtain(ctx, "k", time.Second)
		require.Error(t, err)
		assert.NotErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, redislock.ErrWrongKind)
		assert.Equal(t, `redislock: acquire "k": the key holds another kind of lock or data: a Redis hash (data this library did not write), where this call asks for an exclusive lock`, err.Error())
		assert.Less(t, time.Since(start), time.Second, "waited on an error reply")
		assert.Equal(t, "hash", rdb.Type(ctx, "k").Val())
		assert.Empty(t, queued(t, rdb, "k"), "no place left in line")
	})
}

// An acquire whose reply comes back after a stall longer than its ttl (Redis
// frozen after it received the command) returns a lock whose Until is in
// the future, renewed before Obtain returned, or an error: never a lock
// whose lease is already over.
func TestAcquire_StallLongerThanTTL(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	loadScripts(t, rdb)
	const ttl = 200 * time.Millisecond
	for name, call := range map[string]func(*redislock.Locker) (*redislock.Lock, error){
		"Obtain":    func(l *redislock.Locker) (*redislock.Lock, error) { return l.Obtain(ctx, "k", ttl) },
		"TryObtain": func(l *redislock.Locker) (*redislock.Lock, error) { return l.TryObtain(ctx, "k", ttl) },
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := b.client(t)
			frozen := false
			c.AddHook(hook{before: func(cmd redis.Cmder) {
				if !frozen && acquires(cmd) {
					frozen = true
					b.srv.Freeze(t)
					time.AfterFunc(2*ttl, func() { b.srv.Thaw(t) })
				}
			}})
			lk, err := call(redislock.New(c))
			if err != nil {
				t.Logf("error: %v", err)
				return
			}
			left := time.Until(lk.Until())
			t.Logf("Until in %v", left)
			assert.Greater(t, left, ttl/2, "returned with the lease (almost) over")
			assert.Equal(t, lk.Token(), rdb.Get(ctx, "k").Val())
			require.NoError(t, lk.Release(ctx))
		})
	}
}

// A ttl that round trips to Redis use up more than half of fails with
// ErrInvalidTTL "too short for this Redis" (not ErrNotObtained): each
// script reaches Redis 350 ms after it is sent, so a 600 ms lease has at
// most 250 ms (less than half) left when its reply comes, and each renewal
// reaches Redis before the lease it renews ends (Obtain and TryObtain,
// with a ctx that has no deadline). The lock is given back: its key is
// deleted soon after the error returns (its release reaches Redis 350 ms
// later), well before its last lease would have ended.
func TestAcquire_TTLShorterThanRoundTrip(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	checker, _ := b.client(t)
	tooShortForTheLink(t, b, checker, func(name string, err error, returned time.Time, _ []script) {
		assert.ErrorIs(t, err, redislock.ErrInvalidTTL, name)
		assert.ErrorContains(t, err, "too short for this Redis", name)
		assert.NotErrorIs(t, err, redislock.ErrNotObtained, name)
		for checker.Exists(context.Background(), name).Val() == 1 {
			time.Sleep(time.Millisecond)
		}
		assert.Less(t, time.Since(returned), tooShortTTL-100*time.Millisecond, "%s: the key was not given back, it expired", name)
	})
	requireOnlyMarks(t, checker)
}

// "At most 3" renewals (Obtain's doc; ErrInvalidTTL's "renewed 3 times in
// a row"): an acquisition whose ttl the round trips use up sends one
// acquire and 3 renewals, then gives the lock back (one release) and
// returns ErrInvalidTTL; it does not try again.
func TestAcquire_TTLTooShortEndsAfter3Renewals(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	checker, _ := b.client(t)
	tooShortForTheLink(t, b, checker, func(name string, err error, _ time.Time, sent []script) {
		assert.ErrorIs(t, err, redislock.ErrInvalidTTL, name)
		count := map[string]int{}
		for _, s := range sent {
			switch s {
			case takeScript, acquireScript:
				count["acquire"]++
			case renewScript:
				count["renew"]++
			case dropScript, releaseScript:
				count["release"]++
			}
		}
		assert.Equal(t, map[string]int{"acquire": 1, "renew": 3, "release": 1}, count, "%s sent %v", name, sent)
	})
}

// tooShortTTL and tooShortLag are the lease and the added latency of
// tooShortForTheLink: round trips use up more than half of the lease, but
// each renewal reaches Redis before the lease it renews ends, with 250 ms
// to spare.
const tooShortTTL, tooShortLag = 600 * time.Millisecond, 350 * time.Millisecond

// tooShortForTheLink runs Obtain and TryObtain at once on b (each on its
// own client and key, named after the call) through a link that sends
// each script tooShortLag late, with a ttl of tooShortTTL and a ctx with
// no deadline, and calls check with each call's error, when it returned,
// and the scripts its client sent until Shutdown returned.
func tooShortForTheLink(t *testing.T, b *backend, checker *redis.Client, check func(name string, err error, returned time.Time, sent []script)) {
	t.Helper()
	loadScripts(t, checker) // no NOSCRIPT round trip
	var wg sync.WaitGroup
	for name, call := range map[string]func(*redislock.Locker, string) (*redislock.Lock, error){
		"Obtain": func(l *redislock.Locker, key string) (*redislock.Lock, error) {
			return l.Obtain(context.Background(), key, tooShortTTL)
		},
		"TryObtain": func(l *redislock.Locker, key string) (*redislock.Lock, error) {
			return l.TryObtain(context.Background(), key, tooShortTTL)
		},
	} {
		rdb, _ := b.client(t)
		var mu sync.Mutex
		var sent []script
		rdb.AddHook(hook{before: func(cmd redis.Cmder) {
			if s := scriptOfCmd(cmd); s != "" {
				mu.Lock()
				sent = append(sent, s)
				mu.Unlock()
			}
		}})
		rdb.AddHook(scriptLag(tooShortLag))
		locker := redislock.New(rdb)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			lk, err := call(locker, name)
			returned := time.Now()
			t.Logf("%s returned after %v: %v", name, returned.Sub(start), err)
			assert.Nil(t, lk, name)
			if !assert.Error(t, err, name) || !assert.NoError(t, locker.Shutdown(context.Background())) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			check(name, err, returned, sent)
		}()
	}
	wg.Wait()
}

// scriptLag is a go-redis hook that sends each script command, or
// pipeline of them, d late: a link whose round trips take d more for the
// library's scripts (connection handshakes are not slowed).
type scriptLag time.Duration

func (d scriptLag) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d scriptLag) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		d.delay([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (d scriptLag) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		d.delay(cmds)
		return next(ctx, cmds)
	}
}

func (d scriptLag) delay(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			time.Sleep(time.Duration(d))
			return
		}
	}
}

// Another owner holds the key the whole time and Redis answers every
// attempt: each Obtain that waits until its deadline says ErrNotObtained
// (another owner kept the key until the deadline), also on a client with
// ContextTimeoutEnabled over a 30 ms link, where the deadline often falls
// while an attempt is under way.
func TestAcquire_DeadlineDuringAttemptIsContention(t *testing.T) {
	for _, cte := range []bool{false, true} {
		name := "default"
		if cte {
			name = "ContextTimeoutEnabled"
		}
		t.Run(name, func(t *testing.T) {
			b := realBackend(t)
			ctx := ctxT(t, 60*time.Second)
			holderC, _ := b.client(t)
			_, err := redislock.New(holderC).Obtain(ctx, "k", time.Minute)
			require.NoError(t, err)
			sc := &slowConns{lag: 30 * time.Millisecond}
			rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer = sc.dial; o.ContextTimeoutEnabled = cte })
			var notObtained, other atomic.Int64
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d := time.Duration(200+rand.IntN(600)) * time.Millisecond
					c, cancel := context.WithTimeout(ctx, d)
					defer cancel()
					_, err := redislock.New(rdb).Obtain(c, "k", time.Second)
					if errors.Is(err, redislock.ErrNotObtained) {
						notObtained.Add(1)
					} else {
						other.Add(1)
						t.Logf("#%d (deadline %v): %v", i, d, err)
					}
				}()
				time.Sleep(50 * time.Millisecond)
			}
			wg.Wait()
			t.Logf("ErrNotObtained: %d, other: %d", notObtained.Load(), other.Load())
			assert.Zero(t, other.Load())
		})
	}
}

// A string this library did not write (an operator's manual block, another
// library's lock) is held, as the peers treat it, and never touched. When
// it has no expiry, the error says why the wait can never end, and Inspect
// reports it as ModeForeign with no expiry; the value and its missing
// expiry stay as they were.
func TestAcquire_ForeignStringWithoutExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		require.NoError(t, rdb.Set(ctx, "k", "maintenance by ops", 0).Err())
		locker := redislock.New(rdb)
		_, err := locker.TryObtain(ctx, "k", time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.Contains(t, err.Error(), "without an expiry: it will not be released by itself")
		_, err = locker.Obtain(ctx, "k", time.Minute, redislock.WithWait(300*time.Millisecond))
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "without an expiry: it will not be released by itself")
		info, err := locker.Inspect(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeForeign, info.Mode)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, "maintenance by ops", info.Holders[0].Token)
		assert.Negative(t, info.Holders[0].TTL, "no expiry")
		assert.Equal(t, "maintenance by ops", rdb.Get(ctx, "k").Val(), "the value was touched")
		assert.Equal(t, time.Duration(-1), rdb.PTTL(ctx, "k").Val(), "an expiry was set")
		require.NoError(t, locker.Shutdown(ctx))
	})
}

// A lock of another owner with an expiry (bsm/redislock's, say) is waited
// for, like any holder, and taken when it expires.
func TestAcquire_ForeignLockIsWaitedFor(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	require.NoError(t, rdb.Set(ctx, "k", "a bsm token", 300*time.Millisecond).Err())
	lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), rdb.Get(ctx, "k").Val())
	require.NoError(t, lk.Release(ctx))
}

// The data of another version of the library (another layout: see the
// CHANGELOG) is not mistaken for a lock of this one: an acquisition fails
// at once with ErrWrongKind, naming the layout, and changes nothing.
func TestAcquire_OtherLayoutFailsClearly(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		require.NoError(t, rdb.Set(ctx, "k", "rl2:a-token-of-layout-2", time.Minute).Err())
		for name, call := range map[string]func() error{
			"TryObtain": func() error { _, err := redislock.New(rdb).TryObtain(ctx, "k", time.Minute); return err },
			"Obtain":    func() error { _, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute); return err },
		} {
			err := call()
			require.ErrorIs(t, err, redislock.ErrWrongKind, name)
			assert.Contains(t, err.Error(), "layout 2", name)
		}
		assert.Equal(t, "rl2:a-token-of-layout-2", rdb.Get(ctx, "k").Val())
		assert.Empty(t, queued(t, rdb, "k"))
	})
}

// Mixing kinds fails at once with ErrWrongKind, whose text names both kinds
// and nothing of the scripts: a lock on a semaphore's key, a reader on a
// semaphore's key, permits on a lock's key; nothing changes.
func TestAcquire_MixingKindsNamesThem(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		sem, err := locker.Obtain(ctx, "sem", time.Minute, redislock.WithPermits(3))
		require.NoError(t, err)
		lk, err := locker.Obtain(ctx, "lock", time.Minute)
		require.NoError(t, err)
		for _, c := range []struct {
			key  string
			opts []redislock.Option
			want string
		}{
			{"sem", nil, "a semaphore of 3 permits, where this call asks for an exclusive lock"},
			{"sem", []redislock.Option{redislock.WithShared()}, "a semaphore of 3 permits, where this call asks for a reader's lock"},
			{"lock", []redislock.Option{redislock.WithPermits(2)}, "an exclusive lock, where this call asks for a permit of a semaphore of 2"},
		} {
			_, err := locker.Obtain(ctx, c.key, time.Minute, append(c.opts, redislock.WithWait(5*time.Second))...)
			require.ErrorIs(t, err, redislock.ErrWrongKind)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), "script")
			assert.NotContains(t, err.Error(), "WRONGTYPE")
		}
		info, err := locker.Inspect(ctx, "sem")
		require.NoError(t, err)
		assert.Len(t, info.Holders, 1)
		assert.Equal(t, lk.Token(), rdb.Get(ctx, "lock").Val())
		require.NoError(t, sem.Release(ctx))
		require.NoError(t, lk.Release(ctx))
	})
}

// When Redis cannot be reached (connection refused), the error of a wait
// that ends, and of a single attempt, keeps go-redis's network error in
// the chain (errors.As finds the *net.OpError) beside ctx's, and is not
// ErrNotObtained. (A wait that ends before go-redis itself gives up, 1.7 s
// here with its dial retries, says that Redis did not answer.)
func TestAcquire_RedisDownKeepsTheCause(t *testing.T) {
	waitsInParallel(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: connection refused
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxT(t, 10*time.Second)
	locker := redislock.New(rdb)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second) // longer than go-redis takes to give up dialing
	defer cancel()
	_, err = locker.Obtain(wctx, "k", time.Minute)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var op *net.OpError
	assert.True(t, errors.As(err, &op), "no *net.OpError in %q", err)
	_, err = locker.TryObtain(ctx, "k", time.Minute)
	require.Error(t, err)
	assert.True(t, errors.As(err, &op), "no *net.OpError in %q", err)
	require.NoError(t, locker.Shutdown(ctx))
}

// A full Redis (maxmemory reached, maxmemory-policy noeviction) refuses
// every acquisition with its OOM error reply, never ErrNotObtained: plain,
// fenced, described (WithHolder), reader and permit locks, by TryObtain,
// Obtain (which ends its wait at once: an error reply) and WithLock (which
// does not call fn). Nothing is held afterwards: no lock key, no side key.
func TestAcquire_FullRedisIsOOMNotContention(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	checker, _ := b.client(t)
	loadScripts(t, rdb)
	require.NoError(t, checker.Set(ctx, "filler", strings.Repeat("x", 4<<20), 0).Err())
	require.NoError(t, checker.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, checker.ConfigSet(ctx, "maxmemory", "1mb").Err())
	require.ErrorContains(t, checker.Set(ctx, "probe", "v", 0).Err(), "OOM", "Redis is not full")
	cases := map[string][]redislock.Option{
		"plain":  nil,
		"fenced": {redislock.WithFencing()},
		"reader": {redislock.WithShared()},
		"permit": {redislock.WithPermits(3)},
	}
	lockers := map[string]*redislock.Locker{"": redislock.New(rdb), " WithHolder": redislock.New(rdb, redislock.WithHolder("web-3"))}
	for name, opts := range cases {
		for lname, locker := range lockers {
			for call, acquire := range map[string]func() error{
				"TryObtain": func() error { _, err := locker.TryObtain(ctx, "k", time.Minute, opts...); return err },
				"Obtain": func() error {
					_, err := locker.Obtain(ctx, "k", time.Minute, append(opts, redislock.WithWait(5*time.Second))...)
					return err
				},
				"WithLock": func() error {
					return locker.WithLock(ctx, "k", func(context.Context) error {
						t.Error("fn called")
						return nil
					}, opts...)
				},
			} {
				what := call + " " + name + lname
				start := time.Now()
				err := acquire()
				require.Error(t, err, what)
				assert.NotErrorIs(t, err, redislock.ErrNotObtained, what)
				var rerr redis.Error
				if assert.ErrorAs(t, err, &rerr, "%s: no error reply in %v", what, err) {
					assert.True(t, strings.HasPrefix(rerr.Error(), "OOM "), "%s: %v", what, rerr)
				}
				assert.Less(t, time.Since(start), time.Second, "%s waited on an error reply", what)
				assert.Equal(t, []string{"filler"}, checker.Keys(ctx, "*").Val(), "%s left keys", what)
			}
		}
	}
}
