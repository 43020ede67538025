package tests

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// replicationThrough makes the replica of s replicate from its primary
// through a proxy, whose Pause holds back the replication stream: writes
// made meanwhile never reach the replica if the primary dies first.
func replicationThrough(t *testing.T, s *redistest.Sentinel) *faultproxy.Proxy {
	t.Helper()
	p := faultproxy.New(t, s.Primary().Addr())
	_, port, _ := strings.Cut(p.Addr(), ":")
	s.Replica().Do(t, "REPLICAOF", "127.0.0.1", port)
	require.Eventually(t, func() bool {
		info, _ := s.Replica().Do(t, "INFO", "replication").(string)
		return strings.Contains(info, "master_port:"+port) && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 20*time.Millisecond, "the replica replicates through the proxy")
	return p
}

// killPrimary kills the primary of s and waits until Sentinel promoted the
// replica.
func killPrimary(t *testing.T, s *redistest.Sentinel, p *faultproxy.Proxy) {
	t.Helper()
	s.Primary().Kill(t)
	p.ResetAll() // what the replica had not received is lost with the primary
	require.Eventually(t, func() bool { return s.CurrentPrimary(t) == s.Replica().Addr() }, 20*time.Second, 50*time.Millisecond)
}

// The failover that drops an unreplicated lock, on a real Sentinel
// deployment (primary, replica, 3 Sentinels). The replication stream is held
// back while the lock is written, then the primary is killed and Sentinel
// promotes the replica, which never saw the lock:
//
//   - without WithReplicas the lock is acquired, then lost: another client
//     takes the key on the new primary (at once: the holder still believes
//     it holds the lock until its next renewal, which is what replica
//     acknowledgement prevents), and the holder's kept context ends with
//     ErrLockLost within the lease;
//   - with WithReplicas(1, ...) the acquisition fails at once with
//     ErrNotReplicated ("0 of 1 replicas"), and leaves nothing behind.
func TestReplicas_FailoverDropsUnreplicatedLock(t *testing.T) {
	waitsInParallel(t)
	t.Run("without", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		p := replicationThrough(t, s)
		rdb := s.Client(t)
		ctx := ctxT(t, 60*time.Second)
		p.Pause()
		lk, err := redislock.New(rdb).Obtain(ctx, "k", 6*time.Second)
		require.NoError(t, err, "nothing asks the replica")
		until := lk.Until()
		lctx := lk.KeepAlive(ctx)
		lost := watchLoss(lctx)
		killPrimary(t, s, p)
		other := s.Client(t)
		won := competeUntil(t, other, "k", 8*time.Second, nil)
		require.False(t, won.IsZero(), "the lock was lost with the primary: another client took it")
		select {
		case l := <-lost:
			assert.ErrorIs(t, l.cause, redislock.ErrLockLost)
			assert.True(t, l.at.Before(until), "the holder was told (%v) within the lease (%v)", l.at, until)
		case <-time.After(time.Until(until)):
			t.Fatal("the holder was not told within the lease")
		}
	})
	t.Run("with", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		p := replicationThrough(t, s)
		rdb := s.Client(t)
		ctx := ctxT(t, 60*time.Second)
		p.Pause()
		start := time.Now()
		_, err := redislock.New(rdb, redislock.WithReplicas(1, 300*time.Millisecond)).Obtain(ctx, "k", 6*time.Second)
		require.ErrorIs(t, err, redislock.ErrNotReplicated)
		assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged")
		assert.Less(t, time.Since(start), 2*time.Second, "it fails within about the WAIT timeout")
		require.Eventually(t, func() bool { return s.Primary().Do(t, "EXISTS", "k") == int64(0) }, 2*time.Second, 10*time.Millisecond,
			"the unacknowledged lock is released")
		killPrimary(t, s, p)
	})
}

