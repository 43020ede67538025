package tests

// The library's core behaviours on real Redis deployments: a 3-master Redis
// Cluster (a go-redis ClusterClient) and a primary with a replica watched by
// 3 Sentinels (a go-redis FailoverClient). Each deployment is started once
// per test function (that costs seconds) and shared by its subtests, each
// on keys of its own. The subtests that change the topology (failovers)
// come last.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// deployNoPolling makes polling useless: a waiter that got the lock quickly
// was handed it by the release.
var deployNoPolling = redislock.WithBackoff(2*time.Second, 2*time.Second)

// A deployment is a Redis deployment the core subtests run on.
type deployment struct {
	// client returns a new client of the deployment, closed with t.
	client func(t *testing.T) redis.UniversalClient
}

// TestDeploy_Cluster runs the core behaviours on a real Redis Cluster of 3
// masters with a replica each, then checks that every key the library
// writes lives in its lock key's slot, then fails shards over under held,
// kept and awaited locks.
func TestDeploy_Cluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	d := deployment{client: func(t *testing.T) redis.UniversalClient { return cluster.Client(t) }}
	deployCore(t, d)

	// Every key the library keeps for a lock key (the key, queue, places,
	// fence, readers, limit, gens, release marks) is in the lock key's
	// Cluster slot, for every kind of lock (exclusive with waiters, fenced,
	// a new lease length, shared, permits), on keys in different slots:
	// with a hash tag, without, and with braces that make no tag. No
	// script fails with CROSSSLOT, and every one of those keys is on the
	// master serving the lock key.
	t.Run("SideKeysInTheLockKeysSlot", func(t *testing.T) {
		deploySideKeysInSlot(t, cluster)
	})

	// Hand-offs are announced on shard channels (SPUBLISH) in the lock
	// key's slot: the masters of the other shards receive none of them
	// over the cluster bus (a PUBLISH would reach every node), the serving
	// master's replica does.
	t.Run("HandOffsStayInTheirShard", func(t *testing.T) {
		deployShardLocalHandOffs(t, cluster)
	})

	// A controlled failover (CLUSTER FAILOVER) of the master serving a held
	// lock, a kept lock and a waiter: see deployShardFailover.
	t.Run("ShardFailover/manual", func(t *testing.T) {
		deployShardFailover(t, cluster, false)
	})

	// The master serving a held lock, a kept lock and a waiter is killed
	// (SIGKILL) and its replica takes over: see deployShardFailover.
	t.Run("ShardFailover/killed", func(t *testing.T) {
		deployShardFailover(t, cluster, true)
	})

	// Sets (ObtainMulti) on a Cluster: see deploySets.
	t.Run("Sets", func(t *testing.T) {
		deploySets(t, cluster)
	})
}

