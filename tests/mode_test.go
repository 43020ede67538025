package tests

import (
	"context"
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

// Readers share the key: five readers of five Lockers hold it at once, each
// with a token and a lease of its own; TryObtain for a reader succeeds
// while readers hold it, a writer's fails.
func TestShared_ManyReadersAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		var readers []*redislock.Lock
		tokens := map[string]bool{}
		for range 5 {
			rdb, _ := b.client(t)
			lk, err := redislock.New(rdb).TryObtain(ctx, "doc", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			readers = append(readers, lk)
			tokens[lk.Token()] = true
		}
		assert.Len(t, tokens, 5, "a token per reader")
		rdb, _ := b.client(t)
		_, err := redislock.New(rdb).TryObtain(ctx, "doc", time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained, "the writer waits for the readers")
		for _, lk := range readers {
			ttl, err := lk.TTL(ctx)
			require.NoError(t, err)
			assert.Greater(t, ttl, 50*time.Second)
			require.NoError(t, lk.Release(ctx))
		}
		w, err := redislock.New(rdb).TryObtain(ctx, "doc", time.Minute)
		require.NoError(t, err, "the writer gets the key once every reader released")
		require.NoError(t, w.Release(ctx))
		assertNoSideKeys(t, rdb, "doc")
	})
}

// A writer holds the key alone: readers wait while it holds it, and all
// the readers in line get the key together when it releases (they were
// queued before the next writer, who waits for them).
func TestShared_WriterAlone(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	w, err := redislock.New(rdb).Obtain(ctx, "doc", time.Minute)
	require.NoError(t, err)
	var readers []<-chan obtained
	for i := range 3 {
		c, _ := b.client(t)
		readers = append(readers, obtainAsync(ctx, redislock.New(c, slowPolling), "doc", time.Minute, redislock.WithShared()))
		waitQueued(t, rdb, "doc", i+1)
	}
	c, _ := b.client(t)
	writer2 := obtainAsync(ctx, redislock.New(c, slowPolling), "doc", time.Minute)
	waitQueued(t, rdb, "doc", 4)
	time.Sleep(50 * time.Millisecond)
	for _, r := range readers {
		select {
		case o := <-r:
			t.Fatalf("a reader got the key while the writer held it (%v)", o.err)
		default:
		}
	}
	released := time.Now()
	require.NoError(t, w.Release(ctx))
	var held []*redislock.Lock
	for _, r := range readers {
		o := <-r
		require.NoError(t, o.err)
		assert.Less(t, o.at.Sub(released), 200*time.Millisecond, "the readers were handed the key together")
		held = append(held, o.lock)
	}
	select {
	case o := <-writer2:
		t.Fatalf("the second writer got the key while readers held it (%v)", o.err)
	case <-time.After(100 * time.Millisecond):
	}
	for _, lk := range held {
		require.NoError(t, lk.Release(ctx))
	}
	o := <-writer2
	require.NoError(t, o.err)
	require.NoError(t, o.lock.Release(ctx))
}

// Writers are not starved: under a steady stream of overlapping readers a
// writer gets the key within about one reader's hold, since the readers
// that come after it line up behind it.
func TestShared_WriterNotStarved(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	const hold = 100 * time.Millisecond
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				lk, err := locker.Obtain(ctx, "doc", time.Minute, redislock.WithShared())
				if !assert.NoError(t, err) {
					return
				}
				reads.Add(1)
				time.Sleep(hold)
				assert.NoError(t, lk.Release(ctx))
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	require.Eventually(t, func() bool { return reads.Load() > 8 }, 5*time.Second, time.Millisecond)
	rdb, _ := b.client(t)
	writer := redislock.New(rdb)
	for range 3 {
		start := time.Now()
		w, err := writer.Obtain(ctx, "doc", time.Minute)
		require.NoError(t, err)
		waited := time.Since(start)
		t.Logf("the writer waited %v", waited)
		assert.Less(t, waited, 10*hold, "the writer was starved") // starved, it would wait as long as readers come
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, w.Release(ctx))
		time.Sleep(hold)
	}
}

