package main

import (
	"context"
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

// testConfig has more demand than stock for every item (apple: 6 of the 8
// buyers, 4 carts each, for 10 units), so that carts are refused too.
func testConfig(sets bool) config {
	return config{Buyers: 8, Stock: 10, Carts: 4, Work: 200 * time.Microsecond, Wait: 50 * time.Millisecond, Sets: sets, Prefix: "test:"}
}

// One set per cart: every buyer finishes every cart with no wait bound (no
// deadlock), every cart is paid or refused, no item sells more than its
// stock, and every sale is in Redis (no update lost).
func TestSetsNeitherDeadlockNorOversell(t *testing.T) {
	mr, rdb := newRedis(t)
	cfg := testConfig(true)
	for i := range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		res, err := runCheckouts(ctx, rdb, cfg)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v (a deadlock ends at the test's deadline)", i, err)
		}
		if err := res.check(cfg.Stock); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if res.Stuck != 0 || res.Paid+res.Refused != cfg.Buyers*cfg.Carts || res.Paid == 0 || res.Refused == 0 {
			t.Fatalf("run %d: %d paid, %d refused, %d stuck; want all %d carts paid or refused, some of each",
				i, res.Paid, res.Refused, res.Stuck, cfg.Buyers*cfg.Carts)
		}
		leftBehind(t, mr)
	}
}

// One key at a time, in each cart's order, the buyers deadlock: waits run
// out. Whatever gets through still holds all its items, so the stock stays
// right.
func TestOneKeyAtATimeDeadlocks(t *testing.T) {
	mr, rdb := newRedis(t)
	cfg := testConfig(false)
	// Two buyers deadlock when each takes its first item before the other
	// takes its second; 8 buyers that start together all but always do.
	for attempt := range 5 {
		res, err := runCheckouts(t.Context(), rdb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.check(cfg.Stock); err != nil {
			t.Fatal(err)
		}
		leftBehind(t, mr)
		if res.Stuck > 0 {
			t.Logf("attempt %d: %d paid, %d refused, %d stuck", attempt, res.Paid, res.Refused, res.Stuck)
			return
		}
	}
	t.Fatal("5 runs with one key at a time never deadlocked")
}

func TestCheckoutsEmbedded(t *testing.T) {
	cfg := config{Buyers: 4, Stock: 5, Carts: 3, Work: 100 * time.Microsecond, Wait: 50 * time.Millisecond}
	if err := checkouts(t.Context(), "", cfg); err != nil {
		t.Fatal(err)
	}
}

func TestCheckoutsRejectsBadConfig(t *testing.T) {
	cfg := config{Buyers: 2, Stock: 10, Carts: 5} // no wait
	if err := checkouts(context.Background(), "redis://127.0.0.1:1", cfg); err == nil {
		t.Fatal("checkouts with wait 0: no error")
	}
}

// leftBehind fails t if a run left a key in mr that does not expire: its
// stock keys, or a lock's.
func leftBehind(t *testing.T, mr *miniredis.Miniredis) {
	t.Helper()
	for _, k := range mr.Keys() {
		if mr.TTL(k) <= 0 {
			t.Fatalf("key left behind: %s", k)
		}
	}
}
