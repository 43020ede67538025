package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
)

// exampleClient returns a client of an embedded Redis, so that the examples
// run anywhere. Use your own *redis.Client (or ClusterClient) instead.
func exampleClient() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

// Obtain waits for the lock, up to the ctx deadline.
func ExampleLocker_Obtain() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locker.Obtain(ctx, "order:42", 10*time.Second)
	if errors.Is(err, redislock.ErrNotObtained) {
		fmt.Println("someone else is working on order 42")
		return
	} else if err != nil {
		panic(err)
	}
	defer lock.Release(context.Background())

	fmt.Println("holding", lock.Key())
	// Output: holding order:42
}

// TryObtain makes one attempt: the lock is either free now or the work is
// being done elsewhere.
func ExampleLocker_TryObtain() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	first, err := locker.TryObtain(ctx, "token-refresh", time.Minute)
	if err != nil {
		panic(err)
	}
	_, err = locker.TryObtain(ctx, "token-refresh", time.Minute)
	fmt.Println("second attempt:", errors.Is(err, redislock.ErrNotObtained))

	_ = first.Release(ctx)
	again, err := locker.TryObtain(ctx, "token-refresh", time.Minute)
	fmt.Println("after release:", err == nil)
	_ = again.Release(ctx)
	// Output:
	// second attempt: true
	// after release: true
}

// Refresh extends the lease of a lock that is still held, so a job can take
// longer than the ttl it started with. ErrNotHeld means the lease ran out
// (or the lock was taken over) and the job must stop.
func ExampleLock_Refresh() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "report:daily", 5*time.Second)
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	for step := 0; step < 3; step++ {
		// ... one step of the job ...
		if err := lock.Refresh(ctx, 5*time.Second); errors.Is(err, redislock.ErrNotHeld) {
			fmt.Println("lock lost, stopping")
			return
		} else if err != nil {
			panic(err)
		}
	}
	ttl, _ := lock.TTL(ctx)
	fmt.Println("lease left:", ttl.Round(time.Second))
	// Output: lease left: 5s
}
