package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Invalid input at every entry point: each call returns an error that
// errors.Is one of the package's sentinels, does not panic, and sends no
// command to Redis.
func TestBadInputTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, n := b.client(t)
		good := redislock.New(rdb)
		held, err := good.Obtain(ctx, "held", time.Minute)
		require.NoError(t, err)
		released, err := good.Obtain(ctx, "released", time.Minute)
		require.NoError(t, err)
		require.NoError(t, released.Release(ctx))
		fn := func(context.Context) error { t.Error("fn called on invalid input"); return nil }
		obtain := func(l *redislock.Locker, key string, ttl time.Duration, opts ...redislock.Option) func() error {
			return func() error { _, err := l.Obtain(ctx, key, ttl, opts...); return err }
		}
		try := func(l *redislock.Locker, key string, ttl time.Duration, opts ...redislock.Option) func() error {
			return func() error { _, err := l.TryObtain(ctx, key, ttl, opts...); return err }
		}
		withLock := func(l *redislock.Locker, key string, f func(context.Context) error, opts ...redislock.Option) func() error {
			return func() error { return l.WithLock(ctx, key, f, opts...) }
		}

		cases := []struct {
			name string
			call func() error
			want error
		}{
			// keys
			{"Obtain empty key", obtain(good, "", time.Second), redislock.ErrInvalidKey},
			{"TryObtain empty key", try(good, "", time.Second), redislock.ErrInvalidKey},
			{"WithLock empty key", withLock(good, "", fn), redislock.ErrInvalidKey},
			{"Obtain empty key WithFencing", obtain(good, "", time.Second, redislock.WithFencing()), redislock.ErrInvalidKey},
			// the name of a key the library keeps beside the lock on "k"
			{"Obtain a side key's name", obtain(good, "{k}:rl1:holders:k", time.Second), redislock.ErrInvalidKey},
			{"TryObtain a fence counter's name", try(good, "{x}:rl1:fence", time.Second), redislock.ErrInvalidKey},
			{"WithLock a side key's name in a namespace", withLock(good, "app:{k}:rl1:line:k", fn), redislock.ErrInvalidKey},
			// ttls
			{"Obtain zero ttl", obtain(good, "k", 0), redislock.ErrInvalidTTL},
			{"Obtain negative ttl", obtain(good, "k", -time.Second), redislock.ErrInvalidTTL},
			{"Obtain 1ns ttl", obtain(good, "k", time.Nanosecond), redislock.ErrInvalidTTL},
			{"TryObtain sub-ms ttl", try(good, "k", 999*time.Microsecond), redislock.ErrInvalidTTL},
			{"TryObtain min int64 ttl", try(good, "k", time.Duration(-1<<63)), redislock.ErrInvalidTTL},
			{"WithLock WithTTL(0)", withLock(good, "k", fn, redislock.WithTTL(0)), redislock.ErrInvalidTTL},
			{"WithLock WithTTL(-1s)", withLock(good, "k", fn, redislock.WithTTL(-time.Second)), redislock.ErrInvalidTTL},
			{"WithLock WithTTL(500µs)", withLock(good, "k", fn, redislock.WithTTL(500*time.Microsecond)), redislock.ErrInvalidTTL},
			{"New WithTTL(0), then Obtain", obtain(redislock.New(rdb, redislock.WithTTL(0)), "k", time.Second), redislock.ErrInvalidTTL},
			{"New WithTTL(0), then WithLock", withLock(redislock.New(rdb, redislock.WithTTL(0)), "k", fn), redislock.ErrInvalidTTL},
			// nil client, nil fn
			{"New(nil).Obtain", obtain(redislock.New(nil), "k", time.Second), redislock.ErrNilClient},
			{"New(nil).TryObtain", try(redislock.New(nil), "k", time.Second), redislock.ErrNilClient},
			{"New(nil).WithLock", withLock(redislock.New(nil), "k", fn), redislock.ErrNilClient},
			{"WithLock nil fn", withLock(good, "k", nil), redislock.ErrNilFunc},
			// options
			{"WithWait(-1ns)", obtain(good, "k", time.Second, redislock.WithWait(-1)), redislock.ErrInvalidOption},
			{"New WithWait(-1s), then TryObtain", try(redislock.New(rdb, redislock.WithWait(-time.Second)), "k", time.Second), redislock.ErrInvalidOption},
			{"WithBackoff(0, 1s)", obtain(good, "k", time.Second, redislock.WithBackoff(0, time.Second)), redislock.ErrInvalidOption},
			{"WithBackoff(0, 0)", obtain(good, "k", time.Second, redislock.WithBackoff(0, 0)), redislock.ErrInvalidOption},
			{"WithBackoff(-1ms, 1s)", try(good, "k", time.Second, redislock.WithBackoff(-time.Millisecond, time.Second)), redislock.ErrInvalidOption},
			{"WithBackoff(max < min)", obtain(good, "k", time.Second, redislock.WithBackoff(time.Second, time.Millisecond)), redislock.ErrInvalidOption},
			{"WithLock WithBackoff(max < min)", withLock(good, "k", fn, redislock.WithBackoff(2, 1)), redislock.ErrInvalidOption},
			// a Locker's options given to a call; one lease per call; one mode per call
			{"Obtain WithHooks", obtain(good, "k", time.Second, redislock.WithHooks(redislock.Hooks{})), redislock.ErrInvalidOption},
			{"TryObtain WithHolder bad", try(good, "k", time.Second, redislock.WithHolder("a\nb")), redislock.ErrInvalidOption},
			{"WithLock WithSafetyMargin", withLock(good, "k", fn, redislock.WithSafetyMargin(time.Second)), redislock.ErrInvalidOption},
			{"Obtain WithNamespace", obtain(good, "k", time.Second, redislock.WithNamespace("app:")), redislock.ErrInvalidOption},
			{"Obtain WithTTL", obtain(good, "k", time.Second, redislock.WithTTL(time.Minute)), redislock.ErrInvalidOption},
			{"TryObtain WithTTL", try(good, "k", time.Second, redislock.WithTTL(time.Minute)), redislock.ErrInvalidOption},
			{"WithShared and WithExclusive", obtain(good, "k", time.Second, redislock.WithShared(), redislock.WithExclusive()), redislock.ErrInvalidOption},
			{"New WithNamespace with a space", obtain(redislock.New(rdb, redislock.WithNamespace("a b")), "k", time.Second), redislock.ErrInvalidOption},
			// the zero Locker, a nil Locker
			{"zero Locker Obtain", obtain(&redislock.Locker{}, "k", time.Second), redislock.ErrNilClient},
			{"nil Locker TryObtain", try(nil, "k", time.Second), redislock.ErrNilClient},
			{"nil Locker WithLock", withLock(nil, "k", fn), redislock.ErrNilClient},
			{"nil Locker Inspect", func() error { _, err := (*redislock.Locker)(nil).Inspect(ctx, "k"); return err }, redislock.ErrNilClient},
			{"zero Locker Shutdown", func() error { return (&redislock.Locker{}).Shutdown(ctx) }, redislock.ErrNilClient},
			// a nil Lock, a zero Lock
			{"nil Lock Release", func() error { return (*redislock.Lock)(nil).Release(ctx) }, redislock.ErrNotHeld},
			{"zero Lock Refresh", func() error { return (&redislock.Lock{}).Refresh(ctx, time.Second) }, redislock.ErrNotHeld},
			{"nil Lock TTL", func() error { _, err := (*redislock.Lock)(nil).TTL(ctx); return err }, redislock.ErrNotHeld},
			{"zero Lock KeepAlive", func() error { return context.Cause((&redislock.Lock{}).KeepAlive(ctx)) }, redislock.ErrNotHeld},
			{"first invalid option wins", obtain(good, "k", time.Second, redislock.WithWait(-1), redislock.WithTTL(0)), redislock.ErrInvalidOption},
			// a held lock
			{"Refresh zero ttl", func() error { return held.Refresh(ctx, 0) }, redislock.ErrInvalidTTL},
			{"Refresh negative ttl", func() error { return held.Refresh(ctx, -time.Hour) }, redislock.ErrInvalidTTL},
			{"Refresh sub-ms ttl", func() error { return held.Refresh(ctx, time.Microsecond) }, redislock.ErrInvalidTTL},
			// a released lock
			{"Refresh released lock", func() error { return released.Refresh(ctx, time.Minute) }, redislock.ErrNotHeld},
			{"Refresh released lock, bad ttl", func() error { return released.Refresh(ctx, 0) }, redislock.ErrInvalidTTL},
			{"Release released lock", func() error { return released.Release(ctx) }, redislock.ErrNotHeld},
			{"TTL released lock", func() error { _, err := released.TTL(ctx); return err }, redislock.ErrNotHeld},
			{"KeepAlive released lock", func() error {
				lctx := released.KeepAlive(ctx)
				<-lctx.Done()
				return context.Cause(lctx)
			}, redislock.ErrNotHeld},
			// SetFenced
			{"SetFenced fence 0", func() error { return redislock.SetFenced(ctx, rdb, "res", "v", 0) }, redislock.ErrInvalidOption},
			{"SetFenced negative fence", func() error { return redislock.SetFenced(ctx, rdb, "res", "v", -1<<63) }, redislock.ErrInvalidOption},
			{"SetFenced empty key", func() error { return redislock.SetFenced(ctx, rdb, "", "v", 1) }, redislock.ErrInvalidKey},
			{"SetFenced nil client", func() error { return redislock.SetFenced(ctx, nil, "res", "v", 1) }, redislock.ErrNilClient},
		}
		require.GreaterOrEqual(t, len(cases), 15)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				before := n.Load()
				var err error
				require.NotPanics(t, func() { err = c.call() })
				require.ErrorIs(t, err, c.want)
				assert.NotEmpty(t, err.Error())
				assert.Equal(t, before, n.Load(), "a command reached Redis")
			})
		}
		keys := withoutMarks(t, rdb, rdb.Keys(ctx, "*").Val())
		assert.ElementsMatch(t, []string{"held"}, keys, "nothing was written")
		require.NoError(t, held.Release(ctx))
	})
}