// deploySets specifies sets of keys on a 3-master Cluster. The keys of one
// slot are taken by one script run, all at once. A set across slots (keys
// on different masters) is taken slot by slot and held whole: each key
// holds a token of the set, a competitor gets none of them, and Release
// frees them all. A master killed under a kept set across slots ends the
// set's kept context with ErrLockLost: the whole set is lost.
func deploySets(t *testing.T, cluster *redistest.Cluster) {
	ctx := ctxT(t, 60*time.Second)
	rdb, other := cluster.Client(t), cluster.Client(t)
	var acquires atomic.Int64 // that ran (not NOSCRIPT): a plain set's take.lua, or acquire.lua
	rdb.AddHook(hook{after: func(cmd redis.Cmder, err error) {
		if (isScript(cmd, acquireScript) || isScript(cmd, takeScript)) && (err == nil || !strings.Contains(err.Error(), "NOSCRIPT")) {
			acquires.Add(1)
		}
	}})
	locker, competitor := redislock.New(rdb), redislock.New(other)

	one := []string{"{cart}:1", "{cart}:2", "{cart}:3"}
	lk, err := locker.ObtainMulti(ctx, one, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(1), acquires.Load(), "one script for one slot's keys")
	require.NoError(t, lk.Release(ctx))

	across := []string{"a", "b", "c", "d", "e"}
	masters := map[string]bool{}
	for _, k := range across {
		masters[cluster.MasterFor(t, k).Addr()] = true
	}
	require.Greater(t, len(masters), 1, "the keys are on several masters")
	lk, err = locker.ObtainMulti(ctx, across, 2*time.Second)
	require.NoError(t, err)
	for _, k := range across {
		assert.NotEmpty(t, other.Get(ctx, k).Val(), "%s held", k)
		_, err := competitor.TryObtain(ctx, k, time.Second)
		assert.ErrorIs(t, err, redislock.ErrNotObtained, k)
	}
	_, err = competitor.TryObtainMulti(ctx, across, time.Second)
	assert.ErrorIs(t, err, redislock.ErrNotObtained)
	require.NoError(t, lk.Release(ctx))
	assert.Zero(t, other.Exists(ctx, across...).Val(), "Release freed every key")

	lk, err = locker.ObtainMulti(ctx, across, 2*time.Second)
	require.NoError(t, err)
	kept := lk.KeepAlive(ctx)
	killed := cluster.KillMaster(t, "c")
	select {
	case <-kept.Done():
		assert.ErrorIs(t, context.Cause(kept), redislock.ErrLockLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the set outlived a killed master's key")
	}
	cluster.WaitFailover(t, killed)
	_ = lk.Release(ctx)
	require.NoError(t, locker.Shutdown(ctx))
}

// TestDeploy_Sentinel runs the core behaviours on a real primary and
// replica watched by 3 Sentinels, through a FailoverClient, then fails the
// primary over under a kept lock.
func TestDeploy_Sentinel(t *testing.T) {
	sentinel := redistest.StartSentinel(t)
	d := deployment{client: func(t *testing.T) redis.UniversalClient { return sentinel.Client(t) }}
	deployCore(t, d)

	// A lock kept alive and replicated survives a forced failover (SENTINEL
	// FAILOVER): its context stays live, the new primary holds the key with
	// its token, no competitor gets the key meanwhile, and Release after the
	// failover succeeds.
	t.Run("Failover", func(t *testing.T) {
		deploySentinelFailover(t, sentinel)
	})
}

// deployCore runs the core behaviours as subtests of t on d.
func deployCore(t *testing.T, d deployment) {
	// Obtain sets the key to the lock's token with the ttl as its lease;
	// TryObtain of a held key fails with ErrNotObtained; TTL and Refresh
	// read and set the lease; Release frees the key, and a second Release,
	// a Refresh or a TTL after it return ErrNotHeld. Nothing but a release
	// mark is left.
	t.Run("Basics", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		const key = "deploy-basics"
		rdb, other := d.client(t), d.client(t)
		locker, competitor := redislock.New(rdb), redislock.New(other)

		lk, err := locker.Obtain(ctx, key, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, key, lk.Key())
		assert.Equal(t, lk.Token(), other.Get(ctx, key).Val(), "the key holds the token")
		pttl := other.PTTL(ctx, key).Val()
		assert.True(t, pttl > 9*time.Second && pttl <= 10*time.Second, "PTTL %v, want the 10s lease", pttl)
		assert.False(t, lk.Until().After(time.Now().Add(10*time.Second)), "Until within the lease")

		_, err = competitor.TryObtain(ctx, key, time.Second)
		require.ErrorIs(t, err, redislock.ErrNotObtained, "a held key")
		_, err = competitor.Obtain(ctx, key, time.Second, redislock.WithWait(100*time.Millisecond))
		require.ErrorIs(t, err, redislock.ErrNotObtained, "held until the wait's end")

		left, err := lk.TTL(ctx)
		require.NoError(t, err)
		assert.True(t, left > 9*time.Second && left <= 10*time.Second, "TTL %v", left)
		require.NoError(t, lk.Refresh(ctx, 20*time.Second))
		left, err = lk.TTL(ctx)
		require.NoError(t, err)
		assert.True(t, left > 19*time.Second && left <= 20*time.Second, "TTL %v after Refresh(20s)", left)
		assert.Equal(t, lk.Token(), other.Get(ctx, key).Val())

		require.NoError(t, lk.Release(ctx))
		assert.Zero(t, other.Exists(ctx, key).Val(), "Release freed the key")
		require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld, "the second Release")
		require.ErrorIs(t, lk.Refresh(ctx, time.Second), redislock.ErrNotHeld)
		_, err = lk.TTL(ctx)
		require.ErrorIs(t, err, redislock.ErrNotHeld)

		next, err := competitor.TryObtain(ctx, key, time.Second)
		require.NoError(t, err, "a released key is free")
		require.NoError(t, next.Release(ctx))
		requireOnlyMarksOf(t, rdb, key)
	})

	// KeepAlive keeps a 600 ms lease through 2 s, during which a competitor
	// never gets the key; once the key is deleted behind the holder's back,
	// the kept context ends with cause ErrLockLost within the lease.
	t.Run("KeepAlive", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		const key, ttl = "deploy-keepalive", 600 * time.Millisecond
		rdb, other := d.client(t), d.client(t)
		competitor := redislock.New(other)
		lk, err := redislock.New(rdb).Obtain(ctx, key, ttl)
		require.NoError(t, err)
		kctx := lk.KeepAlive(ctx)

		end := time.Now().Add(2 * time.Second)
		tries := 0
		for time.Now().Before(end) {
			_, err := competitor.TryObtain(ctx, key, time.Second)
			require.ErrorIs(t, err, redislock.ErrNotObtained, "the competitor got a kept key")
			tries++
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, kctx.Err(), "the lease was lost: %v", context.Cause(kctx))
		assert.Greater(t, tries, 20)
		assert.Equal(t, lk.Token(), other.Get(ctx, key).Val())
		pttl := other.PTTL(ctx, key).Val()
		assert.True(t, pttl > 0 && pttl <= ttl, "PTTL %v: renewed to the lease, not more", pttl)

		require.NoError(t, other.Del(ctx, key).Err())
		deleted := time.Now()
		select {
		case <-kctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the kept context is live 2s after its key was deleted")
		}
		assert.Less(t, time.Since(deleted), ttl, "the loss was signalled within the lease")
		assert.Equal(t, redislock.ErrLockLost, context.Cause(kctx))
		require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
		requireOnlyMarksOf(t, rdb, key)
	})

	// With WithFencing every holder gets a fence above all the fences
	// issued before for the key, whether it takes a free key or is handed
	// it while waiting; SetFenced accepts each holder's fence in turn and
	// refuses a stale one with ErrFenceRejected, keeping the newer value.
	t.Run("Fencing", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		const key, resource = "deploy-fencing", "deploy-fencing-resource"
		rdb := d.client(t)
		var lockers []*redislock.Locker
		for range 3 {
			lockers = append(lockers, redislock.New(d.client(t), redislock.WithFencing(), deployNoPolling))
		}
		var fences []int64
		first, err := lockers[0].Obtain(ctx, key, 10*time.Second)
		require.NoError(t, err)
		fences = append(fences, first.Fence())
		require.NoError(t, redislock.SetFenced(ctx, rdb, resource, "v0", first.Fence()))
		require.NoError(t, first.Release(ctx))

		prev, err := lockers[1].TryObtain(ctx, key, 10*time.Second)
		require.NoError(t, err)
		fences = append(fences, prev.Fence())
		require.NoError(t, redislock.SetFenced(ctx, rdb, resource, "v1", prev.Fence()))
		w := obtainAsync(ctx, lockers[2], key, 10*time.Second)
		waitQueued(t, rdb, key, 1)
		require.NoError(t, prev.Release(ctx))
		r := <-w
		require.NoError(t, r.err, "the waiter")
		fences = append(fences, r.lock.Fence())
		require.NoError(t, redislock.SetFenced(ctx, rdb, resource, "v2", r.lock.Fence()))

		for i := 1; i < len(fences); i++ {
			assert.Greater(t, fences[i], fences[i-1], "fences %v strictly increase", fences)
		}
		assert.Positive(t, fences[0])
		err = redislock.SetFenced(ctx, rdb, resource, "stale", fences[1])
		require.ErrorIs(t, err, redislock.ErrFenceRejected, "the previous holder's fence")
		assert.Equal(t, "v2", rdb.HGet(ctx, resource, "value").Val(), "the newest holder's value is kept")
		require.NoError(t, redislock.SetFenced(ctx, rdb, resource, "v2'", r.lock.Fence()), "the holder writes again")
		require.NoError(t, r.lock.Release(ctx))
		require.NoError(t, rdb.Del(ctx, resource).Err())
	})

	// Three waiters of three Lockers (each its own client) are served in
	// the order they came once the holder releases: when each obtains, the
	// waiters behind it are still in line in Redis and none of them has
	// obtained. Afterwards nothing of the key is left but release marks.
	t.Run("FIFO", func(t *testing.T) {
		ctx := ctxT(t, 20*time.Second)
		const key, n = "deploy-fifo", 3
		rdb := d.client(t)
		holder, err := redislock.New(rdb).Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		var results []<-chan obtained
		for i := range n {
			results = append(results, obtainAsync(ctx, redislock.New(d.client(t), deployNoPolling), key, time.Minute))
			waitQueued(t, rdb, key, i+1)
		}
		time.Sleep(50 * time.Millisecond)
		for i, ch := range results {
			select {
			case r := <-ch:
				t.Fatalf("waiter %d returned while the key was held: %v", i, r.err)
			default:
			}
		}
		require.NoError(t, holder.Release(ctx))
		for i, ch := range results {
			var r obtained
			select {
			case r = <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("waiter %d did not obtain within 5s of its turn", i)
			}
			require.NoError(t, r.err, "waiter %d", i)
			assert.Len(t, queued(t, rdb, key), n-1-i, "waiter %d was served before those behind it left the line", i)
			assert.Equal(t, r.lock.Token(), rdb.Get(ctx, key).Val(), "waiter %d holds the key", i)
			for j := i + 1; j < n; j++ {
				select {
				case o := <-results[j]:
					t.Fatalf("waiter %d returned before waiter %d released: %v", j, i, o.err)
				default:
				}
			}
			require.NoError(t, r.lock.Release(ctx))
		}
		requireOnlyMarksOf(t, rdb, key)
	})

	// Reentrancy: a WithLock nested in a WithLock of the same key on the
	// same Locker, with the context the outer one gave fn, joins at once
	// (same token, no wait); another Locker cannot take the key meanwhile;
	// the inner end leaves the key held and the outer end frees it.
	t.Run("Reentrancy", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		const key = "deploy-reentrant"
		rdb, other := d.client(t), d.client(t)
		locker, competitor := redislock.New(rdb), redislock.New(other)
		ran := false
		err := locker.WithLock(ctx, key, func(outer context.Context) error {
			token := other.Get(ctx, key).Val()
			require.NotEmpty(t, token)
			start := time.Now()
			err := locker.WithLock(outer, key, func(inner context.Context) error {
				ran = true
				assert.Less(t, time.Since(start), 200*time.Millisecond, "the nested WithLock waited")
				assert.Equal(t, token, other.Get(ctx, key).Val(), "the same hold")
				_, err := competitor.TryObtain(ctx, key, time.Second)
				assert.ErrorIs(t, err, redislock.ErrNotObtained, "another Locker got a held key")
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, token, other.Get(ctx, key).Val(), "the nested end did not free the key")
			return nil
		})
		require.NoError(t, err)
		assert.True(t, ran)
		assert.Zero(t, other.Exists(ctx, key).Val(), "the outer end freed the key")
		requireOnlyMarksOf(t, rdb, key)
	})

	// Read-write lock: two readers of two Lockers hold the key together;
	// the writer cannot take it and waits; a reader that comes while the
	// writer waits lines up behind it; once the readers release the writer
	// gets the key alone, and a reader waits until it releases.
	t.Run("ReadWrite", func(t *testing.T) {
		ctx := ctxT(t, 15*time.Second)
		const key = "deploy-rw"
		rdb := d.client(t)
		r1, err := redislock.New(d.client(t)).TryObtain(ctx, key, time.Minute, redislock.WithShared())
		require.NoError(t, err)
		r2, err := redislock.New(d.client(t)).TryObtain(ctx, key, time.Minute, redislock.WithShared())
		require.NoError(t, err, "a second reader shares the key")
		assert.NotEqual(t, r1.Token(), r2.Token())

		writers := redislock.New(d.client(t), deployNoPolling)
		_, err = writers.TryObtain(ctx, key, time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained, "the writer while readers hold the key")
		w := obtainAsync(ctx, writers, key, time.Minute)
		waitQueued(t, rdb, key, 1)
		_, err = redislock.New(d.client(t)).TryObtain(ctx, key, time.Minute, redislock.WithShared())
		require.ErrorIs(t, err, redislock.ErrNotObtained, "a reader while a writer waits")

		require.NoError(t, r1.Release(ctx))
		select {
		case o := <-w:
			t.Fatalf("the writer returned while a reader held the key: %v", o.err)
		case <-time.After(100 * time.Millisecond):
		}
		require.NoError(t, r2.Release(ctx))
		o := <-w
		require.NoError(t, o.err)
		assert.Equal(t, o.lock.Token(), rdb.Get(ctx, key).Val(), "the writer holds the key")

		reader := obtainAsync(ctx, redislock.New(d.client(t), deployNoPolling), key, time.Minute, redislock.WithShared())
		waitQueued(t, rdb, key, 1)
		select {
		case o := <-reader:
			t.Fatalf("a reader returned while the writer held the key: %v", o.err)
		case <-time.After(100 * time.Millisecond):
		}
		require.NoError(t, o.lock.Release(ctx))
		ro := <-reader
		require.NoError(t, ro.err, "the reader after the writer")
		require.NoError(t, ro.lock.Release(ctx))
		requireOnlyMarksOf(t, rdb, key)
	})

	// Semaphore of 2 permits: two holders of two Lockers hold it at once, a
	// third cannot (TryObtain fails, Obtain waits) until one releases; then
	// it gets the freed permit. Nothing is left once all have released.
	t.Run("Semaphore", func(t *testing.T) {
		ctx := ctxT(t, 15*time.Second)
		const key = "deploy-sem"
		rdb := d.client(t)
		permits := redislock.WithPermits(2)
		p1, err := redislock.New(d.client(t)).TryObtain(ctx, key, time.Minute, permits)
		require.NoError(t, err)
		p2, err := redislock.New(d.client(t)).TryObtain(ctx, key, time.Minute, permits)
		require.NoError(t, err, "the second permit")
		third := redislock.New(d.client(t), deployNoPolling)
		_, err = third.TryObtain(ctx, key, time.Minute, permits)
		require.ErrorIs(t, err, redislock.ErrNotObtained, "a third permit of 2")
		w := obtainAsync(ctx, third, key, time.Minute, permits)
		waitQueued(t, rdb, key, 1)
		select {
		case o := <-w:
			t.Fatalf("a third holder returned while 2 held permits: %v", o.err)
		case <-time.After(100 * time.Millisecond):
		}
		require.NoError(t, p1.Release(ctx))
		o := <-w
		require.NoError(t, o.err, "the waiter gets the freed permit")
		info, err := redislock.New(rdb).Inspect(ctx, key)
		require.NoError(t, err)
		var held []string
		for _, h := range info.Holders {
			held = append(held, h.Token)
		}
		assert.ElementsMatch(t, []string{p2.Token(), o.lock.Token()}, held, "the permits' holders")
		require.NoError(t, p2.Release(ctx))
		require.NoError(t, o.lock.Release(ctx))
		requireOnlyMarksOf(t, rdb, key)
	})
}

