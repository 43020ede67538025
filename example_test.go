package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// exampleServers are the redis-servers the examples run on (TestMain
// starts them); exampleClient hands them out in turn.
var (
	exampleServers []*redistest.Server
	exampleNext    int
)

// startExampleServers starts three redis-servers for the examples
// (ExampleNewQuorum needs three independent masters) and returns what
// stops them.
func startExampleServers() (stop func(), err error) {
	stop = func() {
		for _, s := range exampleServers {
			s.Close()
		}
		exampleServers = nil
	}
	for range 3 {
		s, err := redistest.Launch()
		if err != nil {
			stop()
			return func() {}, err
		}
		exampleServers = append(exampleServers, s)
	}
	return stop, nil
}

// exampleClient returns a client of an empty Redis, one of the
// redis-servers the tests started (each call the next one), so that the
// examples run anywhere. Use your own *redis.Client (or ClusterClient)
// instead.
func exampleClient() (*redis.Client, func()) {
	srv := exampleServers[exampleNext%len(exampleServers)]
	exampleNext++
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		panic(err)
	}
	return rdb, func() { _ = rdb.Close() }
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

// WithLock runs a function under the lock and keeps the lease alive while it
// runs: here, a third-party access token is refreshed by one process instead
// of by every process whose copy expired.
func ExampleLocker_WithLock() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb, redislock.WithTTL(10*time.Second))
	ctx := context.Background()

	err := locker.WithLock(ctx, "token-refresh", func(ctx context.Context) error {
		// ctx is cancelled with cause ErrLockLost if the lock is lost:
		// pass it to every call the work makes.
		return rdb.Set(ctx, "access-token", "fresh", time.Hour).Err()
	}, redislock.WithWait(0)) // someone else refreshing: nothing to do
	if errors.Is(err, redislock.ErrNotObtained) {
		fmt.Println("another process is refreshing the token")
		return
	} else if err != nil {
		panic(err)
	}
	fmt.Println("token:", rdb.Get(ctx, "access-token").Val())
	// Output: token: fresh
}

// KeepAlive gives a lock from Obtain the same lease keeping as WithLock: a
// context that ends when the lock is lost.
func ExampleLock_KeepAlive() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "mq:message:8841", 5*time.Second)
	if err != nil {
		panic(err)
	}
	lctx := lock.KeepAlive(ctx)
	// ... process the message with lctx ...
	if err := lock.Release(ctx); err != nil {
		panic(err)
	}
	<-lctx.Done() // Release ends the lease keeping
	fmt.Println("lost:", errors.Is(context.Cause(lctx), redislock.ErrLockLost))
	// Output: lost: false
}

// Fencing tokens reject the writes of a holder whose lease expired while it
// was paused. The protected resource keeps the highest fence it has seen;
// SetFenced does that for a value in Redis. For a SQL row the same check is
//
//	UPDATE stock SET count = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// where 0 rows updated means the write was fenced off.
func ExampleLock_Fence() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb, redislock.WithFencing())
	ctx := context.Background()

	old, _ := locker.Obtain(ctx, "stock:7", time.Second)
	_ = old.Release(ctx) // stands in for a lease that expired during a pause
	cur, _ := locker.Obtain(ctx, "stock:7", time.Second)
	fmt.Println("fences increase:", cur.Fence() > old.Fence())

	fmt.Println("current holder:", redislock.SetFenced(ctx, rdb, "stock:7:count", "41", cur.Fence()))
	err := redislock.SetFenced(ctx, rdb, "stock:7:count", "42", old.Fence())
	fmt.Println("stale holder rejected:", errors.Is(err, redislock.ErrFenceRejected))
	fmt.Println("value:", rdb.HGet(ctx, "stock:7:count", "value").Val())
	// Output:
	// fences increase: true
	// current holder: <nil>
	// stale holder rejected: true
	// value: 41
}

