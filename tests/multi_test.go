package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
)

// A set is taken all or nothing: while another owner holds one of its
// keys, TryObtainMulti fails with ErrNotObtained and takes none of the
// others; ObtainMulti waits, then holds every key at once, with one token;
// its Release frees them all and leaves nothing behind.
func TestObtainMulti_AllOrNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		keys := []string{"cart:a", "cart:b", "cart:c"}
		other, err := redislock.New(rdb).Obtain(ctx, "cart:b", time.Minute)
		require.NoError(t, err)
		locker := redislock.New(rdb)
		_, err = locker.TryObtainMulti(ctx, keys, time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.Zero(t, rdb.Exists(ctx, "cart:a", "cart:c").Val(), "a key of the set taken while another was held")

		got := make(chan obtained, 1)
		go func() {
			lk, err := locker.ObtainMulti(ctx, keys, time.Minute)
			got <- obtained{lk, err, time.Now()}
		}()
		waitQueued(t, rdb, "cart:b", 1)
		place := queued(t, rdb, "cart:b")[0]
		for _, k := range []string{"cart:a", "cart:c"} { // free, or handed to the waiting set (see lock-family.md)
			assert.Contains(t, []string{"", place}, rdb.Get(ctx, k).Val(), "%s taken by another token while the set waits", k)
		}
		select {
		case r := <-got:
			t.Fatalf("ObtainMulti returned while a key was held by another owner: %v", r.err)
		default:
		}
		require.NoError(t, other.Release(ctx))
		r := <-got
		require.NoError(t, r.err)
		assert.Equal(t, keys, r.lock.Keys())
		assert.Equal(t, "cart:a", r.lock.Key())
		for _, k := range keys {
			assert.Equal(t, r.lock.Token(), rdb.Get(ctx, k).Val(), k)
		}
		require.NoError(t, r.lock.Release(ctx))
		requireOnlyMarks(t, rdb)
	})
}

// Bad input gets a typed error, with nothing sent: no keys, a key given
// twice, more than MaxKeys keys, an invalid key, WithPermits, WithTTL on
// ObtainMulti, and a set on a quorum Locker.
func TestObtainMulti_BadInput(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	locker := redislock.New(rdb)
	quorum := redislock.NewQuorum([]redis.UniversalClient{rdb})
	many := make([]string, redislock.MaxKeys+1)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name string
		l    *redislock.Locker
		keys []string
		opts []redislock.Option
		want error
	}{
		{"no keys", locker, nil, nil, redislock.ErrInvalidKey},
		{"empty keys", locker, []string{}, nil, redislock.ErrInvalidKey},
		{"a key twice", locker, []string{"a", "b", "a"}, nil, redislock.ErrInvalidKey},
		{"too many keys", locker, many, nil, redislock.ErrInvalidKey},
		{"an empty key", locker, []string{"a", ""}, nil, redislock.ErrInvalidKey},
		{"a side key's name", locker, []string{"a", "{a}:rl1:line:a"}, nil, redislock.ErrInvalidKey},
		{"permits", locker, []string{"a", "b"}, []redislock.Option{redislock.WithPermits(2)}, redislock.ErrInvalidOption},
		{"WithTTL", locker, []string{"a", "b"}, []redislock.Option{redislock.WithTTL(time.Second)}, redislock.ErrInvalidOption},
		{"a quorum", quorum, []string{"a", "b"}, nil, redislock.ErrInvalidOption},
	} {
		before := n.Load()
		_, err := c.l.ObtainMulti(ctx, c.keys, time.Minute, c.opts...)
		assert.ErrorIs(t, err, c.want, c.name)
		_, err = c.l.TryObtainMulti(ctx, c.keys, time.Minute, c.opts...)
		assert.ErrorIs(t, err, c.want, c.name)
		assert.Equal(t, before, n.Load(), "%s: commands sent", c.name)
	}
	assert.Len(t, many[:redislock.MaxKeys], 64, "MaxKeys as documented")
	_, err := locker.ObtainMulti(ctx, many[:redislock.MaxKeys], time.Minute)
	assert.NoError(t, err, "MaxKeys keys")
}