// deploySideKeysInSlot is TestDeploy_Cluster/SideKeysInTheLockKeysSlot.
func deploySideKeysInSlot(t *testing.T, cluster *redistest.Cluster) {
	ctx := ctxT(t, 30*time.Second)
	cc := cluster.Client(t)
	keys := []string{
		"deploy-slot",          // no hash tag
		"{deploy-tag}:slot",    // a hash tag
		"deploy}slot{x",        // braces, no tag; the hash part contains "}"
		"{}deploy-empty-tag",   // an empty tag: the whole key is hashed
		"deploy-slot{a}{b}",    // the first tag counts
		"deploy-slot-\xff\x00", // binary
	}
	slots := map[int64]string{}
	for _, key := range keys {
		s, err := cc.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		require.Empty(t, slots[s], "%q and %q share slot %d: pick other keys", key, slots[s], s)
		slots[s] = key
	}
	for _, key := range keys {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			ctx := ctxT(t, 15*time.Second)
			want, err := cc.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			master := cluster.MasterFor(t, key).Addr()
			kinds := map[string]bool{}
			snapshot := func(when string) {
				t.Helper()
				found := clusterKeysOf(t, cc, key)
				require.NotEmpty(t, found, "%s: no key of %q found", when, key)
				for _, k := range found {
					assert.Equal(t, master, k.addr, "%s: %q is not on the master serving %q", when, k.name, key)
					s, err := cc.ClusterKeySlot(ctx, k.name).Result()
					require.NoError(t, err)
					assert.Equal(t, want, s, "%s: %q is in slot %d, the lock key in %d", when, k.name, s, want)
					kinds[sideKind(key, k.name)] = true
				}
			}

			// An exclusive fenced holder, a new lease length (gens), a
			// fenced writer and a reader waiting.
			a := redislock.New(cluster.Client(t), redislock.WithFencing(), deployNoPolling)
			b := redislock.New(cluster.Client(t), redislock.WithFencing(), deployNoPolling)
			c := redislock.New(cluster.Client(t), deployNoPolling)
			h, err := a.Obtain(ctx, key, 10*time.Second)
			requireNoCrossSlot(t, err)
			requireNoCrossSlot(t, h.Refresh(ctx, 20*time.Second))
			w := obtainAsync(ctx, b, key, 10*time.Second)
			waitQueued(t, cc, key, 1)
			r := obtainAsync(ctx, c, key, 10*time.Second, redislock.WithShared())
			waitQueued(t, cc, key, 2)
			snapshot("a fenced holder with a new lease, a writer and a reader in line")

			requireNoCrossSlot(t, h.Release(ctx))
			wo := <-w
			requireNoCrossSlot(t, wo.err)
			assert.Greater(t, wo.lock.Fence(), h.Fence())
			requireNoCrossSlot(t, wo.lock.Release(ctx))
			ro := <-r
			requireNoCrossSlot(t, ro.err)
			r2, err := a.TryObtain(ctx, key, 10*time.Second, redislock.WithShared())
			requireNoCrossSlot(t, err)
			requireNoCrossSlot(t, r2.Refresh(ctx, 15*time.Second))
			snapshot("two readers")
			requireNoCrossSlot(t, ro.lock.Release(ctx))
			requireNoCrossSlot(t, r2.Release(ctx))

			// A semaphore: two permits held, one waiting.
			permits := redislock.WithPermits(2)
			p1, err := a.TryObtain(ctx, key, 10*time.Second, permits)
			requireNoCrossSlot(t, err)
			p2, err := b.Obtain(ctx, key, 10*time.Second, permits)
			requireNoCrossSlot(t, err)
			p3 := obtainAsync(ctx, c, key, 10*time.Second, permits)
			waitQueued(t, cc, key, 1)
			snapshot("two permits held, one waiting")
			requireNoCrossSlot(t, p1.Release(ctx))
			p3o := <-p3
			requireNoCrossSlot(t, p3o.err)
			requireNoCrossSlot(t, p2.Release(ctx))
			requireNoCrossSlot(t, p3o.lock.Release(ctx))
			snapshot("all released")

			for _, kind := range []string{"", "fence", "line", "places", "gens"} {
				assert.True(t, kinds[kind], "no key of kind %q seen: the test did not exercise it (seen %v)", kind, kinds)
			}
			requireOnlyMarksOf(t, cc, key, "fence")
		})
	}
}