// Process an at-least-once message once. A lock only stops two consumers
// from working on the message at the same time; a redelivery after the
// work was done would take the free lock and do it again. So the work
// leaves a done-marker, checked under the lock, and the lock is held for as
// long as the work takes (WithLock keeps the lease alive). A consumer that
// finds the lock taken leaves the message for now (it will be redelivered);
// one that gets a Redis error must not acknowledge the message either.
func ExampleLocker_WithLock_messageOnce() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	processed := 0
	handle := func(msgID string) (ack bool) {
		err := locker.WithLock(ctx, "msg:"+msgID, func(ctx context.Context) error {
			if rdb.Exists(ctx, "done:"+msgID).Val() == 1 {
				return nil // done before: a redelivery
			}
			processed++ // the work
			return rdb.Set(ctx, "done:"+msgID, 1, 24*time.Hour).Err()
		}, redislock.WithWait(0))
		switch {
		case errors.Is(err, redislock.ErrNotObtained):
			return false // another consumer works on it now
		case err != nil:
			return false // Redis failed: the work may not be done
		}
		return true
	}

	fmt.Println(handle("m-1"), handle("m-1"), handle("m-2"))
	fmt.Println("processed:", processed)
	// Output:
	// true true true
	// processed: 2
}

// Refresh a third-party access token once, not once per instance. Every
// instance that finds the token stale waits for the lock, and looks again
// under it: the first refreshes, the others find the new token.
func ExampleLocker_Obtain_tokenRefresh() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	var refreshes atomic.Int64
	token := func() (string, error) {
		if tok, err := rdb.Get(ctx, "api-token").Result(); err == nil {
			return tok, nil // fresh
		}
		lock, err := locker.Obtain(ctx, "api-token:refresh", 10*time.Second)
		if err != nil {
			return "", err
		}
		defer lock.Release(ctx)
		if tok, err := rdb.Get(ctx, "api-token").Result(); err == nil {
			return tok, nil // refreshed while we waited
		}
		refreshes.Add(1)
		tok := "token-1" // ask the third party for a new one here
		return tok, rdb.Set(ctx, "api-token", tok, time.Hour).Err()
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := token(); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("refreshed", refreshes.Load(), "time(s)")
	// Output: refreshed 1 time(s)
}

// ObtainMulti holds several keys as one lock, all of them or none: here a
// transfer, which checks one balance and changes two. Transfers the other
// way take the same keys in the other order, at the same time, and neither
// deadlocks nor overdraws (see docs/lock-family.md, "Sets of keys").
func ExampleLocker_ObtainMulti() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()
	defer locker.Shutdown(ctx) // before the client closes: ends its subscription
	rdb.Set(ctx, "balance:alice", 100, 0)
	rdb.Set(ctx, "balance:bob", 30, 0)

	transfer := func(from, to string, amount int64) error {
		lock, err := locker.ObtainMulti(ctx, []string{"account:" + from, "account:" + to}, 10*time.Second)
		if err != nil {
			return err
		}
		defer lock.Release(ctx)
		balance, err := rdb.Get(ctx, "balance:"+from).Int64()
		if err != nil {
			return err
		}
		if balance < amount { // no other transfer of these accounts runs until Release
			return fmt.Errorf("%s has %d, not %d", from, balance, amount)
		}
		_, err = rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
			tx.DecrBy(ctx, "balance:"+from, amount)
			tx.IncrBy(ctx, "balance:"+to, amount)
			return nil
		})
		return err
	}

	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				err = transfer("alice", "bob", 10) // locks account:alice, account:bob
			} else {
				err = transfer("bob", "alice", 5) // locks account:bob, account:alice
			}
			if err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("alice:", rdb.Get(ctx, "balance:alice").Val(), "bob:", rdb.Get(ctx, "balance:bob").Val())
	// Output: alice: 75 bob: 55
}

