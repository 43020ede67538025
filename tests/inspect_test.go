package tests

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// Inspect reports, in one round trip and without writing, who holds a key
// of each mode (the holder's token and description, and its lease as Redis
// sees it), the latest fence and the places in line; a free key is
// reported as such.
func TestInspect(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, n := b.client(t)
		checker, _ := b.client(t)
		locker := redislock.New(rdb, redislock.WithHolder("billing job 7"))

		info, err := locker.Inspect(ctx, "free")
		require.NoError(t, err)
		assert.Equal(t, redislock.Info{Key: "free"}, info)

		lk, err := locker.Obtain(ctx, "x", time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		waiter, _ := b.client(t)
		w := obtainAsync(ctx, redislock.New(waiter), "x", time.Minute)
		waitQueued(t, checker, "x", 1)
		before := n.Load()
		info, err = locker.Inspect(ctx, "x")
		require.NoError(t, err)
		assert.Equal(t, int64(1), n.Load()-before, "one round trip")
		assert.Equal(t, redislock.ModeExclusive, info.Mode)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, lk.Token(), info.Holders[0].Token)
		assert.Equal(t, "billing job 7", info.Holders[0].Description)
		assert.InDelta(t, time.Minute, info.Holders[0].TTL, float64(time.Second))
		assert.Equal(t, lk.Fence(), info.Fence)
		assert.Equal(t, 1, info.Waiting)
		require.NoError(t, lk.Release(ctx))
		r := <-w
		require.NoError(t, r.err)
		require.NoError(t, r.lock.Release(ctx))

		var readers []*redislock.Lock
		for range 2 {
			lk, err := locker.Obtain(ctx, "rw", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			readers = append(readers, lk)
		}
		info, err = locker.Inspect(ctx, "rw")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeShared, info.Mode)
		assert.Len(t, info.Holders, 2)

		permit, err := locker.Obtain(ctx, "sem", time.Minute, redislock.WithPermits(3))
		require.NoError(t, err)
		info, err = locker.Inspect(ctx, "sem")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeSemaphore, info.Mode)
		assert.Equal(t, 3, info.Permits)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, permit.Token(), info.Holders[0].Token)

		for _, lk := range append(readers, permit) {
			require.NoError(t, lk.Release(ctx))
		}

		require.NoError(t, checker.RPush(ctx, "list", "a").Err())
		info, err = locker.Inspect(ctx, "list")
		require.NoError(t, err)
		assert.Equal(t, redislock.Info{Key: "list", Mode: redislock.ModeOther}, info, "data of another kind: not free")
		require.NoError(t, checker.Del(ctx, "list").Err())
		require.NoError(t, checker.Del(ctx, fenceKey("x")).Err()) // fence counters stay
		requireOnlyMarks(t, checker)
	})
}

// WithHolder's description is what Inspect reports; without WithHolder,
// or with WithHolder(""), none is stored; bad input (not UTF-8, control or
// format characters such as a newline, a tab, an escape or a direction
// override, more than 200 bytes) is refused before any I/O.
func TestInspect_HolderDescription(t *testing.T) {
	b := miniBackend(t)
	rdb, n := b.client(t)
	ctx := context.Background()
	lk, err := redislock.New(rdb, redislock.WithHolder("web-3 pid 4711")).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	info, err := redislock.New(rdb).Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "web-3 pid 4711", info.Holders[0].Description)
	require.NoError(t, lk.Release(ctx))
	lk, err = redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), rdb.DBSize(ctx).Val(), "the lock key alone: no description stored")
	require.NoError(t, lk.Release(ctx))

	lk, err = redislock.New(rdb, redislock.WithHolder("")).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Zero(t, rdb.Exists(ctx, sideKey("k", "holders")).Val(), "no description stored")
	info, err = redislock.New(rdb).Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Empty(t, info.Holders[0].Description)
	require.NoError(t, lk.Release(ctx))

	before := n.Load()
	for _, bad := range []string{string([]byte{0xff}), "two\nlines", "a \x1b[31m red", "tab\there", "rlo \u202e", strings.Repeat("x", 201)} {
		_, err = redislock.New(rdb, redislock.WithHolder(bad)).Obtain(ctx, "k", time.Minute)
		assert.ErrorIs(t, err, redislock.ErrInvalidOption, "%q", bad)
	}
	_, err = redislock.New(rdb).Inspect(ctx, "")
	assert.ErrorIs(t, err, redislock.ErrInvalidKey)
	assert.Equal(t, before, n.Load(), "nothing sent")
}

