package tests

// Fault injection: Redis frozen, killed and restarted, its scripts flushed,
// and the network black-holed between the client and Redis. Every test runs
// against real redis-server processes (internal/redistest), mostly on go-redis
// clients with default options, which do not stop a socket read when a ctx
// deadline passes. Network faults made with toxiproxy are in toxi_test.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
)

const (
	// hangDeadline is the ctx deadline of the calls made while Redis hangs,
	// and hangMargin how late after it they may return.
	hangDeadline = 300 * time.Millisecond
	hangMargin   = 150 * time.Millisecond
	// settle bounds how long a clean-up after a fault may take.
	settle = 3 * time.Second
	// timerSlack is how late a timer may fire on a loaded machine.
	timerSlack = 50 * time.Millisecond
)

// defaultClient returns a go-redis client of addr with default options (no
// ContextTimeoutEnabled, 3s ReadTimeout, 3 retries), closed with the test.
func defaultClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// timed calls f with a context that ends after d, and returns how long f took.
func timed(d time.Duration, f func(ctx context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	return time.Since(start), err
}

// hungCall is a call made while Redis or the network hangs.
type hungCall struct {
	name string
	key  string // for acquires: the key that must not be left locked
	call func(ctx context.Context) error
}

// hungCalls returns one call of every entry point that talks to Redis. The
// locks rel, ref and ttl are held by locker; acquires use keys with the
// prefix "orphan:".
func hungCalls(t *testing.T, locker *redislock.Locker, rdb redis.UniversalClient, rel, ref, ttl *redislock.Lock) []hungCall {
	return []hungCall{
		{"Obtain", "orphan:obtain", func(ctx context.Context) error {
			_, err := locker.Obtain(ctx, "orphan:obtain", time.Minute)
			return err
		}},
		{"TryObtain", "orphan:try", func(ctx context.Context) error {
			_, err := locker.TryObtain(ctx, "orphan:try", time.Minute)
			return err
		}},
		{"Obtain WithFencing", "orphan:fenced", func(ctx context.Context) error {
			_, err := locker.Obtain(ctx, "orphan:fenced", time.Minute, redislock.WithFencing())
			return err
		}},
		{"WithLock", "orphan:withlock", func(ctx context.Context) error {
			return locker.WithLock(ctx, "orphan:withlock", func(context.Context) error {
				t.Error("fn called although the lock cannot have been obtained")
				return nil
			}, redislock.WithTTL(time.Minute))
		}},
		{"Release", "", func(ctx context.Context) error { return rel.Release(ctx) }},
		{"Refresh", "", func(ctx context.Context) error { return ref.Refresh(ctx, time.Minute) }},
		{"TTL", "", func(ctx context.Context) error { _, err := ttl.TTL(ctx); return err }},
		{"SetFenced", "", func(ctx context.Context) error {
			return redislock.SetFenced(ctx, rdb, "resource", "late", 7)
		}},
	}
}

// Redis hangs (frozen with SIGSTOP, or every byte held by a black-holed
// network) and answers later: each call returns at its 300ms deadline, and an
// abandoned acquire whose SET runs when Redis answers again leaves no lock
// behind: the late reply makes the library delete it.
func TestDeadlinesHoldWhenRedisHangs(t *testing.T) {
	type hang struct {
		name  string
		setup func(t *testing.T, b *backend) (addr string, hang, resume func())
	}
	for _, h := range []hang{
		{"redis frozen", func(t *testing.T, b *backend) (string, func(), func()) {
			return b.addr, func() { b.srv.Freeze(t) }, func() { b.srv.Thaw(t) }
		}},
		{"network black hole", func(t *testing.T, b *backend) (string, func(), func()) {
			p := faultproxy.New(t, b.addr)
			return p.Addr(), p.Pause, p.Resume
		}},
	} {
		t.Run(h.name, func(t *testing.T) {
			b := realBackend(t)
			addr, hang, resume := h.setup(t, b)
			rdb := defaultClient(t, addr)
			direct, _ := b.client(t)
			locker := redislock.New(rdb)
			ctx := ctxT(t, 30*time.Second)

			rel, err := locker.Obtain(ctx, "held:release", time.Minute)
			require.NoError(t, err)
			ref, err := locker.Obtain(ctx, "held:refresh", time.Minute)
			require.NoError(t, err)
			ttl, err := locker.Obtain(ctx, "held:ttl", time.Minute)
			require.NoError(t, err)
			require.NoError(t, ttl.Refresh(ctx, time.Minute)) // scripts loaded
			require.NoError(t, redislock.SetFenced(ctx, rdb, "resource", "v", 1))

			setsBefore := cmdCalls(t, direct, "set")
			hang()
			calls := hungCalls(t, locker, rdb, rel, ref, ttl)
			for _, c := range calls {
				took, err := timed(hangDeadline, c.call)
				assert.ErrorIs(t, err, context.DeadlineExceeded, c.name)
				if c.key != "" {
					assert.NotErrorIs(t, err, redislock.ErrNotObtained, "%s: Redis hung, the key was not held by another", c.name)
				}
				assert.GreaterOrEqual(t, took, hangDeadline-5*time.Millisecond, "%s: Redis did not hang", c.name)
				assert.Less(t, took, hangDeadline+hangMargin, "%s returned late", c.name)
			}
			resume()

			// The abandoned calls run when Redis answers again. Acquires are
			// undone when their late replies arrive.
			for _, c := range calls {
				if c.key == "" {
					continue
				}
				assert.Eventually(t, func() bool { return direct.Exists(ctx, c.key).Val() == 0 }, settle, 20*time.Millisecond,
					"%s: the acquire abandoned at its deadline left the lock %q behind (value %q, ttl %v)",
					c.name, c.key, direct.Get(ctx, c.key).Val(), direct.PTTL(ctx, c.key).Val())
			}
			// The abandoned SETs did run once Redis answered: the keys were
			// set and then deleted.
			sets := cmdCalls(t, direct, "set") - setsBefore
			t.Logf("%d abandoned SETs ran late", sets)
			assert.Positive(t, sets, "no abandoned acquire ran: the test proves nothing")

			// The abandoned Release goes on in the background once Redis
			// answers again.
			assert.Eventually(t, func() bool { return direct.Exists(ctx, "held:release").Val() == 0 }, settle, 20*time.Millisecond,
				"the Release abandoned at its deadline did not go on")
			require.ErrorIs(t, rel.Release(ctx), redislock.ErrNotHeld, "released once")
			// The abandoned Refresh did not change the owner.
			assert.Equal(t, ref.Token(), direct.Get(ctx, "held:refresh").Val())
			require.NoError(t, ref.Release(ctx))
			require.NoError(t, ttl.Release(ctx))

			// The same client works again at once.
			took, err := timed(2*time.Second, func(ctx context.Context) error {
				lk, err := locker.TryObtain(ctx, "after", time.Minute)
				if err == nil {
					err = lk.Release(ctx)
				}
				return err
			})
			require.NoError(t, err)
			assert.Less(t, took, time.Second)
			assertNoLockWithoutTTL(t, direct)
		})
	}
}

// An Obtain or TryObtain that gives up with a token of its own possibly
// left in Redis (an attempt whose reply was lost, or a place in the key's
// wait queue) keeps its deadline when Redis or the network then hangs or
// keeps failing: its clean-up (a compare-and-delete) and the pub/sub
// subscription of its wait go on in the background.
//
// Expected outcome: a clear error within the deadline +150ms, never
// ErrNotObtained (a hang is no contention, also after an answer found the
// key held), and no orphan lock once the network is back.
func TestObtainGivingUpKeepsDeadline(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	tryObtain := func(ctx context.Context, l *redislock.Locker) error {
		_, err := l.TryObtain(ctx, "k", time.Second)
		return err
	}
	obtain := func(ctx context.Context, l *redislock.Locker) error {
		_, err := l.Obtain(ctx, "k", time.Second)
		return err
	}
	const deadline = 600 * time.Millisecond
	check := func(t *testing.T, direct *redis.Client, took time.Duration, err error) {
		t.Helper()
		t.Logf("returned after %v: %v", took, err)
		require.Error(t, err)
		require.NotErrorIs(t, err, redislock.ErrNotObtained, "a fault is not another owner")
		assert.Less(t, took, deadline+hangMargin, "returned after its deadline: %v", err)
		if v, err := direct.Get(ctx, "k").Result(); err == nil && v != "holder" {
			if pttl := direct.PTTL(ctx, "k").Val(); pttl != -2 { // -2: cleaned up meanwhile; 0: expires this millisecond
				assert.GreaterOrEqual(t, pttl, time.Duration(0), "orphan lock without expiry")
			}
			assert.Eventually(t, func() bool { return direct.Get(ctx, "k").Val() != v }, settle, 10*time.Millisecond, "orphan lock")
		}
	}

	// The SET's reply is lost, then the network hangs. No go-redis retries,
	// so that the lost reply reaches the library.
	for name, call := range map[string]func(context.Context, *redislock.Locker) error{"TryObtain": tryObtain, "Obtain": obtain} {
		t.Run("lost reply then black hole/"+name, func(t *testing.T) {
			b := realBackend(t)
			direct, _ := b.client(t)
			proxy := faultproxy.New(t, b.addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			loadScripts(t, rdb)
			rdb.AddHook(&afterCmd{cmd: "evalsha", failed: true, do: proxy.Pause})
			t.Cleanup(proxy.Resume)
			proxy.DropNextReply(faultproxy.MatchCommand("evalsha"))
			took, err := timed(deadline, func(ctx context.Context) error { return call(ctx, redislock.New(rdb)) })
			proxy.Resume()
			check(t, direct, took, err)
		})
	}

	// Default client options from here on. The first attempt finds the key
	// held; the next one (the place's renewal, a third of a second on) goes
	// unanswered until the deadline: a Redis failure, not contention.
	t.Run("contended, black hole as Obtain starts to wait", func(t *testing.T) {
		b := realBackend(t)
		direct, _ := b.client(t)
		require.NoError(t, direct.Set(ctx, "k", "holder", time.Minute).Err())
		proxy := faultproxy.New(t, b.addr)
		rdb := defaultClient(t, proxy.Addr())
		loadScripts(t, rdb)
		rdb.AddHook(&afterCmd{cmd: "evalsha", do: proxy.Pause}) // the attempt found the key held
		t.Cleanup(proxy.Resume)
		took, err := timed(deadline, func(ctx context.Context) error { return obtain(ctx, redislock.New(rdb)) })
		proxy.Resume()
		check(t, direct, took, err)
		assert.ErrorContains(t, err, "did not answer")
	})
	t.Run("contended, Redis freezes while Obtain waits", func(t *testing.T) {
		b := realBackend(t)
		direct, _ := b.client(t)
		require.NoError(t, direct.Set(ctx, "k", "holder", time.Minute).Err())
		rdb := defaultClient(t, b.addr)
		type result struct {
			took time.Duration
			err  error
		}
		done := make(chan result, 1)
		go func() {
			took, err := timed(deadline, func(ctx context.Context) error { return obtain(ctx, redislock.New(rdb)) })
			done <- result{took, err}
		}()
		time.Sleep(deadline / 4) // mid-wait, well before the last look (deadline - 200 ms)
		b.srv.Freeze(t)
		r := <-done
		b.srv.Thaw(t)
		check(t, direct, r.took, r.err)
		assert.ErrorContains(t, r.err, "did not answer")
	})
	for _, tc := range []struct {
		name, toxic, stream string
		attrs               map[string]any
	}{
		{"lasting resets", "reset_peer", "upstream", map[string]any{"timeout": 0}},
		{"truncated replies", "limit_data", "downstream", map[string]any{"bytes": 2}},
	} {
		for name, call := range map[string]func(context.Context, *redislock.Locker) error{"TryObtain": tryObtain, "Obtain": obtain} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				x, rdb, direct, locker := toxiSetup(t)
				require.NoError(t, rdb.Ping(ctx).Err())
				x.add("fault", tc.toxic, tc.stream, tc.attrs)
				took, err := timed(deadline, func(ctx context.Context) error { return call(ctx, locker) })
				check(t, direct, took, err)
			})
		}
	}
}

