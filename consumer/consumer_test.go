// Package consumer_test uses the library as an adopter's module does: it
// requires it (with go-redis at the library's floor in go.mod, at the
// latest in go.latest.mod), calls its public API only, and starts its own
// redis-server. Without one the tests skip; with CI=true they fail.
package consumer_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/seed5e0b76d9/redislock"
)

// startRedis starts a redis-server on a free loopback port for t and
// returns its address.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + port
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for deadline := time.Now().Add(5 * time.Second); rdb.Ping(context.Background()).Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer", addr)
		}
	}
	return addr
}

// newLocker is one process's Locker: a client of its own, shut down and
// closed after t.
func newLocker(t *testing.T, addr string, opts ...redislock.Option) *redislock.Locker {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	l := redislock.New(rdb, opts...)
	t.Cleanup(func() {
		if err := l.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		rdb.Close()
	})
	return l
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustBeFree fails t unless nobody holds key.
func mustBeFree(t *testing.T, ctx context.Context, l *redislock.Locker, key string) {
	t.Helper()
	if info, err := l.Inspect(ctx, key); err != nil || info.Mode != redislock.ModeFree {
		t.Fatalf("Inspect(%q) = %+v, %v; want it free", key, info, err)
	}
}

func TestObtainAndRelease(t *testing.T) {
	addr, ctx := startRedis(t), testContext(t)
	a, b := newLocker(t, addr), newLocker(t, addr)
	lk, err := a.Obtain(ctx, "order:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryObtain(ctx, "order:42", time.Minute); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("TryObtain while held: %v, want ErrNotObtained", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeFree(t, ctx, b, "order:42")
}

func TestWithLock(t *testing.T) {
	addr, ctx := startRedis(t), testContext(t)
	a, b := newLocker(t, addr), newLocker(t, addr)
	ran := false
	err := a.WithLock(ctx, "token-refresh", func(ctx context.Context) error {
		ran = true
		_, err := b.TryObtain(ctx, "token-refresh", time.Minute)
		if !errors.Is(err, redislock.ErrNotObtained) {
			t.Errorf("TryObtain inside WithLock: %v, want ErrNotObtained", err)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("WithLock: %v, ran %v", err, ran)
	}
	mustBeFree(t, ctx, b, "token-refresh")
}

func TestObtainMulti(t *testing.T) {
	addr, ctx := startRedis(t), testContext(t)
	a, b := newLocker(t, addr), newLocker(t, addr)
	set, err := a.ObtainMulti(ctx, []string{"sku:1", "sku:2"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryObtain(ctx, "sku:2", time.Minute); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("TryObtain of a key of the set: %v, want ErrNotObtained", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeFree(t, ctx, b, "sku:1")
	mustBeFree(t, ctx, b, "sku:2")
}

// A call's WithHolder describes its lock in place of the Locker's.
func TestWithHolderPerCall(t *testing.T) {
	addr, ctx := startRedis(t), testContext(t)
	l := newLocker(t, addr, redislock.WithHolder("web-3"))
	lk, err := l.Obtain(ctx, "report", time.Minute, redislock.WithHolder("job 8841"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Inspect(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].Description != "job 8841" || info.Holders[0].Token != lk.Token() {
		t.Fatalf("Inspect: %+v, want one holder %q described as %q", info, lk.Token(), "job 8841")
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A second process takes over a lock by its key and token; its Release
// hands the key to a waiter.
func TestResume(t *testing.T) {
	addr, ctx := startRedis(t), testContext(t)
	first, second, third := newLocker(t, addr), newLocker(t, addr), newLocker(t, addr)
	started, err := first.Obtain(ctx, "job:7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := second.Resume(ctx, []string{"job:7"}, started.Token(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if lk.Token() != started.Token() || lk.Key() != "job:7" {
		t.Fatalf("resumed %q with token %q, want job:7 with %q", lk.Key(), lk.Token(), started.Token())
	}
	waiter := make(chan error, 1)
	go func() {
		lk, err := third.Obtain(ctx, "job:7", time.Minute)
		if err == nil {
			err = lk.Release(ctx)
		}
		waiter <- err
	}()
	for info, err := third.Inspect(ctx, "job:7"); info.Waiting == 0; info, err = third.Inspect(ctx, "job:7") {
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}