// WithHolder given to a call describes that call's lock, in place of the
// Locker's: Inspect reports each holder with its own (a reader per job, a
// set's every key, a joined call none of its own: it holds nothing new);
// a quorum Locker's masters too.
func TestInspect_HolderPerCall(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb, redislock.WithHolder("web-3"))
	a, err := locker.Obtain(ctx, "r", time.Minute, redislock.WithShared(), redislock.WithHolder("job 1"))
	require.NoError(t, err)
	c, err := locker.TryObtain(ctx, "r", time.Minute, redislock.WithShared(), redislock.WithHolder("job 2"))
	require.NoError(t, err)
	d, err := locker.Obtain(ctx, "r", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	info, err := locker.Inspect(ctx, "r")
	require.NoError(t, err)
	got := map[string]string{}
	for _, h := range info.Holders {
		got[h.Token] = h.Description
	}
	assert.Equal(t, map[string]string{a.Token(): "job 1", c.Token(): "job 2", d.Token(): "web-3"}, got)
	for _, lk := range []*redislock.Lock{a, c, d} {
		require.NoError(t, lk.Release(ctx))
	}

	require.NoError(t, locker.WithLockMulti(ctx, []string{"s1", "s2"}, func(ctx context.Context) error {
		for _, key := range []string{"s1", "s2"} {
			info, err := locker.Inspect(ctx, key)
			require.NoError(t, err)
			require.Len(t, info.Holders, 1)
			assert.Equal(t, "cart 9", info.Holders[0].Description, key)
		}
		return nil
	}, redislock.WithHolder("cart 9")))

	q := redislock.NewQuorum([]redis.UniversalClient{rdb}, redislock.WithHolder("web-3"))
	lk, err := q.Obtain(ctx, "q", time.Minute, redislock.WithHolder("job 3"))
	require.NoError(t, err)
	info, err = q.Inspect(ctx, "q")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	assert.Equal(t, "job 3", info.Holders[0].Description)
	require.NoError(t, lk.Release(ctx))
}

