package tests

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// A WithLock inside a WithLock of the same key on the same Locker, with the
// context the outer one gave fn, runs at once without a command to Redis,
// shares the outer lease and its lost-lock signal, and does not free the key
// when it ends: the outer one does. Without reentrancy it would wait for
// itself forever.
func TestReentrant_NestedWithLockRunsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, sent := b.client(t)
		locker := redislock.New(rdb)
		err := locker.WithLock(ctx, "lock", func(outer context.Context) error {
			token := rdb.Get(ctx, "lock").Val()
			before, start := sent.Load(), time.Now()
			err := locker.WithLock(outer, "lock", func(inner context.Context) error {
				assert.Less(t, time.Since(start), time.Second, "the nested WithLock waited")
				assert.Equal(t, token, rdb.Get(ctx, "lock").Val(), "the same hold")
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, before+1, sent.Load(), "the nested WithLock sent nothing (the one command is the test's GET)")
			assert.Equal(t, token, rdb.Get(ctx, "lock").Val(), "the nested WithLock's end did not free the key")
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, int64(0), rdb.Exists(ctx, "lock").Val(), "the outer WithLock's end freed it")
	})
}

// A context made by Lock.Context carries the lock: Obtain and TryObtain on
// it join the lock (same token and fence), each handle's Release ends one
// hold, and the key is released when the last hold ends, whichever it is.
func TestReentrant_HoldsAreCounted(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb, redislock.WithFencing())
		outer, err := locker.Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		lctx := outer.Context(ctx)
		inner, err := locker.TryObtain(lctx, "k", time.Minute)
		require.NoError(t, err)
		again, err := locker.Obtain(lctx, "k", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, outer.Token(), inner.Token())
		assert.Equal(t, outer.Fence(), again.Fence(), "one acquisition, one fence")

		require.NoError(t, outer.Release(ctx), "the outer hold ends first")
		assert.Equal(t, outer.Token(), rdb.Get(ctx, "k").Val(), "two holds left")
		require.ErrorIs(t, outer.Release(ctx), redislock.ErrNotHeld, "a handle ends once")
		require.NoError(t, inner.Refresh(ctx, 2*time.Minute), "a live handle refreshes the shared lease")
		require.NoError(t, inner.Release(ctx))
		assert.Equal(t, outer.Token(), rdb.Get(ctx, "k").Val(), "one hold left")
		require.NoError(t, again.Release(ctx))
		assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val(), "the last hold released the key")
		_, err = locker.TryObtain(lctx, "k", time.Minute)
		require.NoError(t, err, "a context carrying a released lock is another owner")
	})
}

// A nested call whose context does not carry the lock is another owner and
// waits as any would: here until its deadline.
func TestReentrant_ContextWithoutTheLockWaits(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	err := locker.WithLock(ctx, "lock", func(context.Context) error {
		octx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // dropped the ctx
		defer cancel()
		_, err := locker.Obtain(octx, "lock", time.Minute)
		assert.ErrorIs(t, err, redislock.ErrNotObtained)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		return nil
	})
	require.NoError(t, err)
}

// The nested-lock test of the Java tutorials: goroutines of two Lockers
// each take "lock" and, inside, the same lock again, and increment a counter
// with a non-atomic read and write: all complete, the counter is exact, and
// no two critical sections overlap.
func TestReentrant_NestedLocksExclude(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 30*time.Second)
		data, _ := b.client(t)
		var inside atomic.Int32
		var wg sync.WaitGroup
		for l := range 2 {
			rdb, _ := b.client(t)
			locker := redislock.New(rdb)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						err := locker.WithLock(ctx, "lock", func(ctx context.Context) error {
							return locker.WithLock(ctx, "lock", func(ctx context.Context) error {
								if inside.Add(1) != 1 {
									t.Errorf("two holders at once (Locker %d)", l)
								}
								defer inside.Add(-1)
								n, _ := data.Get(ctx, "counter").Int()
								return data.Set(ctx, "counter", n+1, 0).Err()
							})
						})
						assert.NoError(t, err)
					}
				}()
			}
		}
		wg.Wait()
		assert.Equal(t, "80", data.Get(ctx, "counter").Val())
	})
}

