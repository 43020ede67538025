package tests

// Network faults between the client and a real redis-server, made with an
// in-process toxiproxy: latency, connection resets, black holes, half-closed
// connections and truncated replies. Each test states the expected outcome
// (acquired, a clear error within the deadline, or ErrLockLost within the
// lease) and checks that no lock is orphaned: the key is gone, or it expires
// with its ttl; no lock key is ever left without an expiry.

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// toxi is an in-process toxiproxy in front of one Redis.
type toxi struct {
	t testing.TB
	p *toxiproxy.Proxy
}

// newToxi starts a toxiproxy listening on a free loopback port and
// forwarding to upstream. It is stopped with the test, after which every
// goroutine of toxiproxy must have ended: the test fails otherwise.
func newToxi(t testing.TB, upstream string) *toxi {
	t.Helper()
	return newToxis(t, upstream)[0]
}

// newToxis starts a toxiproxy in front of each of upstreams.
func newToxis(t testing.TB, upstreams ...string) []*toxi {
	t.Helper()
	t.Cleanup(func() { waitGoroutinesGone(t, "github.com/Shopify/toxiproxy", 5*time.Second) })
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var xs []*toxi
	for i, upstream := range upstreams {
		p := toxiproxy.NewProxy(srv, strings.ReplaceAll(t.Name(), "/", "_")+strconv.Itoa(i), "127.0.0.1:0", upstream)
		require.NoError(t, p.Start())
		t.Cleanup(p.Stop)
		xs = append(xs, &toxi{t: t, p: p})
	}
	return xs
}

// blackHole is toxiproxy's timeout toxic with timeout 0 (every byte is
// dropped, the connection stays open, and it is closed when the toxic is
// removed), without its leak. When a timeout toxic is removed, toxiproxy
// (v2.5.0) closes it and returns without unblocking the toxic before it in
// the chain: if that one was handing over a chunk just then, it waits
// forever on a channel nobody reads (NoopToxic.Pipe, "chan send"). The
// black hole drains its input after it is closed, until the toxic before it
// closes too (when the connection's other end does).
type blackHole struct{}

func init() { toxics.Register("blackhole", new(blackHole)) }

func (blackHole) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
		}
	}
}

func (blackHole) Cleanup(stub *toxics.ToxicStub) {
	stub.Close()
	go func() {
		for range stub.Input {
		}
	}()
}

// Addr is the address clients connect to.
func (x *toxi) Addr() string { return x.p.Listen }

// add adds a toxic (type latency, timeout, reset_peer, slow_close,
// limit_data, ...) to stream ("upstream": client to Redis, "downstream":
// Redis to client). It applies to open connections too.
func (x *toxi) add(name, typ, stream string, attrs map[string]any) {
	x.t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "attributes": attrs})
	require.NoError(x.t, err)
	_, err = x.p.Toxics.AddToxicJson(strings.NewReader(string(body)))
	require.NoError(x.t, err)
}

// remove removes the toxic name.
func (x *toxi) remove(name string) {
	x.t.Helper()
	require.NoError(x.t, x.p.Toxics.RemoveToxic(context.Background(), name))
}

// A loss is the end of a kept lease: when, and why.
type loss struct {
	at    time.Time
	cause error
}

// watchLoss reports when the lease context lctx ends.
func watchLoss(lctx context.Context) <-chan loss {
	ch := make(chan loss, 1)
	context.AfterFunc(lctx, func() { ch <- loss{time.Now(), context.Cause(lctx)} })
	return ch
}

// expectLoss checks that a kept lease was lost (ErrLockLost) within ttl of
// since, the start of a fault (give or take a late timer).
func expectLoss(t *testing.T, lost <-chan loss, since time.Time, ttl time.Duration) {
	t.Helper()
	select {
	case l := <-lost:
		assert.Equal(t, redislock.ErrLockLost, l.cause)
		assert.Less(t, l.at.Sub(since), ttl+timerSlack, "lock loss noticed after the lease")
	case <-time.After(3 * ttl):
		t.Fatal("kept lease not reported lost")
	}
}