// deployShardFailover is TestDeploy_Cluster/ShardFailover: the master
// serving three locks fails over (killed, or by CLUSTER FAILOVER) while
// one lock is held (not kept), one is kept alive with KeepAlive, and an
// Obtain of another Locker waits for the held one.
//
//   - The kept lock is never live while another client can take its key:
//     a competitor trying to obtain it all along never wins while the kept
//     context is live, and the key is never seen absent or another's while
//     it is. After the failover the kept lock is either still held (its
//     context live, the new master holding the key with its token) or its
//     context ended with cause ErrLockLost.
//   - The held lock was replicated before the failover: its Release after
//     it succeeds, and the waiter then obtains (it does not hang).
//   - Nothing is left of the keys but release marks, and no goroutine of
//     the library outlives the locks.
func deployShardFailover(t *testing.T, cluster *redistest.Cluster, kill bool) {
	requireNoneLeft := noLibraryGoroutinesLeft(t)
	ctx := ctxT(t, 40*time.Second)
	tag := "{deploy-failover-manual}"
	if kill {
		tag = "{deploy-failover-killed}"
	}
	heldKey, keptKey := tag+":held", tag+":kept"
	const keptTTL = 1500 * time.Millisecond

	cc, waiterClient, competitorClient := cluster.Client(t), cluster.Client(t), cluster.Client(t)
	locker := redislock.New(cc)
	held, err := locker.Obtain(ctx, heldKey, 20*time.Second)
	require.NoError(t, err)
	kept, err := locker.Obtain(ctx, keptKey, keptTTL)
	require.NoError(t, err)
	kctx := kept.KeepAlive(ctx)
	waiter := obtainAsync(ctx, redislock.New(waiterClient), heldKey, 20*time.Second)
	waitQueued(t, cc, heldKey, 1)

	master := cluster.MasterFor(t, keptKey)
	require.Equal(t, master, cluster.MasterFor(t, heldKey))
	// The locks and the place are replicated before the failover.
	replica := cluster.ReplicaOf(t, master).Client(t, func(o *redis.Options) {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	})
	require.Eventually(t, func() bool {
		return replica.Get(ctx, heldKey).Val() == held.Token() && replica.Get(ctx, keptKey).Val() == kept.Token() &&
			replica.LLen(ctx, sideKey(heldKey, "line")).Val() == 1
	}, 5*time.Second, 10*time.Millisecond, "the replica has the locks")

	// The competitor and the watcher run until the end of the failover
	// plus two leases.
	competitor := redislock.New(competitorClient)
	var wins, violations, tries atomic.Int64
	var mu sync.Mutex
	var seen []string // what the violations were
	violation := func(format string, args ...any) {
		violations.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < 10 {
			seen = append(seen, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			tries.Add(1)
			lk, err := competitor.TryObtain(tctx, keptKey, time.Second)
			if err == nil {
				wins.Add(1)
				if kctx.Err() == nil {
					violation("the competitor obtained %q while the kept context was live", keptKey)
				}
				_ = lk.Release(tctx)
			}
			v, err := competitorClient.Get(tctx, keptKey).Result()
			cancel()
			if (errors.Is(err, redis.Nil) || (err == nil && v != kept.Token())) && kctx.Err() == nil {
				violation("%q is %q (%v) while the kept context is live", keptKey, v, err)
			}
		}
	}()

	start := time.Now()
	var newMaster *redistest.Server
	if kill {
		old := cluster.KillMaster(t, keptKey)
		newMaster = cluster.WaitFailover(t, old)
	} else {
		newMaster = cluster.Failover(t, master)
	}
	require.NotEqual(t, master.Addr(), newMaster.Addr())
	t.Logf("failover took %v", time.Since(start))
	time.Sleep(2 * keptTTL)
	close(stop)
	wg.Wait()

	direct := newMaster.Client(t)
	if err := kctx.Err(); err == nil {
		assert.Equal(t, kept.Token(), direct.Get(ctx, keptKey).Val(), "a live kept lock's key on the new master")
		pttl := direct.PTTL(ctx, keptKey).Val()
		assert.True(t, pttl > 0 && pttl <= keptTTL, "PTTL %v of a live kept lock", pttl)
		t.Logf("the kept lock survived the failover")
	} else {
		assert.Equal(t, redislock.ErrLockLost, context.Cause(kctx), "the kept context ended for another cause")
		t.Logf("the kept lock was lost in the failover: %v", context.Cause(kctx))
	}
	assert.Zero(t, violations.Load(), "the kept lock was live while another could take it: %v", seen)
	t.Logf("competitor: %d tries, %d wins", tries.Load(), wins.Load())
	assert.Greater(t, tries.Load(), int64(20))

	select {
	case o := <-waiter:
		t.Fatalf("the waiter returned while the key was held: lock %v, %v", o.lock != nil, o.err)
	default:
	}
	assert.Equal(t, held.Token(), direct.Get(ctx, heldKey).Val(), "the held lock on the new master")
	err = held.Release(ctx)
	if kill && err != nil {
		// go-redis does not reload its slot map when a master dies, and
		// the client's last reload (after the kept lock's failed renewals)
		// ran before the replica was promoted: the first command to the
		// shard may fail on the network. The library then asks for a
		// reload, and Release may be called again.
		require.NotErrorIs(t, err, redislock.ErrNotHeld)
		t.Logf("Release after the failover, first attempt: %v", err)
		attempts := 1
		require.Eventually(t, func() bool {
			attempts++
			err = held.Release(ctx)
			return err == nil
		}, 3*time.Second, 50*time.Millisecond, "Release after the failover: %v", err)
		t.Logf("released at attempt %d", attempts)
	}
	require.NoError(t, err, "Release of a replicated lock after the failover")
	select {
	case o := <-waiter:
		require.NoError(t, o.err, "the waiter after the release")
		assert.Equal(t, o.lock.Token(), direct.Get(ctx, heldKey).Val(), "the waiter holds the key")
		require.NoError(t, o.lock.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter hangs 10s after the release")
	}
	if kctx.Err() == nil {
		require.NoError(t, kept.Release(ctx), "Release of the surviving kept lock")
	} else if err := kept.Release(ctx); err != nil {
		require.ErrorIs(t, err, redislock.ErrNotHeld, "Release of a lost lock")
	}
	requireOnlyMarksOf(t, cc, heldKey)
	requireOnlyMarksOf(t, cc, keptKey)

	for _, c := range []*redis.ClusterClient{cc, waiterClient, competitorClient} {
		require.NoError(t, c.Close())
	}
	requireNoneLeft(5 * time.Second)
}

// deploySentinelFailover is TestDeploy_Sentinel/Failover.
func deploySentinelFailover(t *testing.T, sentinel *redistest.Sentinel) {
	requireNoneLeft := noLibraryGoroutinesLeft(t)
	ctx := ctxT(t, 40*time.Second)
	const key, ttl = "deploy-sentinel-failover", 3 * time.Second
	rdb, competitorClient := sentinel.Client(t), sentinel.Client(t)
	lk, err := redislock.New(rdb).Obtain(ctx, key, ttl)
	require.NoError(t, err)
	kctx := lk.KeepAlive(ctx)

	sentinel.WaitSynced(t)
	replica := sentinel.Replica().Client(t)
	require.Eventually(t, func() bool { return replica.Get(ctx, key).Val() == lk.Token() }, 5*time.Second,
		10*time.Millisecond, "the replica has the lock")

	competitor := redislock.New(competitorClient)
	var tries, violations atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			tries.Add(1)
			if other, err := competitor.TryObtain(tctx, key, time.Second); err == nil {
				if kctx.Err() == nil {
					violations.Add(1)
				}
				_ = other.Release(tctx)
			}
			cancel()
		}
	}()

	start := time.Now()
	newPrimary := sentinel.Failover(t)
	require.Equal(t, sentinel.Replica(), newPrimary)
	t.Logf("failover took %v", time.Since(start))
	time.Sleep(2 * ttl)
	close(stop)
	wg.Wait()

	require.NoError(t, kctx.Err(), "the kept lock was lost in the failover: %v", context.Cause(kctx))
	direct := newPrimary.Client(t)
	assert.Equal(t, lk.Token(), direct.Get(ctx, key).Val(), "the new primary holds the key with the lock's token")
	pttl := direct.PTTL(ctx, key).Val()
	assert.True(t, pttl > 0 && pttl <= ttl, "PTTL %v on the new primary", pttl)
	assert.Zero(t, violations.Load(), "the competitor obtained the key while the kept context was live")
	assert.Greater(t, tries.Load(), int64(20))
	require.NoError(t, lk.Release(ctx), "Release after the failover")
	assert.Zero(t, direct.Exists(ctx, key).Val(), "released on the new primary")
	requireOnlyMarksOf(t, rdb, key)

	require.NoError(t, rdb.Close())
	require.NoError(t, competitorClient.Close())
	requireNoneLeft(5 * time.Second)
}