// A set waits in the line of each of its keys, in its turn: one-key callers
// that keep taking one of its keys do not starve it; once its place is
// first in line, it takes the keys as soon as they are free.
func TestObtainMulti_NotStarvedByOneKeyCallers(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := redislock.New(b.mustClient(t))
			for {
				select {
				case <-stop:
					return
				default:
				}
				lk, err := l.Obtain(ctx, "hot", time.Second)
				if assert.NoError(t, err) {
					time.Sleep(2 * time.Millisecond)
					_ = lk.Release(ctx)
				}
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	lk, err := redislock.New(rdb).ObtainMulti(ctx, []string{"hot", "cold"}, time.Second, redislock.WithWait(5*time.Second))
	waited := time.Since(start)
	if assert.NoError(t, err) {
		assert.NoError(t, lk.Release(ctx))
	}
	close(stop)
	wg.Wait()
	t.Logf("the set got its keys after %v", waited)
	assert.Less(t, waited, 2*time.Second)
}

// Dining philosophers in one process: 5 keys in a ring, 5 Lockers each
// taking its two neighbours' keys as a set, and 5 one-key callers, some
// giving up mid-wait: no key is ever held by two at once, and every
// philosopher eats (no deadlock, no starvation).
func TestObtainMulti_DiningPhilosophers(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	const n, run = 5, 2 * time.Second
	key := func(i int) string { return "fork:" + strconv.Itoa(i%n) }
	var holders [n]atomic.Int32
	eat := func(keys []string) {
		for _, k := range keys {
			i, _ := strconv.Atoi(strings.TrimPrefix(k, "fork:"))
			if holders[i].Add(1) != 1 {
				t.Errorf("%s held twice", k)
			}
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		for _, k := range keys {
			i, _ := strconv.Atoi(strings.TrimPrefix(k, "fork:"))
			holders[i].Add(-1)
		}
	}
	var meals [2 * n]atomic.Int32
	var wg sync.WaitGroup
	end := time.Now().Add(run)
	for p := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := redislock.New(b.mustClient(t))
			for time.Now().Before(end) {
				c, cancel := context.WithTimeout(ctx, time.Duration(50+rand.IntN(1000))*time.Millisecond)
				var keys []string
				var lk *redislock.Lock
				var err error
				if p < n {
					keys = []string{key(p), key(p + 1)}
					lk, err = l.ObtainMulti(c, keys, time.Second)
				} else {
					keys = []string{key(p)}
					lk, err = l.Obtain(c, keys[0], time.Second)
				}
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue // gave up mid-wait (ErrNotObtained; or a reply later than the deadline)
				}
				if !assert.NoError(t, err) {
					return
				}
				eat(keys)
				meals[p].Add(1)
				assert.NoError(t, lk.Release(ctx))
			}
		}()
	}
	wg.Wait()
	var counts []int32
	for p := range meals {
		counts = append(counts, meals[p].Load())
		assert.Positive(t, meals[p].Load(), "caller %d never ate", p)
	}
	t.Logf("meals: %v (sets first, then one-key callers)", counts)
}