// A shared call joins an exclusive lock the context carries (a writer may
// read); an exclusive call on a context carrying a shared lock of the key
// fails at once with ErrInvalidOption (a reader cannot become the writer),
// and permits are not reentrant.
func TestReentrant_Modes(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)

	w, err := locker.Obtain(ctx, "rw", time.Minute)
	require.NoError(t, err)
	r, err := locker.TryObtain(w.Context(ctx), "rw", time.Minute, redislock.WithShared())
	require.NoError(t, err, "the writer reads")
	assert.Equal(t, w.Token(), r.Token())
	require.NoError(t, r.Release(ctx))
	require.NoError(t, w.Release(ctx))

	reader, err := locker.Obtain(ctx, "rw", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	_, err = locker.Obtain(reader.Context(ctx), "rw", time.Minute)
	require.ErrorIs(t, err, redislock.ErrInvalidOption)
	require.NoError(t, reader.Release(ctx))

	p, err := locker.Obtain(ctx, "sem", time.Minute, redislock.WithPermits(2))
	require.NoError(t, err)
	q, err := locker.TryObtain(p.Context(ctx), "sem", time.Minute, redislock.WithPermits(2))
	require.NoError(t, err)
	assert.NotEqual(t, p.Token(), q.Token(), "another permit")
	require.NoError(t, p.Release(ctx))
	require.NoError(t, q.Release(ctx))
}

// A nested WithLock shares the outer lease's lost-lock signal: when the lock
// is lost, the inner fn's context ends with ErrLockLost too.
func TestReentrant_SharesLostSignal(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb, redislock.WithTTL(500*time.Millisecond))
	err := locker.WithLock(ctx, "lock", func(outer context.Context) error {
		return locker.WithLock(outer, "lock", func(inner context.Context) error {
			require.NoError(t, rdb.Set(ctx, "lock", "intruder", time.Minute).Err())
			select {
			case <-inner.Done():
				assert.ErrorIs(t, context.Cause(inner), redislock.ErrLockLost)
				return context.Cause(inner)
			case <-time.After(2 * time.Second):
				return errors.New("the inner context outlived the lock")
			}
		})
	})
	require.ErrorIs(t, err, redislock.ErrLockLost)
}

// A context that carries a lock whose lease is over (not kept alive, and
// taken by another client since) joins nothing: Obtain and TryObtain on it
// return an error wrapping ErrLockLost at once, and WithLock does not call
// fn, rather than returning a lock another client holds.
func TestReentrant_LostLockIsNotJoined(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, sent := b.client(t)
	other, _ := b.client(t)
	locker := redislock.New(rdb)
	outer, err := locker.Obtain(ctx, "k", 200*time.Millisecond)
	require.NoError(t, err)
	cctx := outer.Context(ctx)
	time.Sleep(300 * time.Millisecond) // the lease ran out (a long pause)
	theirs, err := redislock.New(other).TryObtain(ctx, "k", time.Minute)
	require.NoError(t, err)

	before := sent.Load()
	for name, obtain := range map[string]func(context.Context, string, time.Duration, ...redislock.Option) (*redislock.Lock, error){
		"Obtain": locker.Obtain, "TryObtain": locker.TryObtain,
	} {
		_, err := obtain(cctx, "k", time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, name)
	}
	called := false
	err = locker.WithLock(cctx, "k", func(context.Context) error { called = true; return nil })
	assert.ErrorIs(t, err, redislock.ErrLockLost)
	assert.False(t, called, "fn called while another client holds the key")
	assert.Equal(t, before, sent.Load(), "nothing sent")
	require.NoError(t, theirs.Release(ctx))
}