// With WithReplicas(1, ...) an acquired lock survives the crash of its
// primary: on the promoted replica the key still holds the lock's token,
// another client cannot take it, and Release works there.
func TestReplicas_LockSurvivesFailover(t *testing.T) {
	waitsInParallel(t)
	s := redistest.StartSentinel(t)
	p := replicationThrough(t, s)
	rdb := s.Client(t)
	ctx := ctxT(t, 60*time.Second)
	locker := redislock.New(rdb, redislock.WithReplicas(1, time.Second))
	lk, err := locker.Obtain(ctx, "k", 30*time.Second)
	require.NoError(t, err)
	killPrimary(t, s, p)
	assert.Equal(t, lk.Token(), s.Replica().Do(t, "GET", "k"), "the new primary has the lock")
	_, err = redislock.New(s.Client(t)).TryObtain(ctx, "k", time.Second)
	assert.ErrorIs(t, err, redislock.ErrNotObtained)
	require.Eventually(t, func() bool { return lk.Release(ctx) == nil }, 10*time.Second, 100*time.Millisecond,
		"the client finds the new primary")
	assert.Equal(t, int64(0), s.Replica().Do(t, "EXISTS", "k"))
}

// Every write of a lock with WithReplicas is acknowledged before it counts:
// the acquisition returns only once the replica has the key, a Refresh
// while the replication is held back fails with ErrNotReplicated and does
// not move Until, and renewals that are not acknowledged end the kept
// context with ErrLockLost within the lease, although the primary renewed
// the key; then the key is given back at once, not kept by those renewals.
func TestReplicas_WritesAcknowledged(t *testing.T) {
	s := redistest.StartSentinel(t)
	p := replicationThrough(t, s)
	rdb := s.Client(t)
	ctx := ctxT(t, 60*time.Second)
	locker := redislock.New(rdb, redislock.WithReplicas(1, 200*time.Millisecond))

	lk, err := locker.Obtain(ctx, "k", 1500*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), s.Replica().Do(t, "GET", "k"), "the replica has the lock when Obtain returns")

	p.Pause()
	until := lk.Until()
	err = lk.Refresh(ctx, 1500*time.Millisecond)
	require.ErrorIs(t, err, redislock.ErrNotReplicated)
	assert.Equal(t, until, lk.Until(), "an unacknowledged Refresh does not count")

	lctx := lk.KeepAlive(ctx)
	lost := watchLoss(lctx)
	time.Sleep(time.Until(until))
	assert.ErrorIs(t, lctx.Err(), context.Canceled, "at the end of the acknowledged lease, the kept context is done")
	select {
	case l := <-lost:
		assert.ErrorIs(t, l.cause, redislock.ErrLockLost)
		assert.Less(t, l.at.Sub(until), timerSlack, "told before the acknowledged lease ran out, give or take a late timer")
	case <-time.After(3 * time.Second):
		t.Fatal("renewals that no replica acknowledged kept the lease")
	}
	assert.Eventually(t, func() bool { return s.Primary().Client(t).Exists(ctx, "k").Val() == 0 }, time.Second, 10*time.Millisecond,
		"once the holder was told the lock is lost, the key is given back: renewals that no replica acknowledged do not keep it")
	p.Resume()
	require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
}

// WithReplicas checks its input, before anything is sent: n >= 0, a
// timeout of at least 1ms that leaves max(200ms, ReadTimeout/10) of the
// client's ReadTimeout.
func TestReplicas_BadInput(t *testing.T) {
	b := miniBackend(t)
	rdb, n := b.client(t, func(o *redis.Options) { o.ReadTimeout = time.Second })
	for _, opt := range []redislock.Option{
		redislock.WithReplicas(-1, time.Second),
		redislock.WithReplicas(1, 0),
		redislock.WithReplicas(1, 2*time.Second),
		redislock.WithReplicas(1, 801*time.Millisecond),
	} {
		_, err := redislock.New(rdb, opt).TryObtain(context.Background(), "k", time.Second)
		assert.ErrorIs(t, err, redislock.ErrInvalidOption)
	}
	assert.Zero(t, n.Load())
	_, err := redislock.New(rdb, redislock.WithReplicas(0, 0)).TryObtain(context.Background(), "k", time.Second)
	assert.NoError(t, err, "n = 0 turns acknowledgement off")
}

