package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func newRedis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return mr, rdb
}

func testConfig(locked bool) config {
	return config{Workers: 8, Stock: 40, Orders: 10, Work: 500 * time.Microsecond, Locked: locked, Prefix: "test:"}
}

func TestLockedSellsExactlyTheStock(t *testing.T) {
	mr, rdb := newRedis(t)
	for i := range 3 {
		cfg := testConfig(true)
		res, err := runSale(t.Context(), rdb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sold != cfg.Stock || res.Final != 0 {
			t.Fatalf("run %d: sold %d of %d, final stock %d; want all sold and stock 0", i, res.Sold, cfg.Stock, res.Final)
		}
		if keys := lockKeys(mr); len(keys) != 0 {
			t.Fatalf("keys left behind: %v", keys)
		}
	}
}

func TestUnlockedOversells(t *testing.T) {
	mr, rdb := newRedis(t)
	// An unlocked sale always sells at least the stock: the stock reaches 0
	// only through a chain of Stock sales (each SET writes one less than the
	// value its order read), and while it never does, every order goes
	// through and the demand exceeds the stock. Selling more than the stock
	// takes two buyers to read the same value, which 8 buyers that each sleep
	// 500µs between GET and SET all but always do; still, allow retries.
	for attempt := range 5 {
		cfg := testConfig(false)
		res, err := runSale(t.Context(), rdb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if keys := lockKeys(mr); len(keys) != 0 {
			t.Fatalf("keys left behind: %v", keys)
		}
		if res.Sold < cfg.Stock {
			t.Fatalf("sold %d of %d: an unlocked sale sells at least the stock", res.Sold, cfg.Stock)
		}
		if res.Sold > cfg.Stock {
			t.Logf("attempt %d: sold %d of %d, final stock %d", attempt, res.Sold, cfg.Stock, res.Final)
			return
		}
	}
	t.Fatal("5 unlocked sales never oversold")
}

func TestSaleEmbedded(t *testing.T) {
	cfg := config{Workers: 4, Stock: 20, Orders: 10, Work: 200 * time.Microsecond}
	if err := sale(t.Context(), "", cfg); err != nil {
		t.Fatal(err)
	}
}

func TestSaleRejectsDemandBelowStock(t *testing.T) {
	cfg := config{Workers: 2, Stock: 10, Orders: 5}
	if err := sale(context.Background(), "redis://127.0.0.1:1", cfg); err == nil {
		t.Fatal("sale with demand == stock: no error")
	}
}

// lockKeys returns the keys in mr but the release marks that Release leaves
// for a few seconds (see redislock's README), which must expire.
func lockKeys(mr *miniredis.Miniredis) []string {
	var keys []string
	for _, k := range mr.Keys() {
		if strings.Contains(k, "}:redislock:released:") && mr.TTL(k) > 0 {
			continue
		}
		keys = append(keys, k)
	}
	return keys
}