// A reader that dies (here: a child process killed with SIGKILL, holding a
// 1 s share) frees only its own share, at the end of its own lease: the
// other readers keep theirs, and a writer gets the key once the dead
// reader's lease ended and the live readers released.
func TestShared_KilledReaderFreesOnlyItsShare(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	killed := killedHolder(t, b.addr, "doc", time.Second, "shared")
	live, err := redislock.New(rdb).Obtain(ctx, "doc", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	c, _ := b.client(t)
	start := time.Now()
	writer := obtainAsync(ctx, redislock.New(c), "doc", time.Minute)
	time.Sleep(1500 * time.Millisecond) // the dead reader's share has ended
	ttl, err := live.TTL(ctx)
	require.NoError(t, err, "the live reader keeps its share")
	assert.Greater(t, ttl, 50*time.Second)
	select {
	case o := <-writer:
		t.Fatalf("the writer got the key while a live reader held it (%v)", o.err)
	default:
	}
	require.NoError(t, live.Release(ctx))
	o := <-writer
	require.NoError(t, o.err)
	t.Logf("writer served %v after it asked (the killed reader held a 1 s share since %v before)", o.at.Sub(start), start.Sub(killed))
	require.NoError(t, o.lock.Release(ctx))
}

// Fences work in both modes: every acquisition, reader or writer, gets a
// fence above every fence issued before on the key, so a writer's fence is
// above those of all the readers before it.
func TestShared_Fences(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb, redislock.WithFencing())
		var last int64
		for range 3 {
			r1, err := locker.Obtain(ctx, "doc", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			r2, err := locker.Obtain(ctx, "doc", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			assert.Greater(t, r1.Fence(), last)
			assert.Greater(t, r2.Fence(), r1.Fence())
			require.NoError(t, r1.Release(ctx))
			require.NoError(t, r2.Release(ctx))
			w, err := locker.Obtain(ctx, "doc", time.Minute)
			require.NoError(t, err)
			assert.Greater(t, w.Fence(), r2.Fence(), "the writer's fence is above the readers'")
			require.NoError(t, redislock.SetFenced(ctx, rdb, "resource", "v", w.Fence()))
			assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "resource", "stale", r2.Fence()), redislock.ErrFenceRejected)
			last = w.Fence()
			require.NoError(t, w.Release(ctx))
		}
	})
}

// A reader's lease is kept alive and lost-signalled like any lock's: a 300 ms
// share is kept through a second, and when its entry is removed behind its
// back the holder's context ends with ErrLockLost.
func TestShared_KeepAlive(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	lk, err := redislock.New(rdb).Obtain(ctx, "doc", 300*time.Millisecond, redislock.WithShared())
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	time.Sleep(time.Second)
	require.NoError(t, lctx.Err(), "lost: %v", context.Cause(lctx))
	require.NoError(t, rdb.ZRem(ctx, "doc", lk.Token()).Err())
	select {
	case <-lctx.Done():
		assert.ErrorIs(t, context.Cause(lctx), redislock.ErrLockLost)
	case <-time.After(time.Second):
		t.Fatal("the lost share was not signalled")
	}
	assert.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
}

// A semaphore admits at most N holders, each with its own token and lease;
// the N+1st waits, and gets a permit when one is released. Permits go to
// waiters in the order they came.
func TestPermits_AtMostNInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		three := redislock.WithPermits(3)
		var held []*redislock.Lock
		for range 3 {
			lk, err := redislock.New(rdb).TryObtain(ctx, "quota", time.Minute, three)
			require.NoError(t, err)
			held = append(held, lk)
		}
		_, err := redislock.New(rdb).TryObtain(ctx, "quota", time.Minute, three)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		var waiting []<-chan obtained
		for i := range 3 {
			c, _ := b.client(t)
			waiting = append(waiting, obtainAsync(ctx, redislock.New(c, slowPolling), "quota", time.Minute, three))
			waitQueued(t, rdb, "quota", i+1)
		}
		for i, w := range waiting {
			require.NoError(t, held[i].Release(ctx))
			o := <-w
			require.NoError(t, o.err, "waiter %d", i)
			assert.Len(t, queued(t, rdb, "quota"), 2-i, "waiter %d was served before those behind it", i)
			held[i] = o.lock
		}
		for _, lk := range held {
			require.NoError(t, lk.Release(ctx))
		}
		assertNoSideKeys(t, rdb, "quota")
	})
}