// Two nested WithLocks join a lock that is not kept: the first one's
// KeepAlive keeps the acquisition, not only while its own ctx lasts, so
// that when that ctx ends (a request's, cancelled once it is done), the
// second one's fn goes on under the lock, its ctx live.
func TestReentrant_SiblingsContextDoesNotEndMine(t *testing.T) {
	ctx, _, locker, outer := heldOuter(t, 10*time.Second)
	cctx := outer.Context(ctx)

	first := make(chan struct{})
	go func() {
		s1, cancel := context.WithCancel(cctx)
		defer cancel()
		assert.NoError(t, locker.WithLock(s1, "k", func(context.Context) error {
			close(first)
			time.Sleep(50 * time.Millisecond)
			return nil
		}))
	}()
	<-first
	err := locker.WithLock(cctx, "k", func(fctx context.Context) error {
		staysLive(t, fctx, time.Second, "with its own ctx live and the lock held")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, outer.Release(ctx))
}

// A nested WithLock's ctx follows the acquisition's kept context also when
// the outer holder calls KeepAlive itself (which replaces the kept context
// the nested call started): it stays live while the lock is held and kept,
// and ends with ErrLockLost when the lock is lost.
func TestReentrant_JoinedContextFollowsANewKeepAlive(t *testing.T) {
	ctx, rdb, locker, outer := heldOuter(t, 10*time.Second)
	err := locker.WithLock(outer.Context(ctx), "k", func(fctx context.Context) error {
		kctx := outer.KeepAlive(ctx)
		staysLive(t, fctx, 300*time.Millisecond, "with the lock held and kept")
		require.NoError(t, rdb.Del(ctx, "k").Err()) // lost: the next renewal finds it gone
		select {
		case <-fctx.Done():
			assert.ErrorIs(t, context.Cause(fctx), redislock.ErrLockLost)
			assert.ErrorIs(t, context.Cause(kctx), redislock.ErrLockLost)
		case <-time.After(2 * time.Second):
			t.Error("the nested ctx outlived the lock")
		}
		return nil
	})
	assert.ErrorIs(t, err, redislock.ErrLockLost)
}

// Joined handles' contexts through a storm of KeepAlive calls on the outer
// lock (each replaces the acquisition's kept context): while the lock is
// held, none ends, also when Err is polled in a tight loop; when the lock
// is then found lost during the storm, every one ends with ErrLockLost.
func TestReentrant_JoinedContextsThroughKeepAliveStorm(t *testing.T) {
	ctx, rdb, locker, outer := heldOuter(t, 20*time.Second)
	const n = 20
	joined := make([]context.Context, n)
	for i := range joined {
		lk, err := locker.Obtain(outer.Context(ctx), "k", 2*time.Second)
		require.NoError(t, err)
		joined[i] = lk.KeepAlive(ctx)
	}
	storm := func(d time.Duration) {
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for end := time.Now().Add(d); time.Now().Before(end); {
					outer.KeepAlive(ctx)
					time.Sleep(100 * time.Microsecond)
				}
			})
		}
		for _, j := range joined {
			wg.Go(func() {
				for end := time.Now().Add(d); time.Now().Before(end); runtime.Gosched() {
					_ = j.Err()
				}
			})
		}
		wg.Wait()
	}
	storm(time.Second)
	for i, j := range joined {
		assert.NoError(t, context.Cause(j), "joined context %d ended while the lock was held and kept", i)
	}
	require.NoError(t, rdb.Del(ctx, "k").Err())
	go func() { _, _ = outer.TTL(ctx) }() // finds the loss during the storm
	storm(500 * time.Millisecond)
	for i, j := range joined {
		select {
		case <-j.Done():
			assert.ErrorIs(t, context.Cause(j), redislock.ErrLockLost, "joined context %d", i)
		case <-time.After(2 * time.Second):
			t.Errorf("joined context %d outlived the lock", i)
		}
	}
	_ = outer.Release(ctx)
	require.NoError(t, locker.Shutdown(ctx))
}

// heldOuter starts a redis-server and returns a ctx bounded by d, a client,
// a Locker, and its lock on "k" (2 s, not kept).
func heldOuter(t *testing.T, d time.Duration) (context.Context, *redis.Client, *redislock.Locker, *redislock.Lock) {
	b := realBackend(t)
	ctx := ctxT(t, d)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb)
	outer, err := locker.Obtain(ctx, "k", 2*time.Second)
	require.NoError(t, err)
	return ctx, rdb, locker, outer
}

// staysLive fails t if ctx ends within d.
func staysLive(t *testing.T, ctx context.Context, d time.Duration, why string) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Errorf("the ctx ended (cause %v) %s", context.Cause(ctx), why)
	case <-time.After(d):
	}
}

