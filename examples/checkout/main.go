// Command checkout shows what a lock on a set of keys is for: buyers check
// out carts of several stock items at once, and the carts share items.
//
// A checkout is a read-check-write on every item of its cart: GET each
// stock, and if every item has a unit left, do a little work (payment,
// ...), then SET each stock one lower; if one is sold out, the cart is
// refused, and no stock changes. No other checkout of any of those items
// may run in between (that oversells, as ./oversell shows for one item), so
// the checkout holds a lock on each of its items. The demo runs the same
// buyers twice, on the same carts: buyer A checks out {apple, pear}, buyer
// B {pear, apple, fig}, and so on, each cart over and over:
//
//	redis: redis://127.0.0.1:6379
//	one key at a time: 8 buyers, 160 carts: 3 paid, 0 refused, 157 stuck -> DEADLOCKED  in 2.176s
//	one set per cart:  8 buyers, 160 carts: 67 paid, 93 refused, 0 stuck -> no deadlock  in 575ms
//	stock left after the sets: apple 0, pear 17, plum 16, fig 0 (of 50 each; none oversold)
//
// One key at a time, each buyer locks its cart's items in the cart's order,
// with nested WithLock calls (see lockEach): A holds apple and waits for
// pear while B holds pear and waits for apple, and neither ever gets its
// second lock. Here a wait gives up after -wait: the buyer is stuck, drops
// the cart and releases what it held; without that bound, the buyers would
// wait for each other forever. Nearly every cart gets stuck: the buyers
// start together and give up together, and so meet in the same cycles
// again.
//
// One set per cart, each checkout holds all its items as one lock
// (Locker.WithLockMulti). A set waits in the line of each of its items,
// takes them all at once when it is first in every line, and holds none of
// them while it waits (on a Redis Cluster it takes them slot by slot, every
// set in the same order): sets never deadlock, and need no bound on their
// wait. (Single locks taken in one agreed order, say sorted, avoid the
// cycle too, if every caller in every process keeps to it.)
//
// Run it with an embedded in-process Redis (miniredis), or against a real
// one, from the repository's root:
//
//	(cd examples && go run ./checkout)
//	(cd examples && go run ./checkout -redis redis://127.0.0.1:6379)
//
// -redis defaults to $REDIS_URL, and takes the URLs that ./oversell does
// (see demoredis.NewClient). Other flags: -buyers, -stock (of each item),
// -carts (per buyer), -work (the time between reading and writing the
// stocks) and -wait. The keys carry a random prefix and are deleted at the
// end. The exit code is 1 on an error, if a run oversold, or if a set got
// stuck.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/examples/internal/demoredis"
)

// carts are what the buyers check out, buyer i carts[i%len(carts)]: each
// shares items with others, in another order.
var carts = [][]string{
	{"apple", "pear"},
	{"pear", "apple", "fig"},
	{"plum", "fig"},
	{"fig", "plum", "apple"},
}

// items are the items of carts.
var items = []string{"apple", "pear", "plum", "fig"}

// config describes one run of the checkouts.
type config struct {
	Buyers int           // concurrent buyers
	Stock  int           // units of each item
	Carts  int           // carts each buyer checks out
	Work   time.Duration // work between reading and writing the stocks
	Wait   time.Duration // longest wait for a single lock
	Sets   bool          // lock a cart as one set, else one key at a time
	Prefix string        // prefix of this run's keys
}

// result is the outcome of one run.
type result struct {
	Paid    int            // carts checked out
	Refused int            // carts with an item sold out
	Stuck   int            // carts given up after waiting Wait for a lock
	Sold    map[string]int // units of each item that went out
	Left    map[string]int // stock of each item in Redis at the end
	Elapsed time.Duration  // wall time of the run
}