// Inspect is one round trip; the first after Redis lost its scripts
// (SCRIPT FLUSH, a restart) is two: go-redis sends the script in full once.
func TestInspect_RoundTrips(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, sent := b.client(t)
	locker := redislock.New(rdb)
	lk, err := locker.Obtain(ctx, "x", time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	for _, want := range []int64{2, 1} {
		before := sent.Load()
		info, err := locker.Inspect(ctx, "x")
		require.NoError(t, err)
		assert.Equal(t, redislock.ModeExclusive, info.Mode)
		assert.Equal(t, want, sent.Load()-before)
	}
	require.NoError(t, lk.Release(ctx))
}

// Inspect writes nothing, whatever the key holds: run by a Redis ACL user
// that may run every command but those that write (-@write) or publish,
// also from a script (Redis checks a script's commands against its
// caller's ACL, and logs each one it refuses, even under redis.pcall), it
// succeeds on a free key, a plain and a fenced, described lock, readers, a
// semaphore, each with waiters in line, strings this library did not write
// (with and without an expiry), a list, a hash, a set, a sorted set and a
// stream, also after SCRIPT FLUSH (the script sent in full), on a single
// node and on a quorum Locker; and Redis logged no refused command of that
// user. The user's writes are refused and logged: a SET, a DEL from a
// script, one under redis.pcall, and the library's own TryObtain.
func TestInspect_WritesNothing(t *testing.T) {
	readOnly := func(t *testing.T, srv *redistest.Server) func(*redis.Options) {
		srv.Do(t, "ACL", "SETUSER", "inspector", "on", ">pw", "~*", "&*", "+@all", "-@write", "-publish", "-spublish")
		return func(o *redis.Options) { o.Username, o.Password = "inspector", "pw" }
	}
	refusals := func(t *testing.T, srv *redistest.Server) int {
		log, _ := srv.Do(t, "ACL", "LOG").([]any)
		return len(log)
	}
	t.Run("the ACL catches writes", func(t *testing.T) {
		b := realBackend(t)
		ctx := ctxT(t, 10*time.Second)
		c, _ := b.client(t, readOnly(t, b.srv))
		require.ErrorContains(t, c.Set(ctx, "k", "v", 0).Err(), "NOPERM")
		refused := regexp.MustCompile(`can't run this command|no permissions to run`) // Redis 7.0; Redis 8, Valkey
		err := c.Eval(ctx, `return redis.call("DEL", KEYS[1])`, []string{"k"}).Err()
		require.Error(t, err)
		require.Regexp(t, refused, err.Error())
		b.srv.Do(t, "ACL", "LOG", "RESET")
		require.NoError(t, c.Eval(ctx, `redis.pcall("DEL", KEYS[1]); return 1`, []string{"k"}).Err())
		assert.Equal(t, 1, refusals(t, b.srv), "a write under redis.pcall is logged")
		_, err = redislock.New(c).TryObtain(ctx, "k", time.Minute)
		require.Error(t, err)
		require.Regexp(t, refused, err.Error(), "the library's writes are refused")
		assert.Equal(t, 2, refusals(t, b.srv))
		require.NoError(t, c.Exists(ctx, "k").Err(), "the user may read")
	})
	t.Run("single node", func(t *testing.T) {
		b := realBackend(t)
		ctx := ctxT(t, 20*time.Second)
		admin, _ := b.client(t)
		reader, _ := b.client(t, readOnly(t, b.srv))
		inspector := redislock.New(reader)
		writer := redislock.New(admin, redislock.WithFencing(), redislock.WithHolder("web-3 pid 4711"))
		var waiters []*redislock.Locker
		wctx, stopWaiting := context.WithCancel(ctx)
		defer stopWaiting()
		_, err := redislock.New(admin).Obtain(ctx, "exclusive", time.Minute)
		require.NoError(t, err)
		_, err = writer.Obtain(ctx, "fenced", time.Minute)
		require.NoError(t, err)
		for range 2 {
			_, err = writer.Obtain(ctx, "shared", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			_, err = writer.Obtain(ctx, "semaphore", time.Minute, redislock.WithPermits(2))
			require.NoError(t, err)
		}
		for key, opts := range map[string][][]redislock.Option{
			"fenced":    {nil, {redislock.WithFencing()}},
			"shared":    {nil, {redislock.WithShared()}}, // a writer, then a reader behind it
			"semaphore": {{redislock.WithPermits(2)}, {redislock.WithPermits(2), redislock.WithFencing()}},
		} {
			for i, o := range opts {
				w := redislock.New(b.mustClient(t))
				waiters = append(waiters, w)
				obtainAsync(wctx, w, key, time.Minute, o...)
				waitWaiting(t, writer, key, i+1)
			}
		}
		require.NoError(t, admin.Set(ctx, "foreign", "another library's lock", time.Minute).Err())
		require.NoError(t, admin.Set(ctx, "foreign-forever", "an operator's block", 0).Err())
		require.NoError(t, admin.RPush(ctx, "list", "a").Err())
		require.NoError(t, admin.HSet(ctx, "hash", "f", "v").Err())
		require.NoError(t, admin.SAdd(ctx, "set", "a").Err())
		require.NoError(t, admin.ZAdd(ctx, "zset", redis.Z{Score: 1, Member: "a"}).Err())
		require.NoError(t, admin.XAdd(ctx, &redis.XAddArgs{Stream: "stream", Values: []string{"f", "v"}}).Err())
		b.srv.Do(t, "ACL", "LOG", "RESET")
		for i, c := range []struct {
			key     string
			mode    redislock.Mode
			waiting int
		}{
			{"free", redislock.ModeFree, 0}, {"exclusive", redislock.ModeExclusive, 0}, {"fenced", redislock.ModeExclusive, 2},
			{"shared", redislock.ModeShared, 2}, {"semaphore", redislock.ModeSemaphore, 2},
			{"foreign", redislock.ModeForeign, 0}, {"foreign-forever", redislock.ModeForeign, 0},
			{"list", redislock.ModeOther, 0}, {"hash", redislock.ModeOther, 0}, {"set", redislock.ModeOther, 0},
			{"zset", redislock.ModeOther, 0}, {"stream", redislock.ModeOther, 0},
		} {
			if i%4 == 0 {
				require.NoError(t, admin.ScriptFlush(ctx).Err())
			}
			info, err := inspector.Inspect(ctx, c.key)
			if assert.NoError(t, err, c.key) {
				assert.Equal(t, c.mode, info.Mode, c.key)
				assert.Equal(t, c.waiting, info.Waiting, c.key)
			}
		}
		assert.Zero(t, refusals(t, b.srv), "Inspect tried to write")
		stopWaiting()
		for _, w := range waiters {
			require.NoError(t, w.Shutdown(ctx))
		}
	})
	t.Run("quorum", func(t *testing.T) {
		servers := startMasters(t, 3)
		ctx := ctxT(t, 10*time.Second)
		var opts []func(*redis.Options)
		for _, srv := range servers {
			opts = append(opts, readOnly(t, srv))
		}
		inspector := redislock.NewQuorum(quorumClients(t, addrsOf(servers), opts[0]))
		obtainOnAll(t, ctx, redislock.NewQuorum(quorumClients(t, addrsOf(servers)), redislock.WithFencing()), servers, "held", time.Minute)
		for _, srv := range servers {
			srv.Do(t, "ACL", "LOG", "RESET")
		}
		for _, key := range []string{"free", "held"} {
			_, err := inspector.Inspect(ctx, key)
			assert.NoError(t, err, key)
		}
		time.Sleep(50 * time.Millisecond) // the master after the fastest majority answered too
		for _, srv := range servers {
			assert.Zero(t, refusals(t, srv), "Inspect tried to write on %s", srv.Addr())
		}
	})
}