// A joined handle's KeepAlive behaves as any Lock's: a second call replaces
// the first context; the handle's Release ends it (the acquisition goes on
// for the others); on a released handle it returns a context ended with
// ErrNotHeld. And the acquisition stays kept for it when the outer holder's
// own KeepAlive ctx ends: the key stays held, the joined context live.
func TestReentrant_JoinedHandleKeepAlive(t *testing.T) {
	waitsInParallel(t)
	ctx, rdb, locker, outer := heldOuter(t, 10*time.Second)
	lk, err := locker.Obtain(outer.Context(ctx), "k", 2*time.Second)
	require.NoError(t, err)
	first := lk.KeepAlive(ctx)
	kept := lk.KeepAlive(ctx)
	assert.ErrorIs(t, context.Cause(first), context.Canceled, "replaced by the second KeepAlive")

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	outer.KeepAlive(short)
	staysLive(t, kept, 2500*time.Millisecond, "after the outer's KeepAlive ctx ended, over a lease")
	assert.Equal(t, outer.Token(), rdb.Get(ctx, "k").Val(), "the key is kept for the joined handle")

	require.NoError(t, lk.Release(ctx))
	assert.ErrorIs(t, context.Cause(kept), context.Canceled, "the handle's Release ends its kept context")
	assert.ErrorIs(t, context.Cause(lk.KeepAlive(ctx)), redislock.ErrNotHeld, "KeepAlive of a released handle")
	_, err = outer.TTL(ctx)
	require.NoError(t, err, "the outer holder still holds it")
	require.NoError(t, outer.Release(ctx))
	require.NoError(t, locker.Shutdown(ctx))
}

// A lock found lost joins nothing: from the moment one of its contexts
// ends with ErrLockLost, or TTL or Refresh returned ErrNotHeld having found
// the key gone, an Obtain, TryObtain or WithLock of its key with a context
// that carries it (Lock.Context) returns an error wrapping ErrLockLost at
// once, sends no acquire command, and WithLock does not call fn; it does
// not wait as a new owner until its deadline. KeepAlive gives a lost lock
// back (see KeepAlive), and a Release may follow the loss: that the lock
// is released must not hide that it was lost. Each way of finding a lock
// lost is raced 100 times: a renewal finding the key taken and the
// lost-lock timer (Redis frozen), 100 kept locks at once, each joined as
// soon as its context ends; TTL, Refresh, and a Release after TTL, one lock
// after another, every other one kept.
//
// A Release that finds the key gone without the loss having been found
// before is not raced here: the docs do not count it as finding the lock
// lost (no Lost event once a Release began), and a context that carries a
// released lock is another owner (TestReentrant_HoldsAreCounted).
func TestReentrant_FoundLostJoinsNothing(t *testing.T) {
	const n = 100
	t.Run("a renewal finds the key taken", func(t *testing.T) {
		f := newLostJoins(t)
		locks, kept := f.obtainKept(n, 150*time.Millisecond)
		_, err := f.other.Pipelined(f.ctx, func(p redis.Pipeliner) error {
			for _, lk := range locks {
				p.Set(f.ctx, lk.Key(), "intruder", time.Minute)
			}
			return nil
		})
		require.NoError(t, err)
		f.joinEachOnLoss(locks, kept)
		f.intruderUntouched(locks)
	})
	t.Run("the lost-lock timer, Redis frozen", func(t *testing.T) {
		f := newLostJoins(t)
		locks, kept := f.obtainKept(n, 300*time.Millisecond)
		f.b.srv.Freeze(t)
		f.joinEachOnLoss(locks, kept)
		f.b.srv.Thaw(t)
	})
	for _, c := range []struct {
		name string
		find func(ctx context.Context, lk *redislock.Lock) error
	}{
		{"TTL finds the key gone", func(ctx context.Context, lk *redislock.Lock) error {
			_, err := lk.TTL(ctx)
			return err
		}},
		{"Refresh finds the key gone", func(ctx context.Context, lk *redislock.Lock) error {
			return lk.Refresh(ctx, 10*time.Second)
		}},
		{"Release after TTL found the key gone", func(ctx context.Context, lk *redislock.Lock) error {
			if _, err := lk.TTL(ctx); !errors.Is(err, redislock.ErrNotHeld) {
				return err
			}
			return lk.Release(ctx)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newLostJoins(t)
			var locks []*redislock.Lock
			for i := range n {
				key := "k" + strconv.Itoa(i)
				lk, err := f.locker.TryObtain(f.ctx, key, 10*time.Second)
				require.NoError(t, err)
				locks = append(locks, lk)
				if i%2 == 0 {
					lk.KeepAlive(f.ctx)
				}
				require.NoError(t, f.other.Set(f.ctx, key, "intruder", time.Minute).Err())
				require.ErrorIs(t, c.find(f.ctx, lk), redislock.ErrNotHeld)
				if !f.joinsNothing(lk) {
					break
				}
			}
			f.intruderUntouched(locks)
		})
	}
}