// A nil *redis.Client (or *redis.ClusterClient) passed to New is a non-nil
// redis.UniversalClient holding a nil pointer. A nil check that missed it
// would let the first call panic in a goroutine of the library, which kills
// the whole process. Expected outcome: ErrNilClient, like New(nil).
//
// The calls run in a child process (this test binary, re-executed), so that
// the crash does not take the test run down with it.
func TestTypedNilClient(t *testing.T) {
	if call := os.Getenv("REDISLOCK_TYPED_NIL_CALL"); call != "" {
		typedNilChild(call)
		return
	}
	for _, call := range []string{"Obtain", "TryObtain", "WithLock", "SetFenced"} {
		t.Run(call, func(t *testing.T) {
			t.Parallel() // each in a process of its own
			cmd := exec.Command(os.Args[0], "-test.run=^TestTypedNilClient$", "-test.count=1")
			cmd.Env = append(os.Environ(), "REDISLOCK_TYPED_NIL_CALL="+call)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "child crashed:\n%s", out)
			assert.Contains(t, string(out), "TYPED-NIL-RESULT: ErrNilClient")
		})
	}
}

// typedNilChild makes one call with a nil *redis.Client and prints which
// sentinel its error is.
func typedNilChild(call string) {
	var c *redis.Client // nil
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	switch call {
	case "Obtain":
		_, err = redislock.New(c).Obtain(ctx, "k", time.Second)
	case "TryObtain":
		_, err = redislock.New(c).TryObtain(ctx, "k", time.Second)
	case "WithLock":
		err = redislock.New(c).WithLock(ctx, "k", func(context.Context) error { return nil })
	case "SetFenced":
		err = redislock.SetFenced(ctx, c, "k", "v", 1)
	}
	result := fmt.Sprintf("other error: %v", err)
	if errors.Is(err, redislock.ErrNilClient) {
		result = "ErrNilClient"
	}
	fmt.Println("TYPED-NIL-RESULT: " + result)
}

// Context on a nil or zero Lock returns its parent: such a Lock carries
// nothing, and nothing panics.
func TestBadInput_NilLockContext(t *testing.T) {
	ctx := context.Background()
	assert.Equal(t, ctx, (*redislock.Lock)(nil).Context(ctx))
	assert.Equal(t, ctx, (&redislock.Lock{}).Context(ctx))
}