// A holder that dies frees its permit at the end of its own lease, without
// anyone releasing it.
func TestPermits_FreedAtHolderExpiry(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	one := redislock.WithPermits(1)
	killedHolder(t, b.addr, "quota", 500*time.Millisecond, "1")
	start := time.Now()
	lk, err := redislock.New(rdb).Obtain(ctx, "quota", time.Minute, one)
	require.NoError(t, err)
	t.Logf("permit freed %v after the holder was killed", time.Since(start))
	assert.Less(t, time.Since(start), time.Second)
	require.NoError(t, lk.Release(ctx))
}

// Permits are kept alive by KeepAlive like locks: a 300 ms permit is kept
// through a second while the other permit of two stays taken by someone else.
func TestPermits_KeepAlive(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	two := redislock.WithPermits(2)
	lk, err := redislock.New(rdb).Obtain(ctx, "quota", 300*time.Millisecond, two)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	other, err := redislock.New(rdb).Obtain(ctx, "quota", time.Minute, two)
	require.NoError(t, err)
	time.Sleep(time.Second)
	require.NoError(t, lctx.Err(), "lost: %v", context.Cause(lctx))
	_, err = redislock.New(rdb).TryObtain(ctx, "quota", time.Minute, two)
	require.ErrorIs(t, err, redislock.ErrNotObtained, "both permits are still taken")
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, other.Release(ctx))
}

// Bad input gets a typed error and writes nothing: no permits, a negative
// number, shared and permits together, an empty key; a call with another
// number of permits than the semaphore's holders is refused with
// ErrInvalidOption, leaving it as it was.
func TestPermits_BadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, sent := b.client(t)
		locker := redislock.New(rdb)
		before := sent.Load()
		for _, opts := range [][]redislock.Option{
			{redislock.WithPermits(0)},
			{redislock.WithPermits(-3)},
			{redislock.WithShared(), redislock.WithPermits(2)},
			{redislock.WithPermits(2), redislock.WithShared()},
		} {
			_, err := locker.TryObtain(ctx, "quota", time.Minute, opts...)
			assert.ErrorIs(t, err, redislock.ErrInvalidOption)
		}
		_, err := locker.Obtain(ctx, "", time.Minute, redislock.WithPermits(2))
		assert.ErrorIs(t, err, redislock.ErrInvalidKey)
		assert.Equal(t, before, sent.Load(), "a command was sent")

		held, err := locker.Obtain(ctx, "quota", time.Minute, redislock.WithPermits(2))
		require.NoError(t, err)
		_, err = locker.Obtain(ctx, "quota", time.Minute, redislock.WithPermits(3))
		require.ErrorIs(t, err, redislock.ErrInvalidOption, "another number of permits")
		assert.NotErrorIs(t, err, redislock.ErrNotObtained)
		assert.Equal(t, 1, holders(t, locker, "quota"), "nothing changed")
		assert.Empty(t, queued(t, rdb, "quota"))
		require.NoError(t, held.Release(ctx))
	})
}