// waitGoroutinesGone waits until no goroutine has a frame of pkg in its
// stack, and fails t if one is left after d.
func waitGoroutinesGone(t testing.TB, pkg string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if !strings.Contains(string(buf[:n]), pkg) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines of %s still running %v after the test:\n%s", pkg, d, buf[:n])
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// toxiSetup starts a Redis, a toxiproxy in front of it, a client with
// default options through the proxy and a direct client for inspection.
func toxiSetup(t *testing.T) (x *toxi, rdb, direct *redis.Client, locker *redislock.Locker) {
	b := realBackend(t)
	x = newToxi(t, b.addr)
	rdb = defaultClient(t, x.Addr())
	direct, _ = b.client(t)
	loadScripts(t, rdb)
	return x, rdb, direct, redislock.New(rdb)
}

// expiresWithin checks that key is either gone or has an expiry of at most
// ttl, and that it is gone within ttl plus a margin.
func expiresWithin(t *testing.T, direct *redis.Client, key string, ttl time.Duration) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	if pttl := direct.PTTL(ctx, key).Val(); pttl != -2 { // -2: gone; 0: expires this millisecond; -1: no expiry
		assert.GreaterOrEqual(t, pttl, time.Duration(0), "%q has no expiry", key)
		assert.LessOrEqual(t, pttl, ttl, "%q outlives its lease", key)
	}
	assert.Eventually(t, func() bool { return direct.Exists(ctx, key).Val() == 0 }, ttl+time.Second, 10*time.Millisecond,
		"%q still there after its lease", key)
}

// Expected outcome: acquired. 40±10ms each way does not stop anything: the
// lock is acquired, inspected, refreshed and released, and a 1s lease is
// kept through a 1.5s job while a competitor tries to take it. (A 600ms
// lease was lost once in six runs of the whole -race suite on 2 cores: a
// renewal and its hedges all unanswered for about 350ms.)
func TestToxiLatency(t *testing.T) {
	x, _, direct, locker := toxiSetup(t)
	x.add("up", "latency", "upstream", map[string]any{"latency": 40, "jitter": 10})
	x.add("down", "latency", "downstream", map[string]any{"latency": 40, "jitter": 10})
	ctx := ctxT(t, 10*time.Second)

	took, err := timed(time.Second, func(ctx context.Context) error {
		start := time.Now()
		lk, err := locker.Obtain(ctx, "slow", time.Minute)
		if err != nil {
			return err
		}
		assert.Greater(t, time.Since(start), 50*time.Millisecond, "the latency is there")
		if err := lk.Refresh(ctx, time.Minute); err != nil {
			return err
		}
		if _, err := lk.TTL(ctx); err != nil {
			return err
		}
		return lk.Release(ctx)
	})
	require.NoError(t, err)
	t.Logf("obtain, refresh, ttl, release in %v", took)
	assert.Equal(t, int64(0), direct.Exists(ctx, "slow").Val())

	var competitorWins int
	err = locker.WithLock(ctx, "job", func(ctx context.Context) error {
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
			if lk, err := redislock.New(direct).TryObtain(ctx, "job", time.Second); err == nil {
				competitorWins++
				_ = lk.Release(ctx)
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}, redislock.WithTTL(time.Second))
	require.NoError(t, err)
	assert.Zero(t, competitorWins)
	assert.Equal(t, int64(0), direct.Exists(ctx, "job").Val())
}

// Replies take longer than the lease (1.5s for a 500ms lease).
// Expected outcome: a clear error within the deadline for calls, and
// ErrLockLost within the lease for a kept lease. The lock keys expire with
// their ttl.
func TestToxiLatencyBeyondLease(t *testing.T) {
	x, _, direct, locker := toxiSetup(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 500 * time.Millisecond

	kept, err := locker.Obtain(ctx, "kept", ttl)
	require.NoError(t, err)
	lctx := kept.KeepAlive(ctx)
	lost := watchLoss(lctx)
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, lctx.Err())

	x.add("down", "latency", "downstream", map[string]any{"latency": 1500})
	slowAt := time.Now()

	took, err := timed(hangDeadline, func(ctx context.Context) error {
		_, err := locker.TryObtain(ctx, "try", ttl)
		return err
	})
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, hangDeadline+hangMargin)

	took, err = timed(hangDeadline, func(ctx context.Context) error { return kept.Refresh(ctx, ttl) })
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, hangDeadline+hangMargin)

	expectLoss(t, lost, slowAt, ttl)
	// The abandoned SET and the renewals did reach Redis: their keys expire.
	expiresWithin(t, direct, "try", ttl)
	expiresWithin(t, direct, "kept", ttl)
	x.remove("down")
	assertNoLockWithoutTTL(t, direct)
}

