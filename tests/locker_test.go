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

// A ctx already done when Obtain, TryObtain or WithLock starts returns its
// error at once (context.Canceled, or context.DeadlineExceeded), not
// ErrNotObtained, and sends nothing, whether the key is free or held, on a
// single node and on a quorum Locker; WithLock does not call fn.
func TestObtain_DoneContextReturnsAtOnce(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	contexts := map[string]struct {
		ctx  context.Context
		want error
	}{"cancelled": {cancelled, context.Canceled}, "deadline passed": {expired, context.DeadlineExceeded}}
	calls := map[string]func(context.Context, *redislock.Locker, string) error{
		"Obtain": func(ctx context.Context, l *redislock.Locker, key string) error {
			_, err := l.Obtain(ctx, key, time.Minute)
			return err
		},
		"Obtain WithWait": func(ctx context.Context, l *redislock.Locker, key string) error {
			_, err := l.Obtain(ctx, key, time.Minute, redislock.WithWait(time.Minute))
			return err
		},
		"TryObtain": func(ctx context.Context, l *redislock.Locker, key string) error {
			_, err := l.TryObtain(ctx, key, time.Minute)
			return err
		},
		"WithLock": func(ctx context.Context, l *redislock.Locker, key string) error {
			return l.WithLock(ctx, key, func(context.Context) error {
				t.Errorf("WithLock called fn with a done ctx")
				return nil
			})
		},
	}
	check := func(t *testing.T, l *redislock.Locker, sent func() int64, holder string, state func(key string) string) {
		for ctxName, c := range contexts {
			for callName, call := range calls {
				for _, key := range []string{"free", holder} {
					before, was := sent(), state(key)
					start := time.Now()
					err := call(c.ctx, l, key)
					elapsed := time.Since(start)
					what := callName + " with a " + ctxName + " ctx on " + key
					require.Error(t, err, what)
					assert.ErrorIs(t, err, c.want, what)
					assert.NotErrorIs(t, err, redislock.ErrNotObtained, what)
					assert.Less(t, elapsed, 50*time.Millisecond, what)
					assert.Equal(t, before, sent(), "%s sent a command", what)
					assert.Equal(t, was, state(key), "%s changed the key", what)
				}
			}
		}
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, sent := b.client(t)
		checker, _ := b.client(t)
		_, err := redislock.New(checker).Obtain(ctx, "held", time.Minute)
		require.NoError(t, err)
		state := func(key string) string { return checker.Get(ctx, key).Val() }
		check(t, redislock.New(rdb), sent.Load, "held", state)
		check(t, redislock.New(rdb, redislock.WithFencing()), sent.Load, "held", state)
	})
	t.Run("quorum", func(t *testing.T) {
		servers := startMasters(t, 3)
		ctx := ctxT(t, 10*time.Second)
		clients := quorumClients(t, addrsOf(servers))
		sent := &counter{}
		for _, c := range clients {
			c.(*redis.Client).AddHook(sent)
		}
		holder := obtainOnAll(t, ctx, redislock.NewQuorum(quorumClients(t, addrsOf(servers))), servers, "held", time.Minute)
		state := func(key string) string {
			var s string
			for _, srv := range servers {
				v, _ := srv.Do(t, "GET", key).(string)
				s += v + ","
			}
			return s
		}
		require.Contains(t, state("held"), holder.Token())
		check(t, redislock.NewQuorum(clients), sent.Load, "held", state)
	})
}

// WithLock releases the lock after fn returns with a fresh context, not
// the caller's: a caller's ctx that ended while fn ran (its deadline
// passed) does not stop the release, which completes before WithLock
// returns, with no error.
func TestWithLock_ReleaseUsesAFreshContext(t *testing.T) {
	b := realBackend(t)
	rdb, _ := b.client(t)
	checker, _ := b.client(t)
	locker := redislock.New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := locker.WithLock(ctx, "k", func(ctx context.Context) error {
		<-ctx.Done() // the caller's deadline passed while fn ran
		return nil
	})
	assert.NoError(t, err, "the release did not complete")
	assert.Zero(t, checker.Exists(context.Background(), "k").Val(), "the key is left when WithLock returns")
}

// The release WithLock makes after fn returns is bounded to 5 s: with Redis
// frozen when fn returns, WithLock returns 5 s later (not at once, not
// later), with an error saying that the release goes on in the
// background; once Redis thaws, it releases the key, and Shutdown finds
// nothing left to wait for.
func TestWithLock_ReleaseBoundedTo5s(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	ctx := ctxT(t, 60*time.Second)
	rdb, _ := b.client(t)
	checker, _ := b.client(t)
	loadScripts(t, rdb)
	locker := redislock.New(rdb)
	var returned time.Time
	err := locker.WithLock(ctx, "k", func(context.Context) error {
		b.srv.Freeze(t)
		returned = time.Now()
		return nil
	})
	took := time.Since(returned)
	b.srv.Thaw(t)
	t.Logf("WithLock returned %v after fn: %v", took, err)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "goes on in the background")
	assert.GreaterOrEqual(t, took, 5*time.Second-timerSlack, "the release gave up before its 5 s")
	assert.Less(t, took, 5*time.Second+500*time.Millisecond, "the release outlasted its 5 s")
	require.Eventually(t, func() bool { return checker.Exists(ctx, "k").Val() == 0 }, 20*time.Second, 10*time.Millisecond,
		"the release did not go on in the background")
	require.NoError(t, locker.Shutdown(ctx))
	requireOnlyMarks(t, checker)
}