// The semaphore's n is checked also while only waiters are left: a 1-permit
// holder crashed (its lease runs out, nobody releases it) while another
// waits, whose client is slow for a moment; a call naming 2 permits just
// after the lease ended is refused with ErrInvalidOption, and the waiter
// then gets the only permit: never 2 holders of a semaphore of 1.
func TestPermits_OtherNRefusedWhileOnlyWaitersAreLeft(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 15*time.Second)
	rdb, _ := b.client(t)
	one := redislock.WithPermits(1)
	crashed, err := redislock.New(rdb).Obtain(ctx, "sem", 300*time.Millisecond, one)
	require.NoError(t, err)
	var slow atomic.Bool
	wc, _ := b.client(t)
	wc.AddHook(hook{before: func(cmd redis.Cmder) {
		if slow.Load() && isScript(cmd, acquireScript) {
			time.Sleep(400 * time.Millisecond)
		}
	}})
	waiter := obtainAsync(ctx, redislock.New(wc), "sem", 5*time.Second, one)
	waitQueued(t, rdb, "sem", 1)
	slow.Store(true)
	time.Sleep(time.Until(crashed.Until()) + 30*time.Millisecond)
	require.Len(t, queued(t, rdb, "sem"), 1, "the waiter still waits")

	other, err := redislock.New(rdb).TryObtain(ctx, "sem", 5*time.Second, redislock.WithPermits(2))
	if err == nil {
		_ = other.Release(ctx)
	}
	require.ErrorIs(t, err, redislock.ErrInvalidOption, "2 permits asked for while a waiter of a semaphore of 1 waits")
	o := <-waiter
	require.NoError(t, o.err)
	assert.Equal(t, 1, holders(t, redislock.New(rdb), "sem"))
	require.NoError(t, o.lock.Release(ctx))
	assertNoSideKeys(t, rdb, "sem")
}

// A key is a read-write lock's or a semaphore's: permits asked for on a key
// that readers hold fail with ErrWrongKind (they never share it with the
// readers), and so does a reader on a semaphore's key; nothing changes.
// A string the library did not write is another owner's lock: permits on
// it fail at once too (Obtain waits for it only as a lock or a reader).
func TestPermits_NotOnALocksKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		locker := redislock.New(rdb)
		reader, err := locker.Obtain(ctx, "doc", time.Minute, redislock.WithShared())
		require.NoError(t, err)
		_, err = redislock.New(rdb).TryObtain(ctx, "doc", time.Minute, redislock.WithPermits(2))
		assert.ErrorIs(t, err, redislock.ErrWrongKind, "permits on a key readers hold")
		assert.NotErrorIs(t, err, redislock.ErrNotObtained)
		info, err := locker.Inspect(ctx, "doc")
		require.NoError(t, err)
		require.Len(t, info.Holders, 1)
		assert.Equal(t, reader.Token(), info.Holders[0].Token)
		require.NoError(t, reader.Release(ctx))

		permit, err := locker.Obtain(ctx, "quota", time.Minute, redislock.WithPermits(2))
		require.NoError(t, err)
		_, err = redislock.New(rdb).Obtain(ctx, "quota", time.Minute, redislock.WithShared(), redislock.WithWait(time.Second))
		assert.ErrorIs(t, err, redislock.ErrWrongKind, "a reader on a semaphore's key")
		assert.Empty(t, queued(t, rdb, "quota"), "no place left in line")
		require.NoError(t, permit.Release(ctx))
		assertNoSideKeys(t, rdb, "quota")

		require.NoError(t, rdb.Set(ctx, "theirs", "a lock of theirs", time.Minute).Err())
		start := time.Now()
		_, err = redislock.New(rdb).Obtain(ctx, "theirs", time.Minute, redislock.WithPermits(2), redislock.WithWait(5*time.Second))
		assert.ErrorIs(t, err, redislock.ErrWrongKind, "permits on another owner's string")
		assert.Less(t, time.Since(start), time.Second, "at once, not at the wait's end")
		assert.Equal(t, "a lock of theirs", rdb.Get(ctx, "theirs").Val())
		assert.Empty(t, queued(t, rdb, "theirs"), "no place left in line")
	})
}

