package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
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

// A plain lock (exclusive, no fence, no description, nobody waiting) costs
// Redis one script run each way, and writes the lock key and nothing else:
// Obtain sends the take script, Release the drop script, and between the
// two the key is the only key in Redis.
func TestPlain_OneCommandEachWayAndOneKey(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	loadScripts(t, rdb)
	require.NoError(t, rdb.Ping(ctx).Err()) // its connection's handshake (HELLO, CLIENT SETINFO) is done
	var ran []string
	var mu sync.Mutex
	rdb.AddHook(hook{before: func(cmd redis.Cmder) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case isScript(cmd, takeScript):
			ran = append(ran, "take")
		case isScript(cmd, dropScript):
			ran = append(ran, "drop")
		default:
			ran = append(ran, cmd.Name())
		}
	}})
	locker := redislock.New(rdb)
	before := n.Load()
	lk, err := locker.Obtain(ctx, "order:42", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"order:42"}, rdb.Keys(ctx, "*").Val(), "the lock key alone")
	require.NoError(t, lk.Release(ctx))
	assert.Equal(t, []string{"take", "keys", "drop"}, ran)
	assert.Equal(t, int64(2), n.Load()-before-1, "Obtain and Release: one command each (and the KEYS above)")
	assert.Zero(t, rdb.DBSize(ctx).Val(), "nothing left")
}