// A clusterKey is a key found on a Cluster master.
type clusterKey struct{ name, addr string }

// clusterKeysOf returns the keys of the lock key key (the key itself and
// every key the library keeps beside it, which end with ":" and the key)
// found by SCAN on every master of cc, with the master's address.
func clusterKeysOf(t testing.TB, cc *redis.ClusterClient, key string) []clusterKey {
	t.Helper()
	var mu sync.Mutex
	var found []clusterKey
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		names, err := keysOf(ctx, c, key)
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			found = append(found, clusterKey{n, c.Options().Addr})
		}
		return err
	})
	require.NoError(t, err)
	return found
}

// keysOf returns the keys of the lock key key in c (one node), by SCAN:
// the key, its side keys, and its slot's fence counter.
func keysOf(ctx context.Context, c *redis.Client, key string) ([]string, error) {
	var names []string
	it := c.Scan(ctx, 0, "*", 1000).Iterator()
	for it.Next(ctx) {
		if k := it.Val(); k == key || strings.HasSuffix(k, ":"+key) || k == fenceKey(key) {
			names = append(names, k)
		}
	}
	return names, it.Err()
}

// sideKind returns the kind of the key name kept for the lock key key
// ("fence", "line", ..., "spent"), or "" for the lock key itself.
func sideKind(key, name string) string {
	switch name {
	case key:
		return ""
	case fenceKey(key):
		return "fence"
	}
	const infix = "}:rl1:"
	i := strings.Index(name, infix)
	if i < 0 {
		return "unknown:" + name
	}
	kind, _, _ := strings.Cut(name[i+len(infix):], ":")
	return kind
}