// A place in line whose waiter stopped renewing it (its link went black)
// decides nothing once it lapsed: with the crashed holder's lease over too,
// nobody holds or waits, and a semaphore of another n may take the key.
func TestPermits_LapsedPlaceDecidesNothing(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 15*time.Second)
	rdb, _ := b.client(t)
	one := redislock.WithPermits(1)
	crashed, err := redislock.New(rdb).Obtain(ctx, "sem", 300*time.Millisecond, one)
	require.NoError(t, err)
	x := newToxi(t, b.addr)
	wc := redis.NewClient(&redis.Options{Addr: x.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = wc.Close() })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := redislock.New(wc)
	got := obtainAsync(wctx, waiter, "sem", time.Minute, one)
	waitQueued(t, rdb, "sem", 1)
	x.add("hole", "blackhole", "upstream", nil)
	time.Sleep(max(time.Until(crashed.Until()), placeLease+200*time.Millisecond))

	other, err := redislock.New(rdb).TryObtain(ctx, "sem", time.Minute, redislock.WithPermits(2))
	require.NoError(t, err, "a lapsed place of a semaphore of 1")
	require.NoError(t, other.Release(ctx))
	cancel()
	require.Error(t, (<-got).err)
	x.remove("hole")
	require.NoError(t, waiter.Shutdown(ctx))
}

// assertNoSideKeys fails t if any key of the lock key is left but its
// spent marks and its fence counter: once nobody holds or waits, nothing
// remains.
func assertNoSideKeys(t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	for _, kind := range []string{"line", "gens", "holders"} {
		assert.Zero(t, rdb.Exists(context.Background(), sideKey(key, kind)).Val(), "%s left", kind)
	}
	assert.Zero(t, rdb.Exists(context.Background(), key).Val(), "the key left")
}

// A shared holder's or a permit's lease lasts, in Redis, until at least its
// Until, as an exclusive lock's does: Redis counts a holder gone only once
// its clock is past the lease's last millisecond. A rival that tries again
// and again as an unkept 50 ms lease ends (the writer against a reader, a
// second permit of a semaphore of 1) gets the key only after the holder's
// Until, 20 times in a row.
func TestModes_LeasesLastUntilUntil(t *testing.T) {
	waitsInParallel(t)
	b := realBackend(t)
	ctx := ctxT(t, 30*time.Second)
	rdb, _ := b.client(t)
	other, _ := b.client(t)
	for name, c := range map[string]struct{ holder, rival []redislock.Option }{
		"permit":          {[]redislock.Option{redislock.WithPermits(1)}, []redislock.Option{redislock.WithPermits(1)}},
		"reader, writer":  {[]redislock.Option{redislock.WithShared()}, nil},
		"exclusive, both": {nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			for i := range 20 {
				key := name + ":" + strconv.Itoa(i)
				holder, err := redislock.New(rdb).TryObtain(ctx, key, 50*time.Millisecond, c.holder...)
				require.NoError(t, err)
				rival := redislock.New(other)
				time.Sleep(time.Until(holder.Until().Add(-3 * time.Millisecond)))
				for {
					if lk, err := rival.TryObtain(ctx, key, time.Second, c.rival...); err == nil {
						got := time.Now()
						require.False(t, got.Before(holder.Until()), "got the key %v before the holder's Until", holder.Until().Sub(got))
						require.NoError(t, lk.Release(ctx))
						break
					}
				}
			}
		})
	}
}

