package tests

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// A nil Option does nothing: given to New, NewQuorum, Obtain, TryObtain or
// WithLock (alone, as bsm/redislock's Obtain(ctx, key, ttl, nil), or among
// other options), the call behaves as it does without it: it sends the
// same commands, leaves the same keys with the same lease (WithLock's is
// DefaultTTL), and the other options still apply.
func TestOptions_NilDoesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		sent := &sentCommands{}
		rdb.AddHook(sent)
		checker, _ := b.client(t)
		type outcome struct {
			cmds int64         // commands sent by the call and the Release
			keys int64         // keys in Redis while held
			ttl  time.Duration // the key's lease while held, to the second
		}
		held := func(key string) outcome {
			return outcome{keys: checker.DBSize(ctx).Val(), ttl: checker.PTTL(ctx, key).Val().Round(time.Second)}
		}
		obtain := func(l *redislock.Locker, key string, opts ...redislock.Option) outcome {
			before := sent.Load()
			lk, err := l.Obtain(ctx, key, 10*time.Second, opts...)
			require.NoError(t, err)
			o := held(key)
			require.NoError(t, lk.Release(ctx))
			o.cmds = sent.Load() - before
			return o
		}
		try := func(l *redislock.Locker, key string, opts ...redislock.Option) outcome {
			before := sent.Load()
			lk, err := l.TryObtain(ctx, key, 10*time.Second, opts...)
			require.NoError(t, err)
			o := held(key)
			require.NoError(t, lk.Release(ctx))
			o.cmds = sent.Load() - before
			return o
		}
		withLock := func(l *redislock.Locker, key string, opts ...redislock.Option) outcome {
			before := sent.Load()
			var o outcome
			require.NoError(t, l.WithLock(ctx, key, func(context.Context) error { o = held(key); return nil }, opts...))
			o.cmds = sent.Load() - before
			return o
		}
		plain := redislock.New(rdb)
		withNil := redislock.New(rdb, nil)
		obtain(plain, "warm-up") // Redis has the scripts from now on
		assert.Equal(t, obtain(plain, "a"), obtain(withNil, "b"), "New(client, nil)")
		assert.Equal(t, obtain(plain, "c"), obtain(plain, "d", nil), "Obtain(..., nil)")
		assert.Equal(t, try(plain, "e"), try(plain, "f", nil), "TryObtain(..., nil)")
		want := withLock(plain, "g")
		assert.Equal(t, redislock.DefaultTTL, want.ttl)
		assert.Equal(t, want, withLock(plain, "h", nil), "WithLock(..., nil)")
		assert.Equal(t, want, withLock(withNil, "i"), "WithLock on New(client, nil)")
		requireOnlyMarks(t, checker)

		// Among other options, those apply.
		fenced := redislock.New(rdb, nil, redislock.WithFencing(), nil)
		lk, err := fenced.Obtain(ctx, "fenced", time.Minute, nil)
		require.NoError(t, err)
		assert.Positive(t, lk.Fence(), "New(client, nil, WithFencing(), nil)")
		require.NoError(t, lk.Release(ctx))
		reader, err := plain.Obtain(ctx, "rw", time.Minute, nil, redislock.WithShared(), nil)
		require.NoError(t, err)
		info, err := plain.Inspect(ctx, "rw")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeShared, info.Mode, "Obtain(..., nil, WithShared(), nil)")
		require.NoError(t, reader.Release(ctx))
		var mode redislock.Mode
		require.NoError(t, plain.WithLock(ctx, "sem", func(ctx context.Context) error {
			info, err := plain.Inspect(ctx, "sem")
			mode = info.Mode
			return err
		}, nil, redislock.WithPermits(2), redislock.WithTTL(time.Minute)))
		assert.Equal(t, redislock.ModeSemaphore, mode, "WithLock(..., nil, WithPermits(2), ...)")

		// A nil keeps what each call does without options: TryObtain makes
		// one attempt, Obtain waits until ctx's deadline.
		holder, err := plain.Obtain(ctx, "held", time.Minute)
		require.NoError(t, err)
		other := redislock.New(b.mustClient(t), nil)
		start := time.Now()
		_, err = other.TryObtain(ctx, "held", time.Minute, nil)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.Less(t, time.Since(start), 200*time.Millisecond, "TryObtain(..., nil) waited")
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = other.Obtain(wctx, "held", time.Minute, nil)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Obtain(..., nil) waited until ctx's deadline")
		require.NoError(t, holder.Release(ctx))
	})
}

// NewQuorum(clients, nil) is NewQuorum(clients): a nil Option does nothing
// there either (the same commands reach the masters, counted once the
// releases on the slowest master are done too).
func TestOptions_NilDoesNothingOnAQuorum(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 10*time.Second)
	clients := quorumClients(t, addrsOf(servers))
	sent := &sentCommands{}
	for _, c := range clients {
		c.(*redis.Client).AddHook(sent)
	}
	cycle := func(l *redislock.Locker, key string, opts ...redislock.Option) int64 {
		before := sent.Load()
		lk, err := l.Obtain(ctx, key, 10*time.Second, opts...)
		require.NoError(t, err)
		// Obtain returns at a majority; a master whose success came in
		// after the release began is given the key back (one command more:
		// see quorum.attempt), so the release waits for every reply.
		require.Eventually(t, sent.settled, time.Second, time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, lk.Release(ctx))
		for _, srv := range servers {
			require.Eventually(t, func() bool { return srv.Do(t, "EXISTS", key) == int64(0) }, time.Second, time.Millisecond)
		}
		require.NoError(t, l.Shutdown(ctx)) // nothing goes on in the background
		return sent.Load() - before
	}
	// The fewest of three cycles: on a busy machine a reply may still come
	// in after the release began.
	fewest := func(l *redislock.Locker, key string, opts ...redislock.Option) int64 {
		n := cycle(l, key+"1", opts...)
		for i := 2; i <= 3; i++ {
			n = min(n, cycle(l, key+strconv.Itoa(i), opts...))
		}
		return n
	}
	cycle(redislock.NewQuorum(clients), "warm-up") // the masters have the scripts from now on
	assert.Equal(t, fewest(redislock.NewQuorum(clients), "a"), fewest(redislock.NewQuorum(clients, nil), "b"), "NewQuorum(clients, nil)")
	plain := redislock.NewQuorum(clients)
	assert.Equal(t, fewest(plain, "c"), fewest(plain, "d", nil), "a quorum Locker's Obtain(..., nil)")
	lk, err := redislock.NewQuorum(clients, nil, redislock.WithFencing()).Obtain(ctx, "fenced", time.Minute)
	require.NoError(t, err)
	assert.Positive(t, lk.Fence())
	require.NoError(t, lk.Release(ctx))
}

// sentCommands is a go-redis hook counting the commands a client sends,
// without those of its connections' handshakes (HELLO, CLIENT SETINFO),
// which depend on how many connections it happened to dial.
type sentCommands struct{ n, calls, replied atomic.Int64 }

func (c *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		c.calls.Add(1)
		defer c.replied.Add(1)
		return next(ctx, cmd)
	}
}

func (c *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *sentCommands) count(cmd redis.Cmder) {
	if name := strings.ToLower(cmd.Name()); name != "hello" && name != "client" {
		c.n.Add(1)
	}
}

// settled reports whether every command sent alone (not in a pipeline) has
// had its reply.
func (c *sentCommands) settled() bool { return c.replied.Load() == c.calls.Load() }

// Load returns the number of commands sent so far.
func (c *sentCommands) Load() int64 { return c.n.Load() }