// A function that takes a lock can call another that takes the same lock:
// with the context WithLock gave it, the inner WithLock joins the outer one
// instead of waiting for it (forever) to end.
func ExampleLock_Context() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	saveOrder := func(ctx context.Context) error {
		return locker.WithLock(ctx, "order:42", func(ctx context.Context) error {
			fmt.Println("saving, under the lock")
			return nil
		})
	}
	err := locker.WithLock(ctx, "order:42", func(ctx context.Context) error {
		fmt.Println("checking, under the lock")
		return saveOrder(ctx) // joins: the same lock, one more hold
	})
	fmt.Println("done:", err)
	// Output:
	// checking, under the lock
	// saving, under the lock
	// done: <nil>
}

// In the fn of WithLock or WithLockMulti, FromContext returns the lock fn
// runs under, with no round trip and no *Lock passed down: here its
// fences, one per key, with which SetFenced writes each item's count. A
// holder whose lease ran out while it was paused has lower fences than the
// holders after it, and its writes are refused (see Lock.Fence).
func ExampleFromContext() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb, redislock.WithFencing())
	ctx := context.Background()

	// save writes the counts of the keys of the lock that ctx carries.
	save := func(ctx context.Context, counts ...string) error {
		lock := redislock.FromContext(ctx)
		if lock == nil {
			return errors.New("save: not under the lock")
		}
		for i, key := range lock.Keys() {
			if err := redislock.SetFenced(ctx, rdb, key+":count", counts[i], lock.Fences()[i]); err != nil {
				return err
			}
		}
		return nil
	}
	cart := []string{"stock:apple", "stock:pear"}
	for _, counts := range [][]string{{"9", "4"}, {"8", "3"}} {
		err := locker.WithLockMulti(ctx, cart, func(ctx context.Context) error {
			fmt.Println("fences:", redislock.FromContext(ctx).Fences())
			return save(ctx, counts...)
		})
		if err != nil {
			panic(err)
		}
	}
	fmt.Println("apple:", rdb.HGet(ctx, "stock:apple:count", "value").Val(), "pear:", rdb.HGet(ctx, "stock:pear:count", "value").Val())

	err := redislock.SetFenced(ctx, rdb, "stock:apple:count", "100", 1) // the first holder's fence
	fmt.Println("a stale holder's write refused:", errors.Is(err, redislock.ErrFenceRejected))
	fmt.Println("outside the lock:", save(ctx, "0", "0"))
	// Output:
	// fences: [1 1]
	// fences: [2 2]
	// apple: 8 pear: 3
	// a stale holder's write refused: true
	// outside the lock: save: not under the lock
}

// A read-write lock: readers share the key, a writer holds it alone.
func ExampleWithShared() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()

	r1, _ := locker.Obtain(ctx, "config", time.Minute, redislock.WithShared())
	r2, _ := locker.Obtain(ctx, "config", time.Minute, redislock.WithShared())
	_, err := locker.TryObtain(ctx, "config", time.Minute) // the writer
	fmt.Println("two readers; the writer:", errors.Is(err, redislock.ErrNotObtained))

	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := locker.TryObtain(ctx, "config", time.Minute)
	fmt.Println("no reader; the writer:", err == nil)
	_ = w.Release(ctx)
	// Output:
	// two readers; the writer: true
	// no reader; the writer: true
}

// A semaphore: at most 2 calls to a rate-limited API at once, across all
// processes; each permit has its own lease, so a crashed holder frees its
// permit when its lease ends.
func ExampleWithPermits() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb)
	ctx := context.Background()
	two := redislock.WithPermits(2)

	p1, _ := locker.Obtain(ctx, "partner-api", 30*time.Second, two)
	p2, _ := locker.Obtain(ctx, "partner-api", 30*time.Second, two)
	_, err := locker.TryObtain(ctx, "partner-api", 30*time.Second, two)
	fmt.Println("third call waits:", errors.Is(err, redislock.ErrNotObtained))
	_ = p1.Release(ctx)
	p3, err := locker.TryObtain(ctx, "partner-api", 30*time.Second, two)
	fmt.Println("after a release:", err == nil)
	_ = p2.Release(ctx)
	_ = p3.Release(ctx)
	// Output:
	// third call waits: true
	// after a release: true
}