// The plain lock reads in one place: with context.Background(), one node
// and no option, the command that takes a plain lock reaches go-redis
// through at most 6 frames of the package, in at most 3 files, and the
// command that releases it through at most 5 frames in at most 2 files.
// (A go-redis hook takes the stack when the command is processed.) So
// nothing of replicas, the line, the lock family or the quorum stands
// between a plain lock and its one command each way.
func TestPlain_ShortPathToRedis(t *testing.T) {
	b := realBackend(t)
	rdb, _ := b.client(t)
	loadScripts(t, rdb)
	stacks := map[script][]runtime.Frame{}
	var mu sync.Mutex
	rdb.AddHook(hook{before: func(cmd redis.Cmder) {
		s := scriptOfCmd(cmd)
		if s != takeScript && s != dropScript {
			return
		}
		pcs := make([]uintptr, 64)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
		var ours []runtime.Frame
		for {
			f, more := frames.Next()
			if pkg, _, _ := strings.Cut(strings.TrimPrefix(f.Function, "github.com/seed5e0b76d9/"), "."); pkg == "redislock" || strings.HasPrefix(pkg, "redislock/internal/") {
				ours = append(ours, f) // the library's packages: the root and its layers
			}
			if !more {
				break
			}
		}
		mu.Lock()
		stacks[s] = ours
		mu.Unlock()
	}})
	ctx := context.Background()
	lk, err := redislock.New(rdb).Obtain(ctx, "order:42", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	for _, c := range []struct {
		s             script
		frames, files int
	}{{takeScript, 6, 3}, {dropScript, 5, 2}} {
		mu.Lock()
		stack := stacks[c.s]
		mu.Unlock()
		require.NotEmpty(t, stack, "no %s script ran", c.s)
		files := map[string]bool{}
		var lines []string
		for _, f := range stack {
			files[filepath.Base(f.File)] = true
			lines = append(lines, fmt.Sprintf("%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line))
		}
		t.Logf("%s: %d frames in %d files:\n%s", c.s, len(stack), len(files), strings.Join(lines, "\n"))
		assert.LessOrEqual(t, len(stack), c.frames, "frames of the package on the %s script's stack", c.s)
		assert.LessOrEqual(t, len(files), c.files, "files of the package on the %s script's stack", c.s)
	}
}

// Plain use leaves nothing behind: thousands of Obtain+Release cycles on
// many keys from 16 goroutines, and as many Obtains that give up on held
// keys (their deadline passes while they wait in line), leave no key of
// this library in Redis a second later but the keys still held.
func TestPlain_NothingLeftBehind(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb, _ := b.client(t, func(o *redis.Options) { o.PoolSize = 32 })
	locker := redislock.New(rdb)
	held := map[string]*redislock.Lock{}
	for i := range 20 {
		key := fmt.Sprintf("held:%d", i)
		lk, err := redislock.New(rdb).Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		held[key] = lk
	}
	var cycles, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				if i%5 == 0 { // give up on a held key, in line
					octx, cancel := context.WithTimeout(ctx, time.Duration(1+rand.IntN(30))*time.Millisecond)
					_, err := locker.Obtain(octx, fmt.Sprintf("held:%d", rand.IntN(20)), time.Minute)
					cancel()
					if assert.ErrorIs(t, err, context.DeadlineExceeded) { // and ErrNotObtained, once Redis answered
						gaveUp.Add(1)
					}
					continue
				}
				key := fmt.Sprintf("k:%d:%d", w, rand.IntN(100_000))
				lk, err := locker.Obtain(ctx, key, time.Minute)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, lk.Release(ctx))
				cycles.Add(1)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, locker.Shutdown(ctx))
	t.Logf("%d cycles, %d Obtains gave up", cycles.Load(), gaveUp.Load())
	require.Positive(t, gaveUp.Load())
	var left []string
	deadline := time.Now().Add(time.Second)
	for {
		left = left[:0]
		for _, k := range rdb.Keys(ctx, "*").Val() {
			if held[k] == nil {
				left = append(left, k)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Empty(t, left, "keys left a second after plain use")
	for _, lk := range held {
		require.NoError(t, lk.Release(ctx))
	}
}

// A plain lock whose acquire go-redis may have sent twice with its first
// copy still to run (the reply took longer than the client's ReadTimeout:
// go-redis gave up on the first connection and sent it again on another;
// here Redis was frozen meanwhile, and ran both copies when it thawed) is
// recognized when it is released: the release marks its token spent, the
// exception to "nothing left behind", since a late copy may still run; a
// lock whose acquire was answered in time leaves no mark.
func TestPlain_ResentAcquireMarksItsTokenAtRelease(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = 300*time.Millisecond, 2 })
	direct, _ := b.client(t)
	loadScripts(t, rdb)
	locker := redislock.New(rdb)

	require.NoError(t, rdb.Ping(ctx).Err()) // a connection: the try, not its dial, times out
	b.srv.Freeze(t)
	thawed := time.AfterFunc(450*time.Millisecond, func() { b.srv.Thaw(t) }) // after the first try timed out, before the second does
	defer thawed.Stop()
	lk, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err, "a copy found the key free, or held by its token")
	require.NoError(t, lk.Release(ctx))
	assert.Equal(t, int64(1), direct.Exists(ctx, sideKey("k", "spent:"+lk.Token())).Val(), "the resent token is spent")

	lk, err = locker.Obtain(ctx, "other", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	assert.Zero(t, direct.Exists(ctx, sideKey("other", "spent:"+lk.Token())).Val(), "a mark without a resend")
}

// A plain lock whose acquire's reply was lost on a reset connection (Redis
// ran it; go-redis sent it again at once, and the second copy found the key
// held by its token) leaves no mark when it is released: the first copy ran
// before the reset, so no copy can run late.
func TestPlain_ResetAcquireLeavesNoMark(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	proxy := faultproxy.New(t, b.addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis sends it again
	t.Cleanup(func() { _ = rdb.Close() })
	direct, _ := b.client(t)
	loadScripts(t, rdb)
	proxy.DropNextReply(sentScript(takeScript, ""))
	lk, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err, "the second copy found the key held by its token")
	require.NoError(t, lk.Release(ctx))
	assert.Empty(t, direct.Keys(ctx, "*").Val(), "nothing left behind")
}

// A plain lock works on go-redis's auto-pipelining client: locks are taken
// and released, two holders never overlap, nothing is left behind, and a
// ctx cancelled before its deadline ends an Obtain at once even while
// Redis is frozen (the auto-pipeliner does not stop at a cancel).
func TestPlain_AutoPipeliner(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	ap, err := rdb.AutoPipeline()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ap.Close() })
	locker := redislock.New(ap)
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				lk, err := locker.Obtain(ctx, fmt.Sprintf("k:%d", rand.IntN(4)), time.Minute)
				if !assert.NoError(t, err) {
					return
				}
				assert.LessOrEqual(t, inside.Add(1), int32(4), "more holders than keys")
				inside.Add(-1)
				assert.NoError(t, lk.Release(ctx))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, locker.Shutdown(ctx))
	assert.Empty(t, withoutMarks(t, rdb, rdb.Keys(ctx, "*").Val()), "keys left")
	assert.Empty(t, rdb.Keys(ctx, "*spent*").Val(), "the auto-pipeliner's sizing counted as a resend")

	b.srv.Freeze(t)
	defer b.srv.Thaw(t)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = locker.Obtain(cctx, "frozen", time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), time.Second, "a cancelled Obtain waited for a frozen Redis")
}