// afterCmd is a go-redis hook that calls do once, after a command named cmd
// has returned: with a network error (after go-redis's own retries) when
// failed is set, else successfully.
type afterCmd struct {
	cmd    string
	failed bool
	do     func()
	once   sync.Once
}

func (h *afterCmd) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterCmd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		failed := err != nil && !errors.Is(err, redis.Nil)
		if failed == h.failed && strings.EqualFold(cmd.Name(), h.cmd) {
			h.once.Do(h.do)
		}
		return err
	}
}

func (h *afterCmd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Redis is killed (-9) and restarted empty on the same port. Holders keeping
// their lease learn that the lock is lost (ErrLockLost) within the lease, and
// the same client obtains locks again as soon as Redis is back.
func TestRestartWithoutPersistenceIsLoud(t *testing.T) {
	b := realBackend(t)
	rdb, _ := b.client(t) // default options
	locker := redislock.New(rdb)
	ctx := ctxT(t, 20*time.Second)
	const ttl = time.Second

	// One holder with WithLock, one with Obtain and KeepAlive.
	withLockLost := make(chan loss, 1)
	withLockErr := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		withLockErr <- locker.WithLock(ctx, "job:withlock", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			withLockLost <- loss{time.Now(), context.Cause(ctx)}
			return nil
		}, redislock.WithTTL(ttl))
	}()
	<-started
	kept, err := locker.Obtain(ctx, "job:kept", ttl)
	require.NoError(t, err)
	kctx := kept.KeepAlive(ctx)
	keptLost := watchLoss(kctx)

	time.Sleep(ttl / 2) // renewals are working
	require.NoError(t, kctx.Err())
	killedAt := time.Now()
	b.srv.Kill(t)
	b.srv.Restart(t)
	t.Logf("redis down for %v", time.Since(killedAt))

	// New acquisitions work at once, on the same client.
	took, err := timed(2*time.Second, func(ctx context.Context) error {
		_, err := locker.TryObtain(ctx, "fresh", time.Minute)
		return err
	})
	require.NoError(t, err, "TryObtain right after the restart")
	assert.Less(t, took, 500*time.Millisecond)
	took, err = timed(2*time.Second, func(ctx context.Context) error {
		_, err := locker.Obtain(ctx, "fresh:2", time.Minute)
		return err
	})
	require.NoError(t, err)
	assert.Less(t, took, 500*time.Millisecond)

	expectLoss(t, withLockLost, killedAt, ttl)
	expectLoss(t, keptLost, killedAt, ttl)
	assert.ErrorIs(t, <-withLockErr, redislock.ErrLockLost, "WithLock's error")
	assertNoLockWithoutTTL(t, rdb)
}