// Inspect tells who holds a key, for how long, and how many wait: here a
// lock of a Locker that describes its holders (WithHolder; the default is
// the host name and process id).
func ExampleLocker_Inspect() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()
	worker := redislock.New(rdb, redislock.WithHolder("billing worker 3"))
	lock, err := worker.Obtain(ctx, "invoice:7", time.Minute, redislock.WithFencing())
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)

	info, err := redislock.New(rdb).Inspect(ctx, "invoice:7")
	if err != nil {
		panic(err)
	}
	h := info.Holders[0]
	fmt.Println(info.Mode, "by", h.Description, "fence", info.Fence, "waiting", info.Waiting)
	fmt.Println("token matches:", h.Token == lock.Token(), "lease left > 59s:", h.TTL > 59*time.Second)
	// Output:
	// exclusive by billing worker 3 fence 1 waiting 0
	// token matches: true lease left > 59s: true
}

// Hooks report what happens to a Locker's locks; SlogHooks writes them to a
// log/slog Logger (a lost lock at ERROR, failures at WARN, contention at
// INFO, everything at DEBUG).
func ExampleSlogHooks() {
	rdb, done := exampleClient()
	defer done()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level:       slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return omitTime(a) },
	}))
	locker := redislock.New(rdb, redislock.WithHooks(redislock.SlogHooks(logger)))
	ctx := context.Background()

	lock, _ := locker.Obtain(ctx, "report", time.Minute)   // DEBUG: not logged at INFO
	_, err := locker.TryObtain(ctx, "report", time.Minute) // contention: DEBUG too
	fmt.Println(errors.Is(err, redislock.ErrNotObtained))
	rdb.Del(ctx, "report") // someone deletes the key under the holder
	_ = lock.Release(ctx)  // WARN: the lock was not held any more
	// Output:
	// true
	// level=WARN msg="redislock: release" key=report outcome=not_held err="redislock: lock not held: \"report\": gone before its lease's end (Redis lost it, or an earlier run of this release, whose reply was lost, released it)"
}

// omitTime drops the time and the durations from log records, so that the
// example's output is the same every time.
func omitTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey || a.Key == "wait" || a.Key == "held" {
		return slog.Attr{}
	}
	return a
}

// A quorum Locker holds each lock on a majority of independent masters: it
// survives the loss of a minority of them.
func ExampleNewQuorum() {
	var clients []redis.UniversalClient
	for range 3 {
		rdb, done := exampleClient()
		defer done()
		clients = append(clients, rdb)
	}
	locker := redislock.NewQuorum(clients, redislock.WithFencing())
	ctx := context.Background()

	lock, err := locker.Obtain(ctx, "payout:9", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("held on a majority, fence", lock.Fence())
	_, err = locker.TryObtain(ctx, "payout:9", 10*time.Second)
	fmt.Println("a second holder:", errors.Is(err, redislock.ErrNotObtained))
	fmt.Println("release:", lock.Release(ctx))
	// Output:
	// held on a majority, fence 1
	// a second holder: true
	// release: <nil>
}

// WithReplicas makes the acquisition wait until replicas have the lock
// write, so that a failover to one of them keeps the lock. Here the Redis
// has no replica: the acquisition fails clearly, and holds nothing.
func ExampleWithReplicas() {
	rdb, done := exampleClient()
	defer done()
	locker := redislock.New(rdb, redislock.WithReplicas(1, 100*time.Millisecond))

	_, err := locker.Obtain(context.Background(), "ledger", 10*time.Second)
	fmt.Println(errors.Is(err, redislock.ErrNotReplicated))
	fmt.Println("key left:", rdb.Exists(context.Background(), "ledger").Val())
	// Output:
	// true
	// key left: 0
}