// lostJoins is a Locker on a redis-server whose acquire commands are
// counted, and another client, for TestReentrant_FoundLostJoinsNothing.
type lostJoins struct {
	t      *testing.T
	b      *backend
	ctx    context.Context
	locker *redislock.Locker
	acq    *acquireCounter
	other  *redis.Client
}

func newLostJoins(t *testing.T) *lostJoins {
	b := realBackend(t)
	rdb, _ := b.client(t)
	acq := &acquireCounter{}
	rdb.AddHook(acq.hook())
	f := &lostJoins{t: t, b: b, ctx: ctxT(t, 30*time.Second), locker: redislock.New(rdb), acq: acq, other: b.mustClient(t)}
	t.Cleanup(func() {
		b.srv.Thaw(t)
		assert.NoError(t, f.locker.Shutdown(ctxT(t, 10*time.Second)))
	})
	return f
}

// obtainKept obtains n locks of ttl (keys k0, k1, ...) and keeps them.
func (f *lostJoins) obtainKept(n int, ttl time.Duration) ([]*redislock.Lock, []context.Context) {
	locks := make([]*redislock.Lock, n)
	kept := make([]context.Context, n)
	for i := range n {
		lk, err := f.locker.TryObtain(f.ctx, "k"+strconv.Itoa(i), ttl)
		require.NoError(f.t, err)
		require.Positive(f.t, f.acq.of(lk.Key()), "the acquire commands are counted")
		locks[i], kept[i] = lk, lk.KeepAlive(f.ctx)
	}
	return locks, kept
}

// joinEachOnLoss waits, for each lock at once, until its kept context ends
// (with ErrLockLost), and then requires that it joins nothing.
func (f *lostJoins) joinEachOnLoss(locks []*redislock.Lock, kept []context.Context) {
	var wg sync.WaitGroup
	for i, lk := range locks {
		wg.Go(func() {
			select {
			case <-kept[i].Done():
			case <-time.After(5 * time.Second):
				f.t.Errorf("%q: the kept context outlived the lock", lk.Key())
				return
			}
			assert.ErrorIs(f.t, context.Cause(kept[i]), redislock.ErrLockLost)
			f.joinsNothing(lk)
		})
	}
	wg.Wait()
}

// joinBound is how soon a call that joins nothing returns: it sends
// nothing, and its deadline is 1 s away.
const joinBound = 100 * time.Millisecond

// joinsNothing requires that an Obtain, a TryObtain and a WithLock of lk's
// key, with a context carrying lk (found lost), each return an error
// wrapping ErrLockLost at once, send no acquire command, and that WithLock
// does not call fn. It reports whether they did.
func (f *lostJoins) joinsNothing(lk *redislock.Lock) bool {
	t := f.t
	base, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cctx, key := lk.Context(base), lk.Key()
	before := f.acq.of(key)
	ok := true
	check := func(name string, call func() (*redislock.Lock, error)) {
		start := time.Now()
		got, err := call()
		took := time.Since(start)
		if got != nil {
			_ = got.Release(f.ctx)
		}
		ok = assert.ErrorIs(t, err, redislock.ErrLockLost, "%s of %q", name, key) && ok
		ok = assert.Less(t, took, joinBound, "%s of %q returned after %v", name, key, took) && ok
	}
	check("Obtain", func() (*redislock.Lock, error) { return f.locker.Obtain(cctx, key, time.Minute) })
	check("TryObtain", func() (*redislock.Lock, error) { return f.locker.TryObtain(cctx, key, time.Minute) })
	called := false
	check("WithLock", func() (*redislock.Lock, error) {
		return nil, f.locker.WithLock(cctx, key, func(context.Context) error { called = true; return nil })
	})
	ok = assert.False(t, called, "WithLock of %q called fn", key) && ok
	return assert.Equal(t, before, f.acq.of(key), "acquire commands sent for %q", key) && ok
}