// With appendfsync always, a lock survives a crash and a restart quicker
// than its lease: its holder keeps it (the KeepAlive context is not
// cancelled), renewals go on although the restart emptied the script cache,
// and fences keep increasing.
func TestRestartWithAOFKeepsLock(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	ctx := ctxT(t, 20*time.Second)
	const ttl = 3 * time.Second

	fenced, err := locker.Obtain(ctx, "fenced", time.Minute, redislock.WithFencing())
	require.NoError(t, err)
	require.NoError(t, fenced.Release(ctx))

	lock, err := locker.Obtain(ctx, "job", ttl)
	require.NoError(t, err)
	obtainedAt := time.Now()
	lctx := lock.KeepAlive(ctx)
	withLockErr := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		withLockErr <- locker.WithLock(ctx, "job:withlock", func(ctx context.Context) error {
			close(started)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(ttl + 1500*time.Millisecond):
				return nil
			}
		}, redislock.WithTTL(ttl))
	}()
	<-started

	time.Sleep(500 * time.Millisecond)
	down := time.Now()
	b.srv.Kill(t)
	b.srv.Restart(t)
	require.Less(t, time.Since(down), ttl/2, "the restart is too slow for this test")

	// Hold past the lease: only renewals after the restart keep the lock.
	time.Sleep(time.Until(obtainedAt.Add(ttl + time.Second)))
	require.NoError(t, lctx.Err(), "lease lost across the restart: %v", context.Cause(lctx))
	assert.Equal(t, lock.Token(), rdb.Get(ctx, "job").Val())
	pttl := rdb.PTTL(ctx, "job").Val()
	assert.Positive(t, pttl)
	assert.LessOrEqual(t, pttl, ttl)
	require.NoError(t, <-withLockErr, "WithLock across the restart")

	// The scripts were flushed by the restart: the calls reload them.
	require.NoError(t, lock.Refresh(ctx, ttl))
	_, err = lock.TTL(ctx)
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	assert.Equal(t, int64(0), rdb.Exists(ctx, "job").Val())

	again, err := locker.Obtain(ctx, "fenced", time.Minute, redislock.WithFencing())
	require.NoError(t, err)
	assert.Greater(t, again.Fence(), fenced.Fence(), "the fence counter survived the restart")
	require.NoError(t, again.Release(ctx))
}