// The proxy resets every connection on its first bytes (reset_peer).
// Expected outcome: a lease of 1s kept through 150ms of resets is not lost
// (renewals are retried). While the resets last, TryObtain fails with a clear
// network error (not a deadline) and Obtain at its deadline with the
// network error kept beside the deadline's (neither is ErrNotObtained);
// nothing is written.
func TestToxiResetPeer(t *testing.T) {
	x, _, direct, locker := toxiSetup(t)
	ctx := ctxT(t, 10*time.Second)

	kept, err := locker.Obtain(ctx, "kept", time.Second)
	require.NoError(t, err)
	lctx := kept.KeepAlive(ctx)
	time.Sleep(100 * time.Millisecond)
	x.add("reset", "reset_peer", "upstream", map[string]any{"timeout": 0})
	time.Sleep(150 * time.Millisecond)
	x.remove("reset")
	time.Sleep(1500 * time.Millisecond) // longer than the lease
	require.NoError(t, lctx.Err(), "lease lost to a 150ms outage: %v", context.Cause(lctx))
	require.NoError(t, kept.Release(ctx))

	x.add("reset", "reset_peer", "upstream", map[string]any{"timeout": 0})
	took, err := timed(3*time.Second, func(ctx context.Context) error {
		_, err := locker.TryObtain(ctx, "try", time.Minute)
		return err
	})
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "a reset is reported as such, before the deadline")
	assert.Less(t, took, 3*time.Second)
	t.Logf("TryObtain: %v after %v", err, took)

	const deadline = 600 * time.Millisecond
	took, err = timed(deadline, func(ctx context.Context) error {
		_, err := locker.Obtain(ctx, "obtain", time.Minute)
		return err
	})
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "the last attempt failed", "the network error is kept")
	assert.Less(t, took, deadline+hangMargin)
	t.Logf("Obtain: %v after %v", err, took)
	assert.Equal(t, int64(0), direct.Exists(ctx, "try").Val(), "a reset request was run")
	assert.Equal(t, int64(0), direct.Exists(ctx, "obtain").Val(), "a reset request was run")
	x.remove("reset")

	took, err = timed(time.Second, func(ctx context.Context) error {
		lk, err := locker.Obtain(ctx, "obtain", time.Minute)
		if err == nil {
			err = lk.Release(ctx)
		}
		return err
	})
	require.NoError(t, err, "Obtain once the resets stopped")
	assert.Less(t, took, 500*time.Millisecond)
	assertNoLockWithoutTTL(t, direct)
}

// A black hole: the blackhole toxic swallows every byte and never closes the
// connection.
// Expected outcome: a clear error within the deadline for every call;
// ErrLockLost within the lease for a kept lease. Requests swallowed on the
// way to Redis write nothing; a SET whose reply is swallowed leaves a key
// that expires with its ttl, and that is deleted when the connection closes.
func TestToxiBlackHole(t *testing.T) {
	x, rdb, direct, locker := toxiSetup(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 600 * time.Millisecond

	rel, err := locker.Obtain(ctx, "held:release", time.Minute)
	require.NoError(t, err)
	ref, err := locker.Obtain(ctx, "held:refresh", time.Minute)
	require.NoError(t, err)
	tl, err := locker.Obtain(ctx, "held:ttl", time.Minute)
	require.NoError(t, err)
	kept, err := locker.Obtain(ctx, "kept", ttl)
	require.NoError(t, err)
	lost := watchLoss(kept.KeepAlive(ctx))
	time.Sleep(100 * time.Millisecond)

	x.add("hole", "blackhole", "upstream", nil)
	holeAt := time.Now()
	calls := hungCalls(t, locker, rdb, rel, ref, tl)
	for _, c := range calls {
		took, err := timed(hangDeadline, c.call)
		assert.ErrorIs(t, err, context.DeadlineExceeded, c.name)
		if c.key != "" {
			assert.NotErrorIs(t, err, redislock.ErrNotObtained, c.name)
		}
		assert.Less(t, took, hangDeadline+hangMargin, "%s returned late", c.name)
	}
	expectLoss(t, lost, holeAt, ttl)
	for _, c := range calls {
		if c.key != "" {
			assert.Equal(t, int64(0), direct.Exists(ctx, c.key).Val(), "%s: a swallowed request was run", c.name)
		}
	}
	expiresWithin(t, direct, "kept", ttl)
	x.remove("hole")

	// Only replies are swallowed: the SET runs, its key expires with the
	// lease, and it is deleted as soon as the connection is closed (removing
	// the toxic closes it). The SET must go out on an open connection: a new
	// one would hang in its handshake.
	require.NoError(t, rdb.Ping(ctx).Err())
	x.add("hole", "blackhole", "downstream", nil)
	took, err := timed(hangDeadline, func(ctx context.Context) error {
		_, err := locker.TryObtain(ctx, "reply-lost", 10*time.Second)
		return err
	})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, hangDeadline+hangMargin)
	pttl := direct.PTTL(ctx, "reply-lost").Val()
	assert.Positive(t, pttl, "the SET ran, with its ttl")
	assert.LessOrEqual(t, pttl, 10*time.Second)
	x.remove("hole")
	assert.Eventually(t, func() bool { return direct.Exists(ctx, "reply-lost").Val() == 0 }, settle, 10*time.Millisecond,
		"the abandoned acquire was not undone")
	assertNoLockWithoutTTL(t, direct)
}