func main() {
	url := flag.String("redis", "", "Redis URL, e.g. redis://127.0.0.1:6379 (default $REDIS_URL; none: embedded miniredis)")
	cfg := config{}
	flag.IntVar(&cfg.Buyers, "buyers", 8, "concurrent buyers")
	flag.IntVar(&cfg.Stock, "stock", 50, "units of each item")
	flag.IntVar(&cfg.Carts, "carts", 20, "carts each buyer checks out")
	flag.DurationVar(&cfg.Work, "work", time.Millisecond, "simulated work between reading and writing the stocks")
	flag.DurationVar(&cfg.Wait, "wait", 100*time.Millisecond, "one key at a time: longest wait for a lock before the buyer gives up the cart")
	flag.Parse()
	if *url == "" {
		*url = os.Getenv("REDIS_URL")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := checkouts(ctx, *url, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// checkouts connects to Redis and runs the checkouts with one key at a
// time and then with one set per cart.
func checkouts(ctx context.Context, url string, cfg config) error {
	if cfg.Buyers < 1 || cfg.Stock < 1 || cfg.Carts < 1 || cfg.Wait <= 0 {
		return fmt.Errorf("want buyers, stock, carts and wait above 0, got %d, %d, %d and %v", cfg.Buyers, cfg.Stock, cfg.Carts, cfg.Wait)
	}
	rdb, closeRedis, err := demoredis.Open(ctx, url)
	if err != nil {
		return err
	}
	defer closeRedis()

	prefix := "checkout:" + rand.Text()[:10] + ":" // unique per process
	var res result
	for _, sets := range []bool{false, true} {
		name := "one key at a time:"
		cfg.Sets, cfg.Prefix = sets, prefix+"keys:"
		if sets {
			name, cfg.Prefix = "one set per cart:", prefix+"sets:"
		}
		if res, err = runCheckouts(ctx, rdb, cfg); err != nil {
			return fmt.Errorf("%s %w", name, err)
		}
		if err := res.check(cfg.Stock); err != nil {
			return fmt.Errorf("BUG: %s %w", name, err)
		}
		verdict := "no deadlock"
		if res.Stuck > 0 {
			verdict = "DEADLOCKED"
		}
		fmt.Printf("%-18s %d buyers, %d carts: %d paid, %d refused, %d stuck -> %s  in %v\n", name,
			cfg.Buyers, cfg.Buyers*cfg.Carts, res.Paid, res.Refused, res.Stuck, verdict, res.Elapsed.Round(time.Millisecond))
	}
	var left []string
	for _, item := range items {
		left = append(left, fmt.Sprintf("%s %d", item, res.Left[item]))
	}
	fmt.Printf("stock left after the sets: %s (of %d each; none oversold)\n", strings.Join(left, ", "), cfg.Stock)
	if res.Stuck > 0 {
		return fmt.Errorf("BUG: one set per cart: %d carts stuck", res.Stuck)
	}
	return nil
}

// check returns an error if an item sold more than stock, or its stock in
// Redis is not what is left of stock after its sales.
func (res result) check(stock int) error {
	for _, item := range items {
		if res.Sold[item] > stock || res.Left[item] != stock-res.Sold[item] {
			return fmt.Errorf("%s: %d sold of %d, %d left", item, res.Sold[item], stock, res.Left[item])
		}
	}
	return nil
}

// runCheckouts runs one round of checkouts on fresh keys under
// cfg.Prefix: cfg.Buyers buyers check out cfg.Carts carts each. It deletes
// its keys before it returns.
func runCheckouts(ctx context.Context, rdb redis.UniversalClient, cfg config) (result, error) {
	stockKey := func(item string) string { return cfg.Prefix + "stock:" + item }
	lockKey := func(item string) string { return cfg.Prefix + "lock:" + item }
	var keys []string
	sold := map[string]*atomic.Int64{} // units of each item that went out
	for _, item := range items {
		keys = append(keys, stockKey(item), lockKey(item))
		sold[item] = new(atomic.Int64)
		if err := rdb.Set(ctx, stockKey(item), cfg.Stock, 0).Err(); err != nil {
			return result{}, err
		}
	}
	defer rdb.Del(context.WithoutCancel(ctx), keys...)

	// checkout takes one unit of every item of cart if none is sold out,
	// reporting whether it did, and counts what it sold. The GETs and the
	// SETs are separate commands: only the locks keep other checkouts of
	// these items out from between them.
	checkout := func(ctx context.Context, cart []string) (bool, error) {
		stocks := make([]int, len(cart))
		for i, item := range cart {
			n, err := rdb.Get(ctx, stockKey(item)).Int()
			if err != nil || n <= 0 {
				return false, err // sold out: refuse the whole cart
			}
			stocks[i] = n
		}
		time.Sleep(cfg.Work) // take payment, ...
		for i, item := range cart {
			if err := rdb.Set(ctx, stockKey(item), stocks[i]-1, 0).Err(); err != nil {
				return false, err
			}
			sold[item].Add(1)
		}
		return true, nil
	}

	// Checkouts are short, so retry a busy lock sooner than the default
	// backoff (8ms to 256ms) would.
	locker := redislock.New(rdb, redislock.WithTTL(5*time.Second),
		redislock.WithBackoff(time.Millisecond, 16*time.Millisecond))
	defer locker.Shutdown(context.WithoutCancel(ctx)) // its clean-up reaches Redis before the keys go
	var paid, refused, stuck atomic.Int64
	buy := func(ctx context.Context, cart []string) error {
		var locks []string
		for _, item := range cart {
			locks = append(locks, lockKey(item))
		}
		run := func(ctx context.Context) error {
			ok, err := checkout(ctx, cart)
			if ok {
				paid.Add(1)
			} else if err == nil {
				refused.Add(1)
			}
			return err
		}
		var err error
		if cfg.Sets {
			err = locker.WithLockMulti(ctx, locks, run) // waits as long as ctx lets it
		} else {
			err = lockEach(ctx, locker, locks, cfg.Wait, run)
		}
		if waitRanOut(err) && ctx.Err() == nil {
			stuck.Add(1) // waited cfg.Wait for a lock: give up this cart
			return nil
		}
		return err
	}

	start := time.Now()
	errs := make([]error, cfg.Buyers)
	var wg sync.WaitGroup
	for b := range cfg.Buyers {
		wg.Go(func() {
			for range cfg.Carts {
				if errs[b] = buy(ctx, carts[b%len(carts)]); errs[b] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	res := result{Paid: int(paid.Load()), Refused: int(refused.Load()), Stuck: int(stuck.Load()),
		Sold: map[string]int{}, Left: map[string]int{}, Elapsed: time.Since(start)}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for _, item := range items {
		res.Sold[item] = int(sold[item].Load())
		left, err := rdb.Get(ctx, stockKey(item)).Int()
		if err != nil {
			return res, err
		}
		res.Left[item] = left
	}
	return res, nil
}

// waitRanOut reports whether err is that of a wait for a lock (WithWait)
// that ran out: ErrNotObtained, or, when Redis was too slow to answer the
// last attempt in time, the deadline.
func waitRanOut(err error) bool {
	return errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded)
}

// lockEach runs fn holding the locks on keys, taken one at a time in the
// order of keys, each held while it waits for the next: the tempting way,
// which deadlocks when two callers take the same keys in different orders.
// Each wait gives up after wait (ErrNotObtained), releasing the locks held.
func lockEach(ctx context.Context, locker *redislock.Locker, keys []string, wait time.Duration, fn func(context.Context) error) error {
	if len(keys) == 0 {
		return fn(ctx)
	}
	return locker.WithLock(ctx, keys[0], func(ctx context.Context) error {
		return lockEach(ctx, locker, keys[1:], wait, fn)
	}, redislock.WithWait(wait))
}
