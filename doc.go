// Package redislock provides distributed locks on Redis, built on go-redis
// v9: a lock that many machines share, with leases that renew themselves, a
// signal that arrives in time when a lock is lost, fair waiting (a release
// hands the lock to the next in line), and fencing tokens.
//
// A [Locker] acquires locks on keys of one Redis deployment: a single node,
// a Sentinel-managed primary or a Cluster ([NewQuorum] holds them on a
// majority of independent masters instead). A lock is a lease: it is held
// for a ttl unless renewed, so a holder that dies cannot block everyone
// forever. Each acquisition stores a 128-bit random token in the key;
// Release and Refresh act only while the key still holds that token, so a
// holder whose lease has expired can never release or extend the lock of the
// holder that came after it.
//
//	locker := redislock.New(rdb) // one per client, shared
//
//	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // how long to wait
//	defer cancel()
//	lock, err := locker.Obtain(ctx, "order:42", 10*time.Second) // a 10 s lease
//	if errors.Is(err, redislock.ErrNotObtained) {
//		return errBusy // another owner held it until the deadline
//	} else if err != nil {
//		return err // Redis failed: the lock's state is unknown
//	}
//	defer lock.Release(ctx)
//
// Call [Locker.Shutdown] before the process exits, so that clean-up that goes
// on in the background reaches Redis. Test errors with [errors.Is]: an
// error may wrap several of this package's errors, and the context's.
//
// A lease can expire while its holder still works (a long GC pause, a frozen
// VM), and a Redis failover can lose a lock, since replication is
// asynchronous. Keep leases alive with [Locker.WithLock] or [Lock.KeepAlive],
// which also tell the holder when the lock is lost, and use fencing tokens
// ([WithFencing], [SetFenced]) where two holders at once must never write.
//
// The [examples] show each use. The depth is in the repository's docs:
//   - [How it works]: the scripts, the token, the fair line and hand-off.
//   - [Lease keeping]: renewals, the lease clock, the safety margin.
//   - [Reentrancy, read-write locks and semaphores].
//   - [Fencing].
//   - [Guarantees and limits], with the test behind each claim.
//   - [Fault tolerance]: replicas, Sentinel, Cluster, a quorum of masters.
//   - [Performance], [Observability], and [Migrating] from bsm/redislock
//     and redsync.
//
// [examples]: https://pkg.go.dev/github.com/seed5e0b76d9/redislock#pkg-examples
// [How it works]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/how-it-works.md
// [Lease keeping]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/lease-keeping.md
// [Reentrancy, read-write locks and semaphores]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/lock-family.md
// [Fencing]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/fencing.md
// [Guarantees and limits]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/guarantees.md
// [Fault tolerance]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/fault-tolerance.md
// [Performance]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/performance.md
// [Observability]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/observability.md
// [Migrating]: https://github.com/seed5e0b76d9/redislock/blob/main/docs/migrating.md
package redislock
