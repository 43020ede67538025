package tests

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// slowReplyFailedWithdraw is a go-redis hook with two faults: the reply of
// the first acquire command (take or acquire script) comes late (the
// command runs in Redis at once; its reply takes delay, as on a slow
// return path), and the first release-script command (a withdrawal or a
// release) fails without reaching Redis, as a write that timed out.
type slowReplyFailedWithdraw struct {
	delay    time.Duration
	acquired atomic.Bool
	failed   atomic.Bool
}

func (h *slowReplyFailedWithdraw) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowReplyFailedWithdraw) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if releases(cmd) && h.acquired.Load() && h.failed.CompareAndSwap(false, true) {
			err := &net.OpError{Op: "write", Net: "tcp", Err: errTimeout{}}
			cmd.SetErr(err)
			return err
		}
		slow := acquires(cmd) && h.acquired.CompareAndSwap(false, true)
		err := next(ctx, cmd)
		if slow {
			time.Sleep(h.delay)
		}
		return err
	}
}

func (h *slowReplyFailedWithdraw) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// Specifies "nothing orphaned" (Obtain: "a call abandoned at ctx's end, or
// whose outcome is unknown, gives the key back if it took it (and the
// call's late reply too)"; line.go: "Nothing is orphaned"): an Obtain
// whose acquire took the key but whose reply came after the call gave up,
// and whose first withdrawal failed (a write that timed out), still gives
// the key back: once the late reply says the token took the key, and
// Shutdown has returned, the key is not held for the lock's ttl by a token
// nobody owns. Run for a plain lock, a reader (the line's path) and a set.
func TestReview_LateReplyAfterFailedWithdrawalOrphansKey(t *testing.T) {
	for _, c := range []struct {
		name string
		keys []string
		opts []redislock.Option
	}{
		{"plain", []string{"o:plain"}, nil},
		{"reader", []string{"o:reader"}, []redislock.Option{redislock.WithShared()}},
		{"set", []string{"o:s1", "o:s2"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := realBackend(t)
			ctx := ctxT(t, 20*time.Second)
			rdb, _ := b.client(t)
			checker := b.mustClient(t)
			f := &slowReplyFailedWithdraw{delay: 400 * time.Millisecond}
			rdb.AddHook(f)
			locker := redislock.New(rdb)
			cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			lk, err := locker.ObtainMulti(cctx, c.keys, time.Minute, c.opts...)
			cancel()
			require.Error(t, err)
			require.Nil(t, lk)
			t.Logf("Obtain: %v", err)
			time.Sleep(600 * time.Millisecond) // the late reply came
			require.NoError(t, locker.Shutdown(ctxT(t, 10*time.Second)))
			t.Logf("a release-script command failed: %v", f.failed.Load())
			for _, k := range c.keys {
				if n := checker.Exists(ctx, k).Val(); n > 0 {
					t.Errorf("%q is held after the Obtain gave up and Shutdown returned: PTTL %v, value %v",
						k, checker.PTTL(ctx, k).Val(), dump(checker, k))
				}
			}
		})
	}
}

func dump(c *redis.Client, k string) any {
	ctx := context.Background()
	switch c.Type(ctx, k).Val() {
	case "string":
		return c.Get(ctx, k).Val()
	case "zset":
		return c.ZRangeWithScores(ctx, k, 0, -1).Val()
	}
	return nil
}