// A call's mode option takes precedence over the Locker's, as every option
// does: on a Locker made WithShared, a call WithPermits takes a permit, and
// on one made WithPermits, a call WithShared is a reader. Both in one call
// conflict (ErrInvalidOption, nothing sent).
func TestModes_CallOptionTakesPrecedence(t *testing.T) {
	b := miniBackend(t)
	ctx := context.Background()
	rdb, n := b.client(t)
	lk, err := redislock.New(rdb, redislock.WithShared()).TryObtain(ctx, "a", time.Minute, redislock.WithPermits(2))
	require.NoError(t, err)
	info, err := redislock.New(rdb).Inspect(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, redislock.ModeSemaphore, info.Mode)
	require.NoError(t, lk.Release(ctx))

	lk, err = redislock.New(rdb, redislock.WithPermits(3)).TryObtain(ctx, "b", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	info, err = redislock.New(rdb).Inspect(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, redislock.ModeShared, info.Mode)
	require.NoError(t, lk.Release(ctx))

	before := n.Load()
	_, err = redislock.New(rdb).TryObtain(ctx, "c", time.Minute, redislock.WithShared(), redislock.WithPermits(2))
	assert.ErrorIs(t, err, redislock.ErrInvalidOption)
	assert.Equal(t, before, n.Load(), "nothing sent")
}

// holders returns how many hold key, as Inspect reports it.
func holders(t *testing.T, l *redislock.Locker, key string) int {
	t.Helper()
	info, err := l.Inspect(context.Background(), key)
	require.NoError(t, err)
	return len(info.Holders)
}

// A semaphore call on a user's sorted set (a leaderboard that shares the
// key's name) fails at once with ErrWrongKind and leaves it as it was: its
// members, their scores, no expiry; nobody waits in a line for it.
func TestPermits_UserSortedSetUntouched(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		board := []redis.Z{{Score: 10, Member: "alice"}, {Score: 20, Member: "bob"}}
		require.NoError(t, rdb.ZAdd(ctx, "board", board...).Err())
		for _, call := range []func() error{
			func() error {
				_, err := redislock.New(rdb).TryObtain(ctx, "board", time.Minute, redislock.WithPermits(5))
				return err
			},
			func() error {
				_, err := redislock.New(rdb).Obtain(ctx, "board", time.Minute, redislock.WithPermits(5), redislock.WithWait(5*time.Second))
				return err
			},
		} {
			start := time.Now()
			err := call()
			require.ErrorIs(t, err, redislock.ErrWrongKind)
			assert.Contains(t, err.Error(), "a Redis zset (data this library did not write)")
			assert.Less(t, time.Since(start), time.Second, "waited for data that cannot change")
		}
		got, err := rdb.ZRangeWithScores(ctx, "board", 0, -1).Result()
		require.NoError(t, err)
		assert.Equal(t, board, got, "the user's members changed")
		assert.Equal(t, time.Duration(-1), rdb.PTTL(ctx, "board").Val(), "an expiry was set on the user's data")
		assert.Empty(t, queued(t, rdb, "board"))
	})
}

// A reader on a list or a hash fails at once with ErrWrongKind, as every
// other kind of lock does; and so does a reader that waits behind a writer
// when the key is replaced by a hash.
func TestShared_DataOfAnotherKindFailsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 10*time.Second)
		rdb, _ := b.client(t)
		require.NoError(t, rdb.RPush(ctx, "list", "a").Err())
		require.NoError(t, rdb.HSet(ctx, "hash", "f", "v").Err())
		for _, key := range []string{"list", "hash"} {
			start := time.Now()
			_, err := redislock.New(rdb).Obtain(ctx, key, time.Minute, redislock.WithShared(), redislock.WithWait(5*time.Second))
			require.ErrorIs(t, err, redislock.ErrWrongKind, key)
			assert.Less(t, time.Since(start), time.Second, key)
		}
	})
	b := realBackend(t)
	ctx := ctxT(t, 10*time.Second)
	rdb, _ := b.client(t)
	writer, err := redislock.New(rdb).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	reader := obtainAsync(ctx, redislock.New(b.mustClient(t)), "k", time.Minute, redislock.WithShared())
	waitQueued(t, rdb, "k", 1)
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, "k")
		p.HSet(ctx, "k", "f", "v")
		return nil
	})
	require.NoError(t, err)
	replaced := time.Now()
	r := <-reader
	require.ErrorIs(t, r.err, redislock.ErrWrongKind)
	assert.Less(t, r.at.Sub(replaced), time.Second, "the reader waited on")
	assert.ErrorIs(t, writer.Release(ctx), redislock.ErrNotHeld)
}