// SCRIPT FLUSH, over and over, while many leases are kept alive and locks
// are acquired (fenced, and waiting in line for each other), refreshed,
// inspected, written with and released: nothing fails.
func TestScriptFlushUnderLoad(t *testing.T) {
	b := realBackend(t)
	rdb, _ := b.client(t)
	flusher, _ := b.client(t)
	locker := redislock.New(rdb)
	ctx := ctxT(t, 20*time.Second)
	const ttl = 300 * time.Millisecond

	var kept []context.Context
	var locks []*redislock.Lock
	for i := 0; i < 20; i++ {
		lk, err := locker.Obtain(ctx, "kept:"+string(rune('a'+i)), ttl)
		require.NoError(t, err)
		locks = append(locks, lk)
		kept = append(kept, lk.KeepAlive(ctx))
	}

	stop := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := flusher.ScriptFlush(ctx).Err(); err != nil {
				t.Error(err)
				return
			}
			flushes.Add(1)
		}
	})
	var rounds atomic.Int64
	for w := 0; w < 3; w++ {
		wg.Go(func() {
			key := "cycle:" + string(rune('0'+w%2)) // workers 0 and 2 contend: they wait in line
			for {
				select {
				case <-stop:
					return
				default:
				}
				lk, err := locker.Obtain(ctx, key, time.Minute, redislock.WithFencing())
				if err != nil {
					t.Error(err)
					return
				}
				for _, err := range []error{
					lk.Refresh(ctx, time.Minute),
					func() error { _, err := lk.TTL(ctx); return err }(),
					redislock.SetFenced(ctx, rdb, "resource:"+key, "v", lk.Fence()),
					lk.Release(ctx),
				} {
					if err != nil {
						t.Error(err)
						return
					}
				}
				rounds.Add(1)
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d SCRIPT FLUSH, %d acquire-refresh-ttl-write-release rounds", flushes.Load(), rounds.Load())
	assert.Greater(t, flushes.Load(), int64(20))
	assert.Greater(t, rounds.Load(), int64(10))

	for i, lctx := range kept {
		require.NoError(t, lctx.Err(), "lease %d lost: %v", i, context.Cause(lctx))
		require.NoError(t, locks[i].Release(ctx))
	}
	assert.Empty(t, rdb.Keys(ctx, "kept:*").Val())
	assert.Empty(t, rdb.Keys(ctx, "cycle:*").Val())
}

// cmdCalls returns how many times Redis has run the command name.
func cmdCalls(t *testing.T, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	info, err := rdb.Info(ctxT(t, 5*time.Second), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// assertNoLockWithoutTTL fails if a key other than a fence counter or a
// fenced resource has no expiry: a lock nobody can ever take again.
func assertNoLockWithoutTTL(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 100).Result()
		require.NoError(t, err)
		for _, k := range keys {
			if strings.HasSuffix(k, "}:rl1:fence") || strings.HasPrefix(k, "resource") {
				continue
			}
			if pttl, err := rdb.PTTL(ctx, k).Result(); err == nil && pttl == -1 {
				t.Errorf("key %q has no expiry: an orphan lock", k)
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// With ContextTimeoutEnabled, go-redis stops at ctx's deadline itself, and
// the package bounds the calls too: against a frozen Redis they return in
// time, with the deadline in their errors. With ReadTimeout -2 beside it,
// go-redis sets no socket deadline at all (ctx's neither): the package's
// bound alone holds, and they return in time too.
func TestDeadlinesHoldWithContextTimeoutEnabled(t *testing.T) {
	for name, read := range map[string]time.Duration{"ReadTimeout default": 0, "ReadTimeout -2": -2} {
		t.Run(name, func(t *testing.T) {
			b := realBackend(t)
			rdb, _ := b.client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.ReadTimeout = read })
			locker := redislock.New(rdb)
			ctx := ctxT(t, 20*time.Second)
			held, err := locker.Obtain(ctx, "held", time.Minute)
			require.NoError(t, err)

			b.srv.Freeze(t)
			for _, c := range []struct {
				name string
				call func(context.Context) error
			}{
				{"Obtain", func(ctx context.Context) error { _, err := locker.Obtain(ctx, "k", time.Minute); return err }},
				{"TryObtain", func(ctx context.Context) error { _, err := locker.TryObtain(ctx, "k2", time.Minute); return err }},
				{"Refresh", func(ctx context.Context) error { return held.Refresh(ctx, time.Minute) }},
				{"Release", func(ctx context.Context) error { return held.Release(ctx) }}, // last: it goes on in the background
			} {
				name := c.name
				took, err := timed(hangDeadline, c.call)
				assert.ErrorIs(t, err, context.DeadlineExceeded, name)
				assert.Less(t, took, hangDeadline+hangMargin, "%s returned late", name)
			}
			b.srv.Thaw(t)
			lock, err := locker.Obtain(ctx, "k3", time.Minute)
			require.NoError(t, err, "the client works again after the freeze")
			require.NoError(t, lock.Release(ctx))
		})
	}
}

// Every call returns when its ctx is cancelled before its deadline while
// Redis is frozen, with an error that wraps context.Canceled and is not
// ErrNotObtained, also on a client with ContextTimeoutEnabled (go-redis
// stops at the deadline there, not at a cancel).
func TestDeadlines_CancelBeforeTheDeadlineWhileRedisHangs(t *testing.T) {
	for _, cte := range []bool{false, true} {
		name := "default"
		if cte {
			name = "ContextTimeoutEnabled"
		}
		t.Run(name, func(t *testing.T) {
			b := realBackend(t)
			rdb, _ := b.client(t, func(o *redis.Options) {
				o.ContextTimeoutEnabled = cte
				o.ReadTimeout = 3 * time.Second
				o.MaxRetries = -1
			})
			locker := redislock.New(rdb)
			ctx := ctxT(t, 30*time.Second)
			held, err := locker.TryObtain(ctx, "held", time.Minute)
			require.NoError(t, err)
			require.NoError(t, held.Refresh(ctx, time.Minute)) // loads the scripts
			_, err = held.TTL(ctx)
			require.NoError(t, err)
			require.NoError(t, redislock.SetFenced(ctx, rdb, "res", "v", 1))
			l2, err := locker.TryObtain(ctx, "other", time.Minute)
			require.NoError(t, err)

			calls := []struct {
				name string
				f    func(ctx context.Context) error
			}{
				{"TryObtain", func(ctx context.Context) error { _, err := locker.TryObtain(ctx, "k", time.Minute); return err }},
				{"Obtain(held)", func(ctx context.Context) error { _, err := locker.Obtain(ctx, "held", time.Minute); return err }},
				{"Obtain(free)", func(ctx context.Context) error { _, err := locker.Obtain(ctx, "free", time.Minute); return err }},
				{"WithLock(free)", func(ctx context.Context) error {
					return locker.WithLock(ctx, "free2", func(context.Context) error { return nil })
				}},
				{"Refresh", func(ctx context.Context) error { return held.Refresh(ctx, time.Minute) }},
				{"TTL", func(ctx context.Context) error { _, err := held.TTL(ctx); return err }},
				{"SetFenced", func(ctx context.Context) error { return redislock.SetFenced(ctx, rdb, "res", "v", 2) }},
				{"Release", func(ctx context.Context) error { return l2.Release(ctx) }},
			}
			b.srv.Freeze(t)
			thawed := false
			defer func() {
				if !thawed {
					b.srv.Thaw(t)
				}
			}()
			for _, c := range calls {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				time.AfterFunc(200*time.Millisecond, cancel)
				start := time.Now()
				err := c.f(cctx)
				took := time.Since(start)
				cancel()
				t.Logf("%s: returned after %v: %v", c.name, took.Round(time.Millisecond), err)
				assert.Less(t, took, 350*time.Millisecond, "%s did not return when its ctx was cancelled", c.name)
				assert.True(t, errors.Is(err, context.Canceled), "%s: error %v does not wrap context.Canceled", c.name, err)
				assert.False(t, errors.Is(err, redislock.ErrNotObtained), "%s: ErrNotObtained while Redis is frozen", c.name)
			}
			b.srv.Thaw(t)
			thawed = true
			_ = held.Release(ctx)
			require.NoError(t, locker.Shutdown(ctxT(t, 20*time.Second)))
		})
	}
}

// chaosConns is a go-redis Dialer whose writes meet latency spikes (a
// write delivered late, the caller waiting: a slow network) and late
// copies (a write delivered after go-redis timed out its read and sent the
// command again on another connection, as a lost segment retransmitted).
type chaosConns struct {
	spike, late float64 // probability per write
	spikeMax    time.Duration
	lateMin     time.Duration // > the client's ReadTimeout
	lateMax     time.Duration
	wg          sync.WaitGroup
	spikes      atomic.Int64
	lates       atomic.Int64
	off         atomic.Bool
}

func (d *chaosConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &chaosConn{Conn: c, owner: d}, nil
}

type chaosConn struct {
	net.Conn
	owner   *chaosConns
	mu      sync.Mutex
	pending bool
	closing bool
	broken  bool
}

func (c *chaosConn) Write(b []byte) (int, error) {
	d := c.owner
	c.mu.Lock()
	if c.pending || c.broken {
		// bytes behind a late write: they would arrive after it; the
		// connection is as good as dead for go-redis (it timed out)
		c.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	c.mu.Unlock()
	if d.off.Load() {
		return c.Conn.Write(b)
	}
	r := rand.Float64()
	switch {
	case r < d.late:
		d.lates.Add(1)
		buf := append([]byte(nil), b...)
		c.mu.Lock()
		c.pending = true
		c.mu.Unlock()
		delay := d.lateMin + rand.N(d.lateMax-d.lateMin+1)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			time.Sleep(delay)
			_ = c.Conn.SetWriteDeadline(time.Time{})
			_, _ = c.Conn.Write(buf)
			time.Sleep(20 * time.Millisecond)
			c.mu.Lock()
			c.pending, c.broken = false, true
			closing := c.closing
			c.mu.Unlock()
			if closing {
				_ = c.Conn.Close()
			}
		}()
		return len(b), nil
	case r < d.late+d.spike:
		d.spikes.Add(1)
		time.Sleep(rand.N(d.spikeMax + 1))
	}
	return c.Conn.Write(b)
}

func (c *chaosConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending {
		c.closing = true
		return nil
	}
	return c.Conn.Close()
}

// chaosHolders is an in-memory record of who holds which key, per the locks'
// own Until: a key may be held by one exclusive holder, or by readers.
type chaosHolders struct {
	mu         sync.Mutex
	byKey      map[string][]*chaosHeld
	violations atomic.Int64
	t          *testing.T
}

type chaosHeld struct {
	lk     *redislock.Lock
	shared bool
	who    string
}

func (h *chaosHolders) acquire(lk *redislock.Lock, shared bool, who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for _, k := range lk.Keys() {
		for _, o := range h.byKey[k] {
			if (!shared || !o.shared) && now.Before(o.lk.Until()) {
				h.violations.Add(1)
				h.t.Errorf("key %q: %s acquired (shared=%v) while %s (shared=%v) holds it until %v from now",
					k, who, shared, o.who, o.shared, o.lk.Until().Sub(now))
			}
		}
		h.byKey[k] = append(h.byKey[k], &chaosHeld{lk, shared, who})
	}
}

func (h *chaosHolders) release(lk *redislock.Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range lk.Keys() {
		hs := h.byKey[k]
		for i, o := range hs {
			if o.lk == lk {
				h.byKey[k] = append(hs[:i:i], hs[i+1:]...)
				break
			}
		}
	}
}

// Specifies, under latency spikes and late copies of commands (go-redis
// resends after a read timeout), with several Lockers racing Obtain,
// TryObtain, ObtainMulti, TryObtainMulti, WithLockMulti, readers,
// fencing, KeepAlive, Refresh, TTL and Releases with short deadlines on
// six keys:
//   - Until is never later than Redis holds the key: a GET of a key after
//     which time.Now() < lk.Until() finds the lock's token;
//   - no key is held by two holders at once (by their Until);
//   - all-or-nothing and nothing orphaned: after every call returned,
//     every lock was released and Shutdown returned, Redis holds nothing
//     but release marks (and fence counters).
//
// It runs 8 s at 3% latency spikes (up to 80 ms) and 1% late copies;
// with -args -stress, 25 s at 10% spikes (up to 200 ms) and 3% late
// copies, which found places whose withdrawal failed left after Shutdown
// in about half the runs before withdrawals tried again (see
// TestLine_LateReplyAfterAFailedWithdrawalLeavesNothing).
func TestFaults_Chaos(t *testing.T) {
	b := realBackend(t)
	secs := 8
	if *stress {
		secs = 25
	}
	ctx := ctxT(t, time.Duration(secs+60)*time.Second)
	checker := b.mustClient(t)
	h := &chaosHolders{byKey: map[string][]*chaosHeld{}, t: t}
	keys := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	trace := &cmdTrace{start: time.Now()}
	minKeys, maxKeys := 1, 3
	var chaos []*chaosConns
	var lockers []*redislock.Locker
	for i := 0; i < 4; i++ {
		spike, late, spikeMax := 0.03, 0.01, 80*time.Millisecond
		if *stress {
			spike, late, spikeMax = 0.1, 0.03, 200*time.Millisecond
		}
		cc := &chaosConns{spike: spike, late: late, spikeMax: spikeMax, lateMin: 150 * time.Millisecond, lateMax: 300 * time.Millisecond}
		chaos = append(chaos, cc)
		rdb, _ := b.client(t, func(o *redis.Options) {
			o.Dialer = cc.dial
			o.ReadTimeout = 100 * time.Millisecond
			o.WriteTimeout = 100 * time.Millisecond
		})
		rdb.AddHook(trace.hook(fmt.Sprint("L", i)))
		lockers = append(lockers, redislock.New(rdb))
	}
	var checks, untilChecks, acquired, lost, errs atomic.Int64
	var errMu sync.Mutex
	errKinds := map[string]int{}
	noteErr := func(op string, err error) {
		if err == nil || errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, redislock.ErrLockLost) || errors.Is(err, redislock.ErrNotHeld) {
			return
		}
		errs.Add(1)
		errMu.Lock()
		s := err.Error()
		if len(s) > 120 {
			s = s[:120]
		}
		errKinds[op+": "+s]++
		errMu.Unlock()
	}
	// checkHeld reads each key and requires the token when Until is later
	// than the read's end (single-slot: every key holds the one token).
	checkHeld := func(lk *redislock.Lock, shared bool, who string) {
		for _, k := range lk.Keys() {
			checks.Add(1)
			var ok bool
			if shared {
				v, err := checker.Eval(ctx, readerLive, []string{k}, lk.Token()).Int()
				if err != nil {
					continue
				}
				ok = v == 1
			} else {
				v, err := checker.Get(ctx, k).Result()
				if err != nil && !errors.Is(err, redis.Nil) {
					continue
				}
				ok = v == lk.Token()
			}
			if now := time.Now(); now.Before(lk.Until()) {
				untilChecks.Add(1)
				if !ok {
					h.violations.Add(1)
					t.Errorf("%s: key %q not held by the lock's token (shared=%v) %v before its Until", who, k, shared, lk.Until().Sub(now))
				}
			}
		}
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	var wg sync.WaitGroup
	for li, l := range lockers {
		for g := 0; g < 3; g++ {
			who := fmt.Sprintf("locker%d/g%d", li, g)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					n := minKeys + rand.N(maxKeys-minKeys+1)
					perm := rand.Perm(len(keys))
					set := make([]string, n)
					for i := range set {
						set[i] = keys[perm[i]]
					}
					ttl := time.Duration(150+rand.N(400)) * time.Millisecond
					var opts []redislock.Option
					shared := false
					switch rand.N(6) {
					case 0:
						opts = append(opts, redislock.WithFencing())
					case 1:
						opts = append(opts, redislock.WithShared())
						shared = true
					}
					octx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(400))*time.Millisecond+time.Millisecond)
					var lk *redislock.Lock
					var err error
					op := rand.N(5)
					switch {
					case op == 4 && n > 1:
						// WithLockMulti
						err = l.WithLockMulti(octx, set, func(fctx context.Context) error {
							lk := redislock.FromContext(fctx)
							acquired.Add(1)
							h.acquire(lk, shared, who)
							checkHeld(lk, shared, who)
							time.Sleep(time.Duration(rand.N(30)) * time.Millisecond)
							checkHeld(lk, shared, who)
							h.release(lk)
							return nil
						}, append(opts, redislock.WithTTL(ttl))...)
						cancel()
						noteErr("withlock", err)
						continue
					case op == 3 && n == 1:
						lk, err = l.TryObtain(octx, set[0], ttl, opts...)
					case op == 3:
						lk, err = l.TryObtainMulti(octx, set, ttl, opts...)
					case n == 1:
						lk, err = l.Obtain(octx, set[0], ttl, opts...)
					default:
						lk, err = l.ObtainMulti(octx, set, ttl, opts...)
					}
					cancel()
					noteErr("obtain", err)
					if err != nil {
						continue
					}
					acquired.Add(1)
					h.acquire(lk, shared, who)
					checkHeld(lk, shared, who)
					var kept context.Context
					if rand.N(2) == 0 {
						kept = lk.KeepAlive(ctx)
					}
					steps := rand.N(4)
					for s := 0; s < steps; s++ {
						time.Sleep(time.Duration(rand.N(60)) * time.Millisecond)
						switch rand.N(3) {
						case 0:
							err := lk.Refresh(ctx, time.Duration(150+rand.N(400))*time.Millisecond)
							noteErr("refresh", err)
						case 1:
							_, err := lk.TTL(ctx)
							noteErr("ttl", err)
						}
						checkHeld(lk, shared, who)
					}
					if kept != nil && kept.Err() != nil {
						lost.Add(1)
					}
					h.release(lk)
					rctx, rcancel := context.WithTimeout(ctx, time.Duration(rand.N(50)+1)*time.Millisecond)
					err = lk.Release(rctx)
					rcancel()
					noteErr("release", err)
				}
			}()
		}
	}
	wg.Wait()
	for _, c := range chaos {
		c.off.Store(true)
	}
	for _, l := range lockers {
		assert.NoError(t, l.Shutdown(ctxT(t, 30*time.Second)))
	}
	for _, c := range chaos {
		c.wg.Wait()
		t.Logf("spikes %d, late copies %d", c.spikes.Load(), c.lates.Load())
	}
	t.Logf("acquired %d, checks %d (%d before Until), kept locks lost %d, other errors %d", acquired.Load(), checks.Load(), untilChecks.Load(), lost.Load(), errs.Load())
	for k, n := range errKinds {
		t.Logf("  %4d  %s", n, k)
	}
	assert.Zero(t, h.violations.Load())
	// Nothing orphaned: right after the Shutdowns, nothing of the keys is
	// left but marks and fence counters.
	left := withoutMarks(t, checker, checker.Keys(ctx, "*").Val())
	var orphans []string
	for _, k := range left {
		if k == fenceKey(k) || strings.HasSuffix(k, "}:rl1:fence") || onlyMarkFields(checker, k) {
			continue
		}
		pttl := checker.PTTL(ctx, k).Val()
		typ := checker.Type(ctx, k).Val()
		var content any
		switch typ {
		case "list":
			content = checker.LRange(ctx, k, 0, -1).Val()
		case "hash":
			content = checker.HGetAll(ctx, k).Val()
		case "string":
			content = checker.Get(ctx, k).Val()
		case "zset":
			content = checker.ZRangeWithScores(ctx, k, 0, -1).Val()
		}
		orphans = append(orphans, fmt.Sprintf("%s (pttl %v, type %s): %v", k, pttl, typ, content))
	}
	for _, o := range orphans {
		t.Log("left:", o)
		for _, tok := range tokenRe.FindAllString(o, -1) {
			for _, e := range trace.of(tok) {
				t.Log("   ", e)
			}
		}
	}
	assert.Empty(t, orphans, "left in Redis after every lock was released and every Locker shut down")
}

// readerLive returns 1 when ARGV[1] is a reader of KEYS[1] whose lease
// (its score) has not ended by Redis's clock, 2 when its lease ended, 0
// when it is not a reader.
const readerLive = `local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) > now then return 1 end
return 2`

var tokenRe = regexp.MustCompile(`rl1:[A-Za-z0-9_-]{22}`)

// cmdTrace records every command the Lockers' clients sent that carries a
// token, with its outcome.
type cmdTrace struct {
	start time.Time
	mu    sync.Mutex
	evs   []string
}

func (c *cmdTrace) hook(who string) hook {
	return hook{
		before: func(cmd redis.Cmder) {
			c.add(who, "send", cmd, nil)
		},
		after: func(cmd redis.Cmder, err error) {
			c.add(who, "done", cmd, err)
		},
	}
}

func (c *cmdTrace) add(who, what string, cmd redis.Cmder, err error) {
	var parts []string
	toks := false
	for i, a := range cmd.Args() {
		if i == 1 && scriptOfCmd(cmd) != "" {
			parts = append(parts, string(scriptOfCmd(cmd)))
			continue
		}
		v := fmt.Sprint(a)
		if m, ok := a.(interface{ MarshalBinary() ([]byte, error) }); ok {
			b, _ := m.MarshalBinary()
			v = string(b)
		}
		if strings.Contains(v, "rl1:") && tokenRe.MatchString(v) {
			toks = true
		}
		parts = append(parts, v)
	}
	if !toks {
		return
	}
	e := fmt.Sprintf("%8.3fms %s %s %v", float64(time.Since(c.start).Microseconds())/1000, who, what, parts)
	if what == "done" {
		if err != nil {
			e += fmt.Sprintf(" err=%v", err)
		} else {
			e += fmt.Sprintf(" => %v", cmdResult(cmd))
		}
	}
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
}

func cmdResult(cmd redis.Cmder) any {
	if c, ok := cmd.(*redis.Cmd); ok {
		return c.Val()
	}
	return cmd.String()
}

func (c *cmdTrace) of(tok string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.evs {
		if strings.Contains(e, tok) {
			out = append(out, e)
		}
	}
	return out
}

// onlyMarkFields reports whether k is a places hash that holds nothing but
// fields starting with "~" (the spent flag, a spent token's fence record),
// which expire with the spent marks.
func onlyMarkFields(rdb *redis.Client, k string) bool {
	if !strings.Contains(k, "}:rl1:places:") {
		return false
	}
	fields, err := rdb.HKeys(context.Background(), k).Result()
	if err != nil {
		return false
	}
	for _, f := range fields {
		if !strings.HasPrefix(f, "~") {
			return false
		}
	}
	return true
}