// A set that nobody waits for, without a fence or a description, is a plain
// lock of several keys: one script run each way (take.lua takes every key
// or none, drop.lua deletes them), and nothing in Redis but its keys, which
// hold its token; a set whose key is held by another owner takes none of
// them and falls back to waiting in line.
func TestObtainMulti_PlainSetCostsOneScriptEachWay(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	loadScripts(t, rdb)
	require.NoError(t, rdb.Ping(ctx).Err())
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
	l := redislock.New(rdb)
	before := n.Load()
	lk, err := l.ObtainMulti(ctx, []string{"a", "b", "c"}, time.Minute)
	require.NoError(t, err)
	keys := rdb.Keys(ctx, "*").Val()
	slices.Sort(keys)
	assert.Equal(t, []string{"a", "b", "c"}, keys, "the lock keys alone")
	assert.Equal(t, []any{lk.Token(), lk.Token(), lk.Token()}, rdb.MGet(ctx, "a", "b", "c").Val())
	require.NoError(t, lk.Release(ctx))
	assert.Equal(t, []string{"take", "keys", "mget", "drop"}, ran)
	assert.Equal(t, int64(2), n.Load()-before-2, "ObtainMulti and Release: one command each")
	assert.Zero(t, rdb.DBSize(ctx).Val(), "nothing left")

	other, err := l.Obtain(ctx, "c", time.Minute)
	require.NoError(t, err)
	_, err = l.TryObtainMulti(ctx, []string{"a", "b", "c"}, time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	assert.Zero(t, rdb.Exists(ctx, "a", "b").Val(), "none of them taken")
	waiting := make(chan obtained, 1)
	go func() {
		lk, err := l.ObtainMulti(ctx, []string{"a", "b", "c"}, time.Minute)
		waiting <- obtained{lk, err, time.Now()}
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, other.Release(ctx))
	r := <-waiting
	require.NoError(t, r.err, "the set waited in line")
	require.NoError(t, r.lock.Release(ctx))
}

// Fencing applies to every key of a set: each gets a fence of its own,
// larger than the fence of every earlier holder of that key.
func TestObtainMulti_FencePerKey(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb, redislock.WithFencing())
	one, err := locker.Obtain(ctx, "acct:1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, one.Release(ctx))
	lk, err := locker.ObtainMulti(ctx, []string{"acct:1", "acct:2"}, time.Minute)
	require.NoError(t, err)
	fences := lk.Fences()
	require.Len(t, fences, 2)
	assert.Greater(t, fences[0], one.Fence(), "acct:1's fence grows")
	assert.Positive(t, fences[1])
	assert.Zero(t, lk.Fence(), "a set's Fence: each key has its own (FenceOf)")
	assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "resource", "v", lk.Fence()), redislock.ErrInvalidOption, "a set's Fence fences nothing")
	assert.Equal(t, fences[1], lk.FenceOf("acct:2"))
	assert.Zero(t, lk.FenceOf("acct:3"), "a key the set does not hold")
	require.NoError(t, lk.Release(ctx))
	next, err := locker.Obtain(ctx, "acct:2", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, next.Fence(), fences[1], "acct:2's next holder")
	require.NoError(t, next.Release(ctx))
}

// Readers take a set as readers (WithShared): two reader sets hold
// overlapping keys at once; a writer set waits for both, and readers that
// come after the writer wait behind it.
func TestObtainMulti_Shared(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	l1, l2 := redislock.New(rdb), redislock.New(b.mustClient(t))
	r1, err := l1.ObtainMulti(ctx, []string{"x", "y"}, time.Minute, redislock.WithShared())
	require.NoError(t, err)
	r2, err := l2.ObtainMulti(ctx, []string{"y", "z"}, time.Minute, redislock.WithShared())
	require.NoError(t, err)
	_, err = redislock.New(b.mustClient(t)).TryObtainMulti(ctx, []string{"x", "z"}, time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained, "a writer while readers hold")
	w := make(chan obtained, 1)
	go func() {
		lk, err := redislock.New(b.mustClient(t)).ObtainMulti(ctx, []string{"x", "z"}, time.Minute)
		w <- obtained{lk, err, time.Now()}
	}()
	waitQueued(t, rdb, "x", 1)
	require.NoError(t, r1.Release(ctx))
	require.NoError(t, r2.Release(ctx))
	got := <-w
	require.NoError(t, got.err)
	require.NoError(t, got.lock.Release(ctx))
}