// requireOnlyMarksOf fails t unless, within 2 s, nothing of the lock key key
// is left in rdb (on every master of a Cluster) but release marks that
// expire, and keys of the kinds in allowed (such as "fence", which has no
// expiry).
func requireOnlyMarksOf(t testing.TB, rdb redis.UniversalClient, key string, allowed ...string) {
	t.Helper()
	var names []string
	deadline := time.Now().Add(2 * time.Second)
	for {
		names = names[:0]
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			for _, k := range clusterKeysOf(t, c, key) {
				names = append(names, k.name)
			}
		case *redis.Client:
			var err error
			names, err = keysOf(context.Background(), c, key)
			require.NoError(t, err)
		default:
			t.Fatalf("requireOnlyMarksOf: a %T", rdb)
		}
		names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(allowed, sideKind(key, n)) })
		rest := withoutMarks(t, rdb, names)
		if len(rest) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys of %q left: %q", key, rest)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireNoCrossSlot fails t if err is not nil, saying first whether it is
// Redis Cluster's CROSSSLOT error.
func requireNoCrossSlot(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		require.NotContains(t, err.Error(), "CROSSSLOT", "a script touched keys of different slots")
	}
	require.NoError(t, err)
}

// libraryGoroutines returns the goroutines that run code of package
// redislock (lease keepers, subscriptions, background releases and calls),
// by the first line of their stack ("goroutine N [...]:").
func libraryGoroutines() map[string]string {
	const pkg = "github.com/seed5e0b76d9/redislock."
	buf := make([]byte, 4<<20)
	n := runtime.Stack(buf, true)
	gs := map[string]string{}
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, pkg) && !strings.Contains(g, pkg+"TestMain(") {
			id, _, _ := strings.Cut(g, " [")
			gs[id] = g
		}
	}
	return gs
}

