package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// backend is a Redis the tests run against: an embedded miniredis (fast,
// always there) or a real redis-server started by the test.
type backend struct {
	name string
	addr string
	mr   *miniredis.Miniredis // nil for a real server
	srv  *redistest.Server    // nil for miniredis
}

// eachBackend runs f once on miniredis and once on a real redis-server. The
// real one is skipped when redis-server is not installed, except with CI=true
// where that fails the test.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		f(t, miniBackend(t))
	})
	t.Run("redis", func(t *testing.T) {
		f(t, realBackend(t))
	})
}

// realBackend starts a real redis-server for t.
func realBackend(t testing.TB, args ...string) *backend {
	srv := redistest.Start(t, args...)
	return &backend{name: "redis", addr: srv.Addr(), srv: srv}
}

// client returns a new go-redis client of b with a command counter.
func (b *backend) client(t testing.TB, opts ...func(*redis.Options)) (*redis.Client, *counter) {
	t.Helper()
	o := &redis.Options{Addr: b.addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	n := &counter{}
	c.AddHook(n)
	return c, n
}

// elapse lets d pass for the keys in b: miniredis only expires keys when told
// that time has passed.
func (b *backend) elapse(d time.Duration) {
	time.Sleep(d)
	if b.mr != nil {
		b.mr.FastForward(d)
	}
}

// counter is a go-redis hook counting the commands a client sends.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Load returns the number of commands sent so far.
func (c *counter) Load() int64 { return c.n.Load() }

// ctxT returns a context that ends with the test or after d.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// miniBackend starts an embedded miniredis for t.
func miniBackend(t testing.TB) *backend {
	mr := miniredis.RunT(t)
	return &backend{name: "miniredis", addr: mr.Addr(), mr: mr}
}