// Losing any key is losing the lock: a key of a kept set deleted under its
// holder ends the kept context with ErrLockLost, and Release then returns ErrNotHeld naming it, and it alone, whether or not
// the Locker's give-back of the other keys (in the background) ran first;
// the other keys are released. Refresh of a set found lost names the key
// too.
func TestObtainMulti_LostKeyIsLostLock(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	l := redislock.New(rdb)
	for i := range 8 { // the Release races the give-back: after it, or before
		lk, err := l.ObtainMulti(ctx, []string{"s:1", "s:2", "s:3"}, 300*time.Millisecond)
		require.NoError(t, err)
		kept := lk.KeepAlive(ctx)
		time.Sleep(time.Duration(i) * 13 * time.Millisecond)
		require.NoError(t, rdb.Del(ctx, "s:2").Err())
		select {
		case <-kept.Done():
			assert.ErrorIs(t, context.Cause(kept), redislock.ErrLockLost)
		case <-time.After(2 * time.Second):
			t.Fatal("the kept context outlived a lost key")
		}
		assert.False(t, time.Now().Before(lk.Until()), "Until after the loss")
		if i%2 == 0 {
			require.NoError(t, l.Shutdown(ctx)) // the give-back ran
		}
		err = lk.Release(ctx)
		require.ErrorIs(t, err, redislock.ErrNotHeld)
		assert.Contains(t, err.Error(), `"s:2"`)
		assert.NotContains(t, err.Error(), `"s:1"`)
		assert.NotContains(t, err.Error(), `"s:3"`)
		require.NoError(t, l.Shutdown(ctx))
		assert.Zero(t, rdb.Exists(ctx, "s:1", "s:3").Val(), "the keys still held were released")
	}

	lk, err := l.ObtainMulti(ctx, []string{"r:1", "r:2"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, "r:2").Err())
	err = lk.Refresh(ctx, time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), `"r:2"`)
	assert.NotContains(t, err.Error(), `"r:1"`)
	require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
	assert.Zero(t, rdb.Exists(ctx, "r:1").Val(), "the key still held was released")

	lk, err = l.ObtainMulti(ctx, []string{"t:1", "t:2"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, "t:2").Err())
	err = lk.Release(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), `"t:2"`)
	assert.NotContains(t, err.Error(), `"t:1"`)
	assert.Zero(t, rdb.Exists(ctx, "t:1").Val(), "the key still held was released")
}

// Reentrancy: a nested one-key call on a key of a held set joins the set,
// sending nothing; a nested set of keys all held joins it too; a nested
// set of which only some keys are held fails at once (it would wait for
// itself).
func TestObtainMulti_NestedCallsJoin(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	locker := redislock.New(rdb, redislock.WithFencing())
	lk, err := locker.ObtainMulti(ctx, []string{"a", "b", "c"}, time.Minute)
	require.NoError(t, err)
	held := lk.Context(ctx)
	before := n.Load()
	one, err := locker.Obtain(held, "b", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), one.Token())
	assert.Equal(t, lk.Fences()[1], one.Fence(), "the joined key's fence")
	two, err := locker.TryObtainMulti(held, []string{"c", "a"}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), two.Token())
	assert.Equal(t, before, n.Load(), "joining sends nothing")
	_, err = locker.ObtainMulti(held, []string{"a", "d"}, time.Minute)
	assert.ErrorIs(t, err, redislock.ErrInvalidOption)
	require.NoError(t, one.Release(ctx))
	require.NoError(t, two.Release(ctx))
	assert.Equal(t, int64(3), rdb.Exists(ctx, "a", "b", "c").Val(), "held while a handle is")
	require.NoError(t, lk.Release(ctx))
	assert.Zero(t, rdb.Exists(ctx, "a", "b", "c").Val(), "released with the last handle")
}

// In WithLock's fn (and WithLockMulti's), FromContext gives the lock with
// no round trip: its fence (for SetFenced), token and Until.
func TestFromContext_InWithLock(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	locker := redislock.New(rdb, redislock.WithFencing())
	assert.Nil(t, redislock.FromContext(ctx))
	require.NoError(t, locker.WithLock(ctx, "job", func(ctx context.Context) error {
		before := n.Load()
		lk := redislock.FromContext(ctx)
		require.NotNil(t, lk)
		assert.Equal(t, "job", lk.Key())
		assert.Positive(t, lk.Fence())
		assert.True(t, time.Now().Before(lk.Until()))
		assert.Equal(t, lk.Token(), rdb.Get(ctx, "job").Val())
		assert.Equal(t, before+1, n.Load(), "only the GET above")
		return redislock.SetFenced(ctx, rdb, "resource", "v", lk.Fence())
	}))
	require.NoError(t, locker.WithLockMulti(ctx, []string{"p", "q"}, func(ctx context.Context) error {
		lk := redislock.FromContext(ctx)
		require.NotNil(t, lk)
		assert.Equal(t, []string{"p", "q"}, lk.Keys())
		assert.Len(t, lk.Fences(), 2)
		return nil
	}))
}