// noLibraryGoroutinesLeft fails t unless, within d of the call it
// returns, every goroutine of package redislock started since
// noLibraryGoroutinesLeft was called has ended. Goroutines of earlier
// tests (a background release lasts up to go-redis's retry window) do
// not count.
func noLibraryGoroutinesLeft(t testing.TB) func(d time.Duration) {
	before := libraryGoroutines()
	return func(d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			var left []string
			for id, g := range libraryGoroutines() {
				if _, ok := before[id]; !ok {
					left = append(left, g)
				}
			}
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines of package redislock still run %v after the locks ended:\n%s",
					len(left), d, strings.Join(left, "\n\n"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// deployShardLocalHandOffs is TestDeploy_Cluster/HandOffsStayInTheirShard.
func deployShardLocalHandOffs(t *testing.T, cluster *redistest.Cluster) {
	ctx := ctxT(t, 30*time.Second)
	const key = "deploy-shard-local"
	serving := cluster.MasterFor(t, key)
	busMessages := func(srv *redistest.Server) (publish, shard int64) {
		info, _ := srv.Do(t, "CLUSTER", "INFO").(string)
		for _, line := range strings.Split(info, "\r\n") {
			name, v, _ := strings.Cut(line, ":")
			var n int64
			fmt.Sscan(v, &n)
			switch name {
			case "cluster_stats_messages_publish_received":
				publish = n
			case "cluster_stats_messages_publishshard_received":
				shard = n
			}
		}
		return publish, shard
	}
	type count struct{ publish, shard int64 }
	// snapshot returns each node's counts once they stay the same for
	// 200 ms: the bus delivers messages after the command that sent them
	// has returned (those of the subtests before this one too).
	snapshot := func() map[*redistest.Server]count {
		var last map[*redistest.Server]count
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			m := map[*redistest.Server]count{}
			for _, srv := range cluster.Nodes() {
				p, s := busMessages(srv)
				m[srv] = count{p, s}
			}
			if maps.Equal(m, last) || time.Now().After(deadline) {
				return m
			}
			last = m
		}
	}
	before := snapshot()
	a, b := redislock.New(cluster.Client(t), deployNoPolling), redislock.New(cluster.Client(t), deployNoPolling)
	const handOffs = 10
	lk, err := a.Obtain(ctx, key, 10*time.Second)
	require.NoError(t, err)
	for i := range handOffs {
		next := b
		if i%2 == 1 {
			next = a
		}
		w := obtainAsync(ctx, next, key, 10*time.Second)
		waitQueued(t, cluster.Client(t), key, 1)
		require.NoError(t, lk.Release(ctx))
		o := <-w
		require.NoError(t, o.err)
		lk = o.lock
	}
	require.NoError(t, lk.Release(ctx))
	after := snapshot()
	replica := cluster.ReplicaOf(t, serving)
	for srv, c := range after {
		got := count{c.publish - before[srv].publish, c.shard - before[srv].shard}
		switch srv {
		case replica:
			assert.GreaterOrEqual(t, got.shard, int64(handOffs), "the serving shard's replica got the hand-offs")
		default:
			assert.Zero(t, got.publish, "%s got PUBLISH messages over the bus", srv.Addr())
			if srv != serving {
				assert.Zero(t, got.shard, "%s, of another shard, got shard messages", srv.Addr())
			}
		}
	}
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, b.Shutdown(ctx))
}

// slotOrdered returns keys sorted by their Cluster hash slot (the order in
// which a set across slots takes them), failing t unless they are in
// distinct slots.
func slotOrdered(t *testing.T, cc *redis.ClusterClient, keys []string) []string {
	t.Helper()
	slots := map[string]int64{}
	for _, k := range keys {
		slots[k] = cc.ClusterKeySlot(context.Background(), k).Val()
	}
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b string) int { return int(slots[a] - slots[b]) })
	for i := 1; i < len(out); i++ {
		require.NotEqual(t, slots[out[i-1]], slots[out[i]], "keys in distinct slots")
	}
	return out
}