// intruderUntouched requires that the keys of locks still hold the
// intruder's value.
func (f *lostJoins) intruderUntouched(locks []*redislock.Lock) {
	for _, lk := range locks {
		assert.Equal(f.t, "intruder", f.other.Get(f.ctx, lk.Key()).Val(), "%q", lk.Key())
	}
}

// Specifies (reentrant.go, "A context that carries a lock that is lost
// joins nothing: the nested call returns an error wrapping ErrLockLost at
// once"): the context WithLock gives fn carries its lock; once that lock is
// lost (an intruder overwrote the key, a renewal found it), a nested
// Obtain, TryObtain, WithLock or ObtainMulti of the key with fn's own
// context returns an error wrapping ErrLockLost.
func TestReentrant_FnContextOfALostLockJoinsNothing(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	other := b.mustClient(t)
	locker := redislock.New(rdb)
	err := locker.WithLock(ctx, "k", func(fctx context.Context) error {
		require.NoError(t, other.Set(ctx, "k", "intruder", time.Minute).Err())
		select {
		case <-fctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the loss was not found")
		}
		require.ErrorIs(t, context.Cause(fctx), redislock.ErrLockLost)
		_, err := locker.Obtain(fctx, "k", time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "Obtain: %v", err)
		_, err = locker.TryObtain(fctx, "k", time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "TryObtain: %v", err)
		err = locker.WithLock(fctx, "k", func(context.Context) error { return nil })
		assert.ErrorIs(t, err, redislock.ErrLockLost, "WithLock: %v", err)
		_, err = locker.ObtainMulti(fctx, []string{"k", "k2"}, time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "ObtainMulti: %v", err)
		return nil
	}, redislock.WithTTL(300*time.Millisecond))
	require.ErrorIs(t, err, redislock.ErrLockLost)
	require.NoError(t, locker.Shutdown(ctx))
}

// Specifies FromContext ("in the fn of WithLock or WithLockMulti, that
// call's lock ...: its Fence or Fences (for SetFenced) ... With locks
// nested, the innermost") for a one-key WithLock nested in a WithLockMulti
// on one of the set's keys: it joins the set, and its fn's FromContext gives
// the lock of its own key (Key, Keys, Fence of that key), the same lock a
// nested Obtain of the key gives; the outer fn's FromContext is still the
// set. A fence of another key of the set would let the next holder's
// SetFenced be refused, and an older holder's write win.
func TestFromContext_NestedWithLockInASetGivesItsKeysLock(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	locker := redislock.New(rdb, redislock.WithFencing())
	keys := []string{"f:0", "f:1", "f:2"}
	for i, k := range keys { // the fence counters differ: f:0 is ahead
		for range 2 * (3 - i) {
			lk, err := locker.Obtain(ctx, k, time.Minute)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
		}
	}
	err := locker.WithLockMulti(ctx, keys, func(fctx context.Context) error {
		set := redislock.FromContext(fctx)
		require.NotNil(t, set)
		require.NotEqual(t, set.FenceOf("f:0"), set.FenceOf("f:1"), "the keys' fences differ")
		obtained, err := locker.Obtain(fctx, "f:1", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, "f:1", obtained.Key())
		assert.Equal(t, set.FenceOf("f:1"), obtained.Fence())
		require.NoError(t, obtained.Release(ctx))
		err = locker.WithLock(fctx, "f:1", func(ictx context.Context) error {
			inner := redislock.FromContext(ictx)
			require.NotNil(t, inner)
			assert.Equal(t, "f:1", inner.Key())
			assert.Equal(t, []string{"f:1"}, inner.Keys())
			assert.Equal(t, set.FenceOf("f:1"), inner.Fence(), "the fence of f:1, as the nested Obtain's")
			assert.Equal(t, []int64{set.FenceOf("f:1")}, inner.Fences())
			assert.Equal(t, set.Token(), inner.Token())
			return redislock.SetFenced(ictx, rdb, "resource:f:1", "v", inner.Fence())
		})
		require.NoError(t, err)
		assert.Same(t, set, redislock.FromContext(fctx), "the outer fn's lock is the set")
		return nil
	})
	require.NoError(t, err)
	next, err := locker.Obtain(ctx, "f:1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, redislock.SetFenced(ctx, rdb, "resource:f:1", "w", next.Fence()), "the next holder of f:1 may write")
	require.NoError(t, next.Release(ctx))
}