// The longest WAIT timeout WithReplicas accepts still ends in
// ErrNotReplicated, never in go-redis's read timeout: with no replica to
// acknowledge, on a client with a ReadTimeout of 1s, WithReplicas(1, 800ms)
// makes TryObtain and Obtain return ErrNotReplicated within the WAIT's
// timeout and a tick, and the key is gone when they return. (Redis answers
// a WAIT that timed out at its next tick, up to 100ms late: a timeout of
// 950ms ran into the read timeout.)
func TestReplicas_LongestTimeoutIsNotAReadTimeout(t *testing.T) {
	waitsInParallel(t)
	s := redistest.Start(t)
	rdb := s.Client(t, func(o *redis.Options) { o.ReadTimeout = time.Second })
	ctx := ctxT(t, 30*time.Second)
	locker := redislock.New(rdb, redislock.WithReplicas(1, 800*time.Millisecond))
	_, err := locker.TryObtain(ctx, "warm-up", time.Second) // loads the script: a NOSCRIPT costs a second WAIT
	require.ErrorIs(t, err, redislock.ErrNotReplicated)
	for i := range 4 {
		obtain := locker.TryObtain
		if i%2 == 1 {
			obtain = locker.Obtain
		}
		start := time.Now()
		_, err := obtain(ctx, "k", time.Second)
		require.ErrorIs(t, err, redislock.ErrNotReplicated)
		assert.Less(t, time.Since(start), 2*time.Second, "no read timeout: the WAIT was answered")
		assert.Equal(t, int64(0), rdb.Exists(ctx, "k").Val(), "released when it returns")
	}
}

// ErrNotReplicated says that nothing is held: TryObtain and Obtain return
// it only once the unacknowledged key is released, also when that release
// is slow (here 300 ms on its way), as far as ctx allows.
func TestReplicas_NotReplicatedHoldsNothing(t *testing.T) {
	srv := redistest.Start(t) // a primary with no replica: WAIT 1 times out
	rdb := srv.Client(t)
	var slow atomic.Bool
	rdb.AddHook(hook{before: func(cmd redis.Cmder) {
		if slow.Load() && isScript(cmd, releaseScript) {
			time.Sleep(300 * time.Millisecond)
		}
	}})
	checker := srv.Client(t)
	ctx := ctxT(t, 20*time.Second)
	locker := redislock.New(rdb, redislock.WithReplicas(1, 50*time.Millisecond))
	_, err := locker.TryObtain(ctx, "warm-up", time.Minute) // loads the scripts
	require.ErrorIs(t, err, redislock.ErrNotReplicated)
	slow.Store(true)
	for name, obtain := range map[string]func(context.Context, string, time.Duration, ...redislock.Option) (*redislock.Lock, error){
		"TryObtain": locker.TryObtain, "Obtain": locker.Obtain,
	} {
		_, err := obtain(ctx, "k", time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotReplicated, name)
		assert.Contains(t, err.Error(), "the lock was released", name)
		assert.Zero(t, checker.Exists(ctx, "k").Val(), "%s returned while the key was held", name)
	}
	require.NoError(t, locker.Shutdown(ctx))
}