// All or nothing under a fault: the reply to a set's acquisition is lost
// (the connection dies after Redis ran it): the call fails, or succeeds
// whole; if it failed, nothing is held afterwards.
func TestObtainMulti_LostReplyLeavesNothing(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	loadScripts(t, rdb)
	dc := &deadConns{}
	c, _ := b.client(t, func(o *redis.Options) { o.Dialer, o.MaxRetries, o.ReadTimeout = dc.dial, -1, 200*time.Millisecond })
	locker := redislock.New(c)
	for i := range 5 {
		keys := []string{fmt.Sprintf("f%d:a", i), fmt.Sprintf("f%d:b", i)}
		dc.killNext(sentScript(acquireScript, ""))
		lk, err := locker.TryObtainMulti(ctx, keys, time.Minute)
		if err == nil {
			assert.Equal(t, int64(2), rdb.Exists(ctx, keys...).Val(), "a set held in part")
			require.NoError(t, lk.Release(ctx))
			continue
		}
		require.NoError(t, locker.Shutdown(ctx))
		assert.Zero(t, rdb.Exists(ctx, keys...).Val(), "a failed set left keys: %v", err)
	}
}

// The children of TestObtainMulti_DiningPhilosophersProcesses are told what
// to do through these environment variables.
const (
	dpChildEnv = "REDISLOCK_DP_CHILD" // the child's seat; set only in children
	dpAddrEnv  = "REDISLOCK_DP_ADDR"  // Redis address
	dpOutEnv   = "REDISLOCK_DP_OUT"   // file to write the meals to
	dpUntilEnv = "REDISLOCK_DP_UNTIL" // stop at this wall-clock time (Unix ns)
)

// Dining philosophers across processes: 5 forks (keys) in a ring, 5
// processes, each taking its two neighbours' forks as a set (ObtainMulti),
// and in each process a one-key caller of its left fork; half of the calls
// give up mid-wait (a deadline of 10-200 ms). Every meal is recorded as a
// [start, end] interval per fork (wall-clock, one machine): no fork is ever
// held by two at once, and every process's philosopher eats (no deadlock,
// no starvation). 3 s; 20 s with -args -stress.
func TestObtainMulti_DiningPhilosophersProcesses(t *testing.T) {
	if os.Getenv(dpChildEnv) != "" {
		dpChild(t)
		return
	}
	b := realBackend(t)
	run := 3 * time.Second
	if *stress {
		run = 20 * time.Second
	}
	dir := t.TempDir()
	until := time.Now().Add(run + time.Second) // a second for the children to start
	ctx, cancel := context.WithTimeout(context.Background(), run+time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for seat := range 5 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), dpChildEnv+"="+strconv.Itoa(seat), dpAddrEnv+"="+b.addr,
			dpOutEnv+"="+filepath.Join(dir, strconv.Itoa(seat)), dpUntilEnv+"="+strconv.FormatInt(until.UnixNano(), 10))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	type meal struct {
		fork       int
		start, end int64
		set        bool
	}
	var meals []meal
	for seat, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "seat %d:\n%s", seat, outs[seat])
		data, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(seat)))
		require.NoError(t, err)
		sets, singles := 0, 0
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var m meal
			var kind string
			_, err := fmt.Sscan(line, &kind, &m.fork, &m.start, &m.end)
			require.NoError(t, err, line)
			m.set = kind == "set"
			if m.set {
				sets++
			} else {
				singles++
			}
			meals = append(meals, m)
		}
		t.Logf("seat %d: %d meals as a set (two forks each), %d as one key", seat, sets/2, singles)
		assert.Positive(t, sets, "seat %d's philosopher never ate", seat)
	}
	for fork := range 5 {
		var on []meal
		for _, m := range meals {
			if m.fork == fork {
				on = append(on, m)
			}
		}
		slices.SortFunc(on, func(a, b meal) int { return cmpInt64(a.start, b.start) })
		for i := 1; i < len(on); i++ {
			assert.GreaterOrEqual(t, on[i].start, on[i-1].end, "fork %d held twice at once", fork)
		}
	}
}

