// Command oversell shows the classic race a distributed lock prevents: a
// flash sale that sells more units than it has.
//
// Every order does a read-check-write on a stock counter in Redis: GET the
// stock, and if some is left, do a little work (payment, fraud check, ...),
// then SET the stock one lower and count the sale. Many buyers running that
// at once read the same stock, each sells "the last unit", and the sale
// oversells. The demo runs the same sale twice on the same Redis, first
// without a lock and then with every order inside Locker.WithLock, and
// prints what each run sold:
//
//	redis: embedded miniredis (use -redis redis://127.0.0.1:6379 for a real one)
//	without lock: 16 workers sold 320 of 100 units -> OVERSOLD by 220 (final stock 76)  in 37ms
//	with lock:    16 workers sold 100 of 100 units -> no oversell     (final stock 0)  in 215ms
//
// Without the lock every one of the 320 orders went through, and the counter
// still shows stock left: concurrent SETs overwrite each other (lost
// updates), so it drops far more slowly than units go out. With the lock the
// orders take turns, and the sale stops at exactly the stock.
//
// Run it with an embedded in-process Redis (miniredis), or against a real
// one, from the repository's root (examples/ is a module of its own, so
// that the library's go.mod does not require miniredis):
//
//	(cd examples && go run ./oversell)
//	(cd examples && go run ./oversell -redis redis://127.0.0.1:6379)
//	(cd examples && go run ./oversell -redis 'redis+sentinel://127.0.0.1:26379?master_name=mymaster')
//	(cd examples && go run ./oversell -redis redis+cluster://127.0.0.1:7000)
//
// -redis defaults to $REDIS_URL (see demoredis.NewClient for the URL forms). Other
// flags: -workers, -stock, -orders (per worker) and -work (the time between
// reading and writing the stock). The keys carry a random prefix, so runs
// sharing a Redis do not collide, and are deleted at the end. The exit code is 1 if the locked run oversold.
//
// (A single Lua script or DECR would make this one counter atomic without any
// lock; the lock is what you need when the work between the read and the
// write happens outside Redis.)
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/examples/internal/demoredis"
)

// config describes one run of the sale.
type config struct {
	Workers int           // concurrent buyers
	Stock   int           // units on sale
	Orders  int           // orders each worker places, at most
	Work    time.Duration // work between reading and writing the stock
	Locked  bool          // run each order under the lock
	Prefix  string        // prefix of this run's keys
}

// result is the outcome of one run.
type result struct {
	Sold    int           // orders that went through
	Final   int           // stock left in Redis at the end
	Elapsed time.Duration // wall time of the sale
}

func main() {
	url := flag.String("redis", "", "Redis URL, e.g. redis://127.0.0.1:6379 (default $REDIS_URL; none: embedded miniredis)")
	cfg := config{}
	flag.IntVar(&cfg.Workers, "workers", 16, "concurrent buyers")
	flag.IntVar(&cfg.Stock, "stock", 100, "units on sale")
	flag.IntVar(&cfg.Orders, "orders", 20, "orders per worker (workers*orders must exceed stock)")
	flag.DurationVar(&cfg.Work, "work", 500*time.Microsecond, "simulated work between reading and writing the stock")
	flag.Parse()
	if *url == "" {
		*url = os.Getenv("REDIS_URL")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := sale(ctx, *url, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "oversell:", err)
		os.Exit(1)
	}
}

// sale connects to Redis and runs the sale without and then with the lock.
func sale(ctx context.Context, url string, cfg config) error {
	if cfg.Workers < 1 || cfg.Stock < 1 || cfg.Workers*cfg.Orders <= cfg.Stock {
		return fmt.Errorf("want workers >= 1, stock >= 1 and demand above supply (workers*orders > stock), got %d workers * %d orders vs %d units",
			cfg.Workers, cfg.Orders, cfg.Stock)
	}
	rdb, closeRedis, err := demoredis.Open(ctx, url)
	if err != nil {
		return err
	}
	defer closeRedis()

	prefix := "oversell:" + rand.Text()[:10] + ":" // unique per process
	runs := []struct {
		name, key string
		locked    bool
	}{{"without lock:", "unlocked", false}, {"with lock:", "locked", true}}
	for _, run := range runs {
		cfg.Locked, cfg.Prefix = run.locked, prefix+run.key+":"
		res, err := runSale(ctx, rdb, cfg)
		if err != nil {
			return fmt.Errorf("%s %w", run.name, err)
		}
		verdict := "no oversell"
		if over := res.Sold - cfg.Stock; over > 0 {
			verdict = fmt.Sprintf("OVERSOLD by %d", over)
		}
		fmt.Printf("%-13s %d workers sold %d of %d units -> %-15s (final stock %d)  in %v\n",
			run.name, cfg.Workers, res.Sold, cfg.Stock, verdict, res.Final, res.Elapsed.Round(time.Millisecond))
		if run.locked && res.Sold > cfg.Stock {
			return errors.New("BUG: the locked run oversold")
		}
	}
	return nil
}

// runSale runs one sale on fresh keys under cfg.Prefix: cfg.Workers buyers
// place up to cfg.Orders orders each until the stock is gone. It deletes its
// keys before it returns.
func runSale(ctx context.Context, rdb redis.UniversalClient, cfg config) (result, error) {
	stockKey, soldKey, lockKey := cfg.Prefix+"stock", cfg.Prefix+"sold", cfg.Prefix+"lock"
	defer rdb.Del(context.WithoutCancel(ctx), stockKey, soldKey, lockKey)
	if err := rdb.Set(ctx, stockKey, cfg.Stock, 0).Err(); err != nil {
		return result{}, err
	}
	if err := rdb.Set(ctx, soldKey, 0, 0).Err(); err != nil {
		return result{}, err
	}

	// order sells one unit if any is left, reporting whether it did. The
	// GET and the SET are separate commands: without the lock, other buyers
	// read the same stock in between.
	order := func(ctx context.Context) (bool, error) {
		stock, err := rdb.Get(ctx, stockKey).Int()
		if err != nil || stock <= 0 {
			return false, err // sold out
		}
		time.Sleep(cfg.Work) // take payment, check for fraud, ...
		if err := rdb.Set(ctx, stockKey, stock-1, 0).Err(); err != nil {
			return false, err
		}
		return true, rdb.Incr(ctx, soldKey).Err()
	}
	if cfg.Locked {
		// The same order, one buyer at a time: WithLock obtains the lock
		// (waiting while another buyer holds it), runs the order while
		// keeping the lease alive, and releases the lock. Orders are short,
		// so retry a busy lock sooner than the default backoff (8ms to
		// 256ms) would.
		locker := redislock.New(rdb, redislock.WithTTL(5*time.Second),
			redislock.WithBackoff(time.Millisecond, 16*time.Millisecond))
		bare := order
		order = func(ctx context.Context) (sold bool, err error) {
			err = locker.WithLock(ctx, lockKey, func(ctx context.Context) error {
				sold, err = bare(ctx)
				return err
			})
			return sold, err
		}
	}

	start := time.Now()
	errs := make([]error, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			for range cfg.Orders {
				sold, err := order(ctx)
				if err != nil || !sold {
					errs[w] = err
					return // failed, or sold out: this buyer goes home
				}
			}
		})
	}
	wg.Wait()
	res := result{Elapsed: time.Since(start)}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}

	var err error
	if res.Sold, err = rdb.Get(ctx, soldKey).Int(); err != nil {
		return res, err
	}
	res.Final, err = rdb.Get(ctx, stockKey).Int()
	return res, err
}