// BenchmarkReplicas measures the uncontended Obtain + Release cycle on a
// primary with one replica, with and without WithReplicas(1, ...).
func BenchmarkReplicas(b *testing.B) {
	primary := redistest.Start(b)
	replica := redistest.Start(b, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	for !strings.Contains(replica.Do(b, "INFO", "replication").(string), "master_link_status:up") {
		time.Sleep(10 * time.Millisecond)
	}
	rdb := primary.Client(b)
	ctx := context.Background()
	for _, n := range []int{0, 1} {
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			locker := redislock.New(rdb, redislock.WithReplicas(n, time.Second))
			for b.Loop() {
				lk, err := locker.Obtain(ctx, "bench", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A kept WithReplicas lock whose primary fails over is reported lost
// within the lease of its last acknowledged write (the promoted replica has
// no replica to acknowledge its renewals), and from then on nothing
// extends it: it is given back as soon as Redis answers, so the key is
// free within about a second of the later of that lease's end and the
// promotion (a renewal that Redis ran but no replica acknowledged does not
// keep it for another lease). A competitor that uses WithReplicas too gets
// ErrNotObtained while the lost lock holds the key, then, until a replica
// reattaches to the new primary, ErrNotReplicated, holding nothing; once
// one has reattached (and acknowledged), it obtains the key.
func TestReplicas_LostLockIsFreeWithinALease(t *testing.T) {
	waitsInParallel(t)
	s := redistest.StartSentinel(t)
	p := replicationThrough(t, s)
	ctx := ctxT(t, 60*time.Second)
	const ttl = 2 * time.Second
	replicated := redislock.WithReplicas(1, 100*time.Millisecond)
	lk, err := redislock.New(s.Client(t), replicated).Obtain(ctx, "k", ttl)
	require.NoError(t, err)
	lost := watchLoss(lk.KeepAlive(ctx))
	time.Sleep(ttl)      // renewed, and acknowledged, a few times
	killed := time.Now() // the last acknowledged write was before this
	killPrimary(t, s, p)
	promoted := time.Now() // nobody can take the key before; Sentinel may take longer than a lease
	primary := s.Replica()
	replicas := func() string { return infoField(t, primary, "replication", "connected_slaves") }

	competitor := redislock.New(s.Client(t), replicated)
	var answered, free time.Time // the first answer of the new primary; the first ErrNotReplicated
	notObtained, notReplicated := 0, 0
	for notReplicated < 5 {
		time.Sleep(20 * time.Millisecond)
		require.Less(t, time.Since(promoted), ttl+10*time.Second, "the key was never free")
		require.Equal(t, "0", replicas(), "a replica attached to the new primary")
		got, err := competitor.TryObtain(ctx, "k", time.Minute)
		require.Nil(t, got, "obtained while no replica was attached")
		switch {
		case errors.Is(err, redislock.ErrNotReplicated):
			if free.IsZero() {
				free = time.Now()
			}
			notReplicated++
			assert.Zero(t, primary.Do(t, "EXISTS", "k"), "ErrNotReplicated left the key held")
		case errors.Is(err, redislock.ErrNotObtained):
			require.True(t, free.IsZero(), "the key was taken again after it was free: %v", err)
			notObtained++
		case answered.IsZero():
			t.Logf("before the client found the new primary: %v", err) // it still dials the old one
			continue
		default:
			require.NoError(t, err, "neither ErrNotObtained nor ErrNotReplicated")
		}
		if answered.IsZero() {
			answered = time.Now()
		}
	}
	l := <-lost
	require.ErrorIs(t, l.cause, redislock.ErrLockLost)
	t.Logf("lost %v, free %v after the primary was killed, promoted after %v; %d ErrNotObtained, then %d ErrNotReplicated",
		l.at.Sub(killed), free.Sub(killed), promoted.Sub(killed), notObtained, notReplicated)
	assert.True(t, l.at.Before(killed.Add(ttl)), "reported lost %v after the last acknowledged write, after its lease of %v", l.at.Sub(killed), ttl)
	bound := killed.Add(ttl)
	if promoted.After(bound) {
		bound = promoted
	}
	assert.Less(t, free.Sub(bound), time.Second, "the key outlived its last acknowledged lease")

	// A replica reattaches: the old primary, back empty.
	s.Primary().Restart(t)
	s.Primary().Do(t, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port()))
	for reattached := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		require.Less(t, time.Since(reattached), 20*time.Second, "not obtained once a replica reattached")
		got, err := competitor.TryObtain(ctx, "k", time.Minute)
		if err == nil {
			assert.Equal(t, "1", replicas())
			require.NoError(t, got.Release(ctx))
			break
		}
		require.ErrorIs(t, err, redislock.ErrNotReplicated)
	}
}

// infoField returns field of the section of srv's INFO.
func infoField(t testing.TB, srv *redistest.Server, section, field string) string {
	t.Helper()
	info, _ := srv.Do(t, "INFO", section).(string)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	t.Fatalf("no %s in INFO %s", field, section)
	return ""
}

// On a Cluster, a WithReplicas lock's writes go to its master's own client,
// which does not follow MOVED: after a failover of the lock's shard, whose
// slot map the client still has from before, a Refresh and the renewals
// of a kept lock reach the new master (the old one answers MOVED: the
// renewal ran nowhere and is sent again there), are acknowledged by its
// replica, and set the lease; the caller never sees the MOVED.
func TestReplicas_RenewalFollowsClusterFailover(t *testing.T) {
	waitsInParallel(t)
	cluster := redistest.StartCluster(t)
	ctx := ctxT(t, 60*time.Second)
	const ttl = 20 * time.Second
	const key = "{replicas-failover}:k"
	locker := redislock.New(cluster.Client(t), redislock.WithReplicas(1, time.Second))
	lk, err := locker.Obtain(ctx, key, ttl)
	require.NoError(t, err)
	kept, err := locker.Obtain(ctx, key+"-kept", 3*time.Second)
	require.NoError(t, err)
	kctx := kept.KeepAlive(ctx)

	newMaster := cluster.Failover(t, cluster.MasterFor(t, key))
	require.NoError(t, lk.Refresh(ctx, 2*ttl), "a Refresh right after the failover")
	direct := newMaster.Client(t)
	assert.Greater(t, direct.PTTL(ctx, key).Val(), ttl, "the new master has the new lease")

	time.Sleep(3 * time.Second) // the kept lock renewed on the new master
	require.NoError(t, kctx.Err(), "cause %v", context.Cause(kctx))
	assert.Equal(t, kept.Token(), direct.Get(ctx, key+"-kept").Val())
	require.NoError(t, kept.Release(ctx))
	require.NoError(t, lk.Release(ctx))
}

// WithReplicas on a Cluster while a lock key's slot migrates to another
// master (resharding): the old master answers ASK, which changes no slot
// map until the migration ends, so a write WithReplicas (sent to the
// master's own client, which follows no redirection) fails at once with
// the ASK in its error, changing nothing: a Refresh, a TryObtain. An
// Obtain that may wait retries until the migration ends, then takes the
// key; once the slot is the new master's, Refresh and Release of the lock
// obtained before work there, and nothing is left.
func TestReplicas_SlotMigration(t *testing.T) {
	waitsInParallel(t)
	cluster := redistest.StartCluster(t)
	ctx := ctxT(t, 60*time.Second)
	const key, other = "{replicas-migrate}:k", "{replicas-migrate}:other"
	src := cluster.MasterFor(t, key)
	var dst *redistest.Server
	for _, m := range cluster.Masters(t) {
		if m.Addr() != src.Addr() {
			dst = m
			break
		}
	}
	rdb := cluster.Client(t)
	locker := redislock.New(rdb, redislock.WithReplicas(1, time.Second))
	lk, err := locker.Obtain(ctx, key, 20*time.Second)
	require.NoError(t, err)

	// Migrate the slot as redis-cli --cluster reshard does.
	slot := src.Do(t, "CLUSTER", "KEYSLOT", key).(int64)
	srcID, dstID := src.Do(t, "CLUSTER", "MYID").(string), dst.Do(t, "CLUSTER", "MYID").(string)
	dst.Do(t, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	src.Do(t, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	host, port, _ := strings.Cut(dst.Addr(), ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range src.Do(t, "CLUSTER", "GETKEYSINSLOT", slot, 100).([]any) {
		args = append(args, k)
	}
	require.Greater(t, len(args), 7, "the lock's keys are in the slot")
	src.Do(t, args...)

	start := time.Now()
	err = lk.Refresh(ctx, 20*time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ASK")
	_, err = locker.TryObtain(ctx, other, 5*time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ASK")
	assert.Less(t, time.Since(start), 500*time.Millisecond, "the failures do not wait for a slot map that does not change")

	waiter := obtainAsync(ctx, locker, other, 5*time.Second, redislock.WithWait(10*time.Second))
	time.Sleep(300 * time.Millisecond)
	for _, m := range cluster.Masters(t) {
		m.Do(t, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	w := <-waiter
	require.NoError(t, w.err, "the waiting Obtain once the migration ended")
	require.NoError(t, lk.Refresh(ctx, 20*time.Second), "Refresh on the new master")
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, w.lock.Release(ctx))
	assert.Zero(t, dst.Client(t).Exists(ctx, key, other).Val(), "nothing left of the locks")
}