// dpChild is one process of TestObtainMulti_DiningPhilosophersProcesses:
// its seat's philosopher (a set of two forks) and a one-key caller of its
// left fork, until the time given.
func dpChild(t *testing.T) {
	seat, err := strconv.Atoi(os.Getenv(dpChildEnv))
	require.NoError(t, err)
	stop, err := strconv.ParseInt(os.Getenv(dpUntilEnv), 10, 64)
	require.NoError(t, err)
	out, err := os.Create(os.Getenv(dpOutEnv))
	require.NoError(t, err)
	defer out.Close()
	var mu sync.Mutex
	record := func(kind string, forks []int, start time.Time) {
		end := time.Now().UnixNano()
		mu.Lock()
		defer mu.Unlock()
		for _, f := range forks {
			fmt.Fprintln(out, kind, f, start.UnixNano(), end)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(dpAddrEnv)})
	defer rdb.Close()
	locker := redislock.New(rdb)
	fork := func(i int) string { return "fork:" + strconv.Itoa(i%5) }
	var wg sync.WaitGroup
	for _, set := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().UnixNano() < stop {
				wait := time.Second
				if rand.IntN(2) == 0 {
					wait = time.Duration(10+rand.IntN(190)) * time.Millisecond // gives up mid-wait, often
				}
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				var lk *redislock.Lock
				var err error
				forks := []int{seat % 5, (seat + 1) % 5}
				if set {
					lk, err = locker.ObtainMulti(ctx, []string{fork(forks[0]), fork(forks[1])}, 5*time.Second)
				} else {
					forks = forks[:1]
					lk, err = locker.Obtain(ctx, fork(forks[0]), 5*time.Second)
				}
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					continue // gave up (ErrNotObtained; or, on a busy machine, a reply later than its deadline)
				}
				if !assert.NoError(t, err) {
					return
				}
				start := time.Now()
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				kind := "one"
				if set {
					kind = "set"
				}
				record(kind, forks, start)
				assert.NoError(t, lk.Release(context.Background()))
			}
		}()
	}
	wg.Wait()
	assert.NoError(t, locker.Shutdown(context.Background()))
}

// All or nothing under a frozen Redis: a set's acquisition whose deadline
// passes while Redis is frozen (its script may run when Redis thaws) fails,
// and once Redis thaws and the Locker's background work is done, none of
// its keys is held and no place is left in any line.
func TestObtainMulti_FrozenRedisLeavesNothing(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(b.mustClient(t))
	keys := []string{"frozen:a", "frozen:b", "frozen:c"}
	b.srv.Freeze(t)
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := locker.ObtainMulti(c, keys, time.Minute)
	cancel()
	b.srv.Thaw(t)
	require.Error(t, err)
	require.NoError(t, locker.Shutdown(ctx))
	assert.Zero(t, rdb.Exists(ctx, keys...).Val(), "a key of the failed set is held")
	for _, k := range keys {
		assert.Empty(t, queued(t, rdb, k), "a place left in %s's line", k)
	}
}

// A set's lease is kept and refreshed as one key's is: KeepAlive renews
// every key of a set with a 300 ms lease for a second, no renewal failing;
// Refresh sets every key's lease; TTL is the shortest of them; Release then
// releases the set (on one node, and on a set whose keys share a slot).
func TestObtainMulti_KeptAndRefreshed(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	var failures atomic.Int32
	locker := redislock.New(rdb, redislock.WithHooks(redislock.Hooks{Renew: func(_ context.Context, e redislock.RenewEvent) {
		if e.Outcome != redislock.OutcomeRenewed {
			failures.Add(1)
			t.Logf("renewal: %s %v", e.Outcome, e.Err)
		}
	}}))
	for _, mode := range []redislock.Option{redislock.WithExclusive(), redislock.WithShared()} {
		keys := []string{"kept:a", "kept:b", "kept:c"}
		lk, err := locker.ObtainMulti(ctx, keys, 300*time.Millisecond, mode)
		require.NoError(t, err)
		kept := lk.KeepAlive(ctx)
		time.Sleep(time.Second)
		require.NoError(t, kept.Err(), "a kept set was told it is lost")
		assert.Zero(t, failures.Load(), "renewals of a set failed")
		require.NoError(t, lk.Refresh(ctx, 5*time.Second))
		left, err := lk.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, left, 4*time.Second, "TTL after Refresh(5s)")
		require.NoError(t, lk.Release(ctx))
		assert.Zero(t, rdb.Exists(ctx, keys...).Val())
	}
}