// Half-closed connections: Redis closes the client's connections, but the
// FIN reaches the client only 1.5s later (slow_close), so go-redis sends
// commands on connections nobody reads.
// Expected outcome: a clear error within a short deadline, and the lock
// acquired by an Obtain whose deadline outlasts the close delay. Nothing is
// run on the dead connections.
func TestToxiHalfClosed(t *testing.T) {
	x, rdb, direct, locker := toxiSetup(t)
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 3; i++ { // a few connections in the pool
		require.NoError(t, rdb.Ping(ctx).Err())
	}
	x.add("slow-close", "slow_close", "downstream", map[string]any{"delay": 1500})
	killed, err := direct.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Result()
	require.NoError(t, err)
	require.Positive(t, killed)
	killedAt := time.Now()

	took, err := timed(hangDeadline, func(ctx context.Context) error {
		_, err := locker.TryObtain(ctx, "half", time.Minute)
		return err
	})
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, hangDeadline+hangMargin)
	assert.Equal(t, int64(0), direct.Exists(ctx, "half").Val(), "run on a closed connection")

	took, err = timed(5*time.Second, func(ctx context.Context) error {
		lk, err := locker.Obtain(ctx, "half:2", time.Minute)
		if err == nil {
			err = lk.Release(ctx)
		}
		return err
	})
	require.NoError(t, err)
	t.Logf("Obtain acquired %v after the connections were closed", time.Since(killedAt))
	assert.Less(t, took, 3*time.Second)
	assert.Eventually(t, func() bool { return direct.Exists(ctx, "half").Val() == 0 }, settle, 10*time.Millisecond)
	assertNoLockWithoutTTL(t, direct)
}

// Truncated replies: limit_data lets 2 bytes of replies through on each
// connection and then closes it, so the SET runs but its reply is cut, and
// every new connection fails in its handshake.
// Expected outcome: a clear error (TryObtain: a network error before its
// deadline; Obtain: at its deadline), and the key the SET wrote expires with
// its ttl. Once the fault is gone the
// lock is acquired.
func TestToxiTruncatedReplies(t *testing.T) {
	x, rdb, direct, locker := toxiSetup(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 800 * time.Millisecond
	require.NoError(t, rdb.Ping(ctx).Err())

	x.add("cut", "limit_data", "downstream", map[string]any{"bytes": 2})
	took, err := timed(3*time.Second, func(ctx context.Context) error {
		_, err := locker.TryObtain(ctx, "cut", ttl)
		return err
	})
	require.Error(t, err)
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "a closed connection is reported as such")
	assert.Less(t, took, 3*time.Second)
	t.Logf("TryObtain: %v after %v", err, took)

	took, err = timed(hangDeadline, func(ctx context.Context) error {
		_, err := locker.Obtain(ctx, "cut:obtain", ttl)
		return err
	})
	assert.NotErrorIs(t, err, redislock.ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, hangDeadline+hangMargin)
	t.Logf("Obtain: %v after %v", err, took)

	expiresWithin(t, direct, "cut", ttl)
	expiresWithin(t, direct, "cut:obtain", ttl)
	x.remove("cut")

	took, err = timed(2*time.Second, func(ctx context.Context) error {
		lk, err := locker.Obtain(ctx, "cut", ttl)
		if err == nil {
			err = lk.Release(ctx)
		}
		return err
	})
	require.NoError(t, err)
	assert.Less(t, took, time.Second)
	assertNoLockWithoutTTL(t, direct)
}