// Sets of keys across Cluster slots: given back before a call that gives up
// returns; Until, joins and fences across slots; a lost part; no deadlock.
func TestDeploy_ClusterSetsAcrossSlots(t *testing.T) {
	waitsInParallel(t)
	cluster := redistest.StartCluster(t)
	rdb, other := cluster.Client(t), cluster.Client(t)
	ctx := ctxT(t, 90*time.Second)

	// Specifies docs/lock-family.md ("While such a call waits for a later
	// slot, the keys of the earlier slots are held ... if it fails or
	// gives up, they are given back before it returns"): an ObtainMulti
	// across slots that gives up at its deadline, and a TryObtainMulti
	// that finds the last slot's key held, return with none of the
	// earlier slots' keys held, or with an error saying their release goes
	// on (it waits 100 ms for it).
	for _, lag := range []time.Duration{0, 30 * time.Millisecond} {
		t.Run("GiveUpGivesBackBeforeReturning/lag="+lag.String(), func(t *testing.T) {
			keys := slotOrdered(t, rdb, []string{"ga", "gb", "gc"})
			last := keys[len(keys)-1]
			competitor := redislock.New(other)
			held, err := competitor.Obtain(ctx, last, time.Minute)
			require.NoError(t, err)
			// The locker's client is on a link whose writes are lag late
			// (a WAN), the checker's is not.
			slow := &slowConns{lag: lag}
			locker := redislock.New(cluster.Client(t, func(o *redis.ClusterOptions) { o.Dialer = slow.dial }))
			stillHeld := 0
			check := func(err error) { // held still: only when the error says so
				if existing(t, other, keys[:len(keys)-1]) > 0 && !strings.Contains(err.Error(), "released in the background") {
					stillHeld++
				}
			}
			for i := 0; i < 5; i++ {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				start := time.Now()
				_, err = locker.ObtainMulti(cctx, keys, time.Minute)
				cancel()
				require.ErrorIs(t, err, redislock.ErrNotObtained, "after %v", time.Since(start))
				check(err)
				_, err = locker.TryObtainMulti(ctx, keys, time.Minute)
				require.ErrorIs(t, err, redislock.ErrNotObtained)
				check(err)
			}
			assert.Zero(t, stillHeld, "of 10 calls that gave up, this many returned with an earlier slot's key still held, and an error that did not say so")
			require.NoError(t, held.Release(ctx))
			require.NoError(t, locker.Shutdown(ctx))
			for _, k := range keys {
				requireOnlyMarksOf(t, rdb, k, "fence")
			}
		})
	}

	// Specifies Lock.Until for a set across slots: while kept, and after
	// Refresh, Until is never later than any key's expiry in Redis; a
	// nested one-key call on a key of the set joins it with no acquire
	// sent; FromContext in WithLockMulti gives the lock; fences per key
	// grow across holders.
	t.Run("UntilJoinFencesAcross", func(t *testing.T) {
		keys := slotOrdered(t, rdb, []string{"ua", "ub", "uc"})
		locker := redislock.New(rdb)
		var prev []int64
		for round := 0; round < 3; round++ {
			err := locker.WithLockMulti(ctx, keys, func(fctx context.Context) error {
				lk := redislock.FromContext(fctx)
				require.NotNil(t, lk)
				require.Equal(t, keys, lk.Keys())
				f := lk.Fences()
				for i := range f {
					require.Positive(t, f[i], "fence of %s", keys[i])
					if prev != nil {
						assert.Greater(t, f[i], prev[i], "fence of %s grows", keys[i])
					}
				}
				prev = f
				for i := 0; i < 5; i++ {
					u := lk.Until()
					for _, k := range keys {
						left := other.PTTL(ctx, k).Val()
						assert.LessOrEqual(t, time.Until(u), left+5*time.Millisecond, "Until after %s's expiry", k)
					}
					time.Sleep(70 * time.Millisecond)
				}
				require.NoError(t, lk.Refresh(fctx, 150*time.Millisecond))
				u := lk.Until()
				for _, k := range keys {
					left := other.PTTL(ctx, k).Val()
					assert.LessOrEqual(t, time.Until(u), left+5*time.Millisecond, "Until after %s's expiry (after a shorter Refresh)", k)
				}
				inner, err := locker.Obtain(fctx, keys[1], time.Second)
				require.NoError(t, err)
				assert.Equal(t, lk.FenceOf(keys[1]), inner.Fence())
				require.NoError(t, inner.Release(ctx))
				return nil
			}, redislock.WithTTL(300*time.Millisecond), redislock.WithFencing())
			require.NoError(t, err)
		}
		require.NoError(t, locker.Shutdown(ctx))
		for _, k := range keys {
			requireOnlyMarksOf(t, rdb, k, "fence")
		}
	})

	// Specifies losing one key of a set across slots: the kept context
	// ends with ErrLockLost; Until is then no later than the moment of the
	// loss; a nested call joins nothing (ErrLockLost); Release returns
	// ErrNotHeld naming the lost key and frees the others; the intruder's
	// value is untouched.
	t.Run("LostPartAcross", func(t *testing.T) {
		keys := slotOrdered(t, rdb, []string{"la", "lb", "lc"})
		locker := redislock.New(rdb)
		lk, err := locker.ObtainMulti(ctx, keys, 300*time.Millisecond)
		require.NoError(t, err)
		kept := lk.KeepAlive(ctx)
		require.NoError(t, other.Set(ctx, keys[1], "intruder", time.Minute).Err())
		select {
		case <-kept.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the loss of a part was not found")
		}
		lostAt := time.Now()
		assert.ErrorIs(t, context.Cause(kept), redislock.ErrLockLost)
		assert.False(t, lk.Until().After(lostAt), "Until after the loss was found")
		_, err = locker.Obtain(lk.Context(context.Background()), keys[0], time.Second)
		assert.ErrorIs(t, err, redislock.ErrLockLost, "a nested call joined a lost set")
		time.Sleep(100 * time.Millisecond)
		err = lk.Release(ctx)
		assert.ErrorIs(t, err, redislock.ErrNotHeld)
		if err != nil {
			assert.Contains(t, err.Error(), keys[1])
		}
		assert.Equal(t, "intruder", other.Get(ctx, keys[1]).Val())
		assert.Zero(t, existing(t, other, []string{keys[0], keys[2]}), "other keys freed")
		require.NoError(t, other.Del(ctx, keys[1]).Err())
		require.NoError(t, locker.Shutdown(ctx))
	})

	// Specifies a set across slots racing one-key callers and an
	// overlapping set in another order: every call finishes (no deadlock),
	// and no key is ever held by two (each holder checks the key holds its
	// token at the end of its critical section).
	t.Run("NoDeadlockAcross", func(t *testing.T) {
		keys := slotOrdered(t, rdb, []string{"da", "db", "dc", "dd"})
		var errs = make(chan error, 100)
		done := make(chan struct{})
		var n int
		run := func(set []string) {
			n++
			go func() {
				l := redislock.New(cluster.Client(t))
				for i := 0; i < 10; i++ {
					err := l.WithLockMulti(ctx, set, func(fctx context.Context) error {
						lk := redislock.FromContext(fctx)
						time.Sleep(2 * time.Millisecond)
						for _, k := range set {
							if v := other.Get(ctx, k).Val(); v == "" {
								return errors.New("key " + k + " not held in the critical section")
							}
						}
						_ = lk
						return nil
					}, redislock.WithTTL(2*time.Second))
					if err != nil {
						errs <- err
					}
				}
				_ = l.Shutdown(ctx)
				done <- struct{}{}
			}()
		}
		run(keys)
		run([]string{keys[3], keys[0]})
		run([]string{keys[2], keys[1], keys[0]})
		run([]string{keys[1]})
		run([]string{keys[3]})
		timeout := time.After(40 * time.Second)
		for i := 0; i < n; i++ {
			select {
			case <-done:
			case <-timeout:
				t.Fatal("deadlock: calls did not finish")
			}
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, k := range keys {
			requireOnlyMarksOf(t, rdb, k, "fence")
		}
	})
}

// existing counts the keys of keys that exist (one EXISTS per key: they
// may be in different slots).
func existing(t *testing.T, rdb redis.UniversalClient, keys []string) int {
	t.Helper()
	n := 0
	for _, k := range keys {
		v, err := rdb.Exists(context.Background(), k).Result()
		require.NoError(t, err)
		n += int(v)
	}
	return n
}

// Specifies docs/lock-family.md ("Release returns ErrNotHeld naming the keys
// that were lost (it releases the others)") and Refresh's error for a set
// across Cluster slots, as on one node: with one key of a slot's part
// deleted behind the set's back, Release names that key alone, though the
// other key of its slot was held (and this Release freed it), and frees
// every other key; a Refresh that finds the loss names the lost key, not
// "one of the keys".
func TestObtainMulti_LostKeyAcrossSlotsIsNamed(t *testing.T) {
	waitsInParallel(t)
	cluster := redistest.StartCluster(t)
	rdb := cluster.Client(t)
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.New(rdb)
	keys := []string{"cn:2", "{cn:2}lost", "cn:0"}
	require.NotEqual(t, slot(hashPart("cn:2")), slot(hashPart("cn:0")), "a set across slots")

	lk, err := locker.ObtainMulti(ctx, keys, time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, "{cn:2}lost").Err())
	err = lk.Release(ctx)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), `"{cn:2}lost"`)
	assert.NotContains(t, err.Error(), `"cn:2"`, "cn:2 was held, and released")
	assert.NotContains(t, err.Error(), `"cn:0"`)
	assert.Zero(t, existing(t, rdb, keys), "the keys still held were released")

	lk, err = locker.ObtainMulti(ctx, keys, time.Minute)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, "{cn:2}lost").Err())
	err = lk.Refresh(ctx, time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotHeld)
	assert.Contains(t, err.Error(), `"{cn:2}lost"`)
	assert.NotContains(t, err.Error(), `"cn:2"`, "Refresh names the lost key")
	assert.NotContains(t, err.Error(), `"cn:0"`)
	require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
	assert.Zero(t, existing(t, rdb, keys), "the keys still held were released")
	require.NoError(t, locker.Shutdown(ctx))
	for _, k := range keys {
		requireOnlyMarksOf(t, rdb, k, "fence")
	}
}