// Specifies ObtainMulti's doc ("keys must be 1 to MaxKeys distinct valid
// keys; WithPermits does not apply (ErrInvalidOption), nor does a quorum
// Locker"): also a set of one key is refused with ErrInvalidOption with
// WithPermits, and on a quorum Locker, with nothing sent.
func TestObtainMulti_OneKeyIsCheckedAsASet(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, n := b.client(t)
	locker := redislock.New(rdb)
	quorum := redislock.NewQuorum([]redis.UniversalClient{rdb})
	before := n.Load()
	lk, err := locker.ObtainMulti(ctx, []string{"a"}, time.Minute, redislock.WithPermits(2))
	assert.ErrorIs(t, err, redislock.ErrInvalidOption, "WithPermits on a one-key set")
	if lk != nil {
		_ = lk.Release(ctx)
	}
	lk, err = quorum.TryObtainMulti(ctx, []string{"q"}, time.Second)
	assert.ErrorIs(t, err, redislock.ErrInvalidOption, "a one-key set on a quorum Locker")
	if lk != nil {
		_ = lk.Release(ctx)
	}
	assert.Equal(t, before, n.Load(), "commands sent")
}

// Specifies docs/lock-family.md ("Losing any key is losing the lock: the
// kept context ends with ErrLockLost, and Release returns ErrNotHeld naming
// the keys that were lost (it releases the others)"): also when the loss
// was found by KeepAlive, the Release that follows names the lost key.
func TestObtainMulti_ReleaseAfterAKeptLossNamesTheKey(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	lk, err := locker.ObtainMulti(ctx, []string{"s:1", "s:2", "s:3"}, 300*time.Millisecond)
	require.NoError(t, err)
	kept := lk.KeepAlive(ctx)
	require.NoError(t, rdb.Set(ctx, "s:2", "intruder", time.Minute).Err())
	select {
	case <-kept.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the kept context outlived a lost key")
	}
	time.Sleep(100 * time.Millisecond) // KeepAlive's give-back runs first
	err = lk.Release(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), `"s:2"`, "Release's error: %v", err)
	require.NoError(t, locker.Shutdown(ctx))
	assert.Equal(t, "intruder", rdb.Get(ctx, "s:2").Val())
	assert.Zero(t, rdb.Exists(ctx, "s:1", "s:3").Val())
}

// A waiting set whose other keys are free, with its place first in their
// lines, gets them as soon as the key it waits for is handed to it: it asks
// Redis then, and is not left waiting for its next renewal of its places (a
// third of a second later), since no release will hand on a free key.
func TestObtainMulti_HandedOneKeyAsksForTheOthers(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	held, err := redislock.New(rdb).Obtain(ctx, "{s}b", time.Minute)
	require.NoError(t, err)
	l := redislock.New(rdb)
	got := make(chan time.Time, 1)
	go func() {
		lk, err := l.ObtainMulti(ctx, []string{"{s}a", "{s}b"}, time.Minute)
		if assert.NoError(t, err) {
			got <- time.Now()
			assert.NoError(t, lk.Release(ctx))
		}
	}()
	waitQueued(t, rdb, "{s}b", 1)
	time.Sleep(50 * time.Millisecond) // its place is confirmed, and its subscription up
	require.NoError(t, held.Release(ctx))
	released := time.Now()
	assert.Less(t, (<-got).Sub(released), 150*time.Millisecond, "the set got its last key at once")
	require.NoError(t, l.Shutdown(ctx))
	assert.Zero(t, rdb.DBSize(ctx).Val(), "nothing left")
}
