package otelredislock_test

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
)

// startRedis starts a redis-server for t on a free loopback port, with no
// persistence, and returns its address. The server is killed, and its
// process reaped, in t.Cleanup. Without redis-server in PATH the test is
// skipped, or fails when $CI is "true".
//
// (The root module's internal/redistest cannot be imported from this
// module.)
func startRedis(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found in PATH (%v): apt-get install redis-server", err)
		}
		t.Skip("redis-server not found in PATH: apt-get install redis-server to run this test")
	}
	var lastErr error
	for range 5 { // the free port may be taken before redis-server binds it
		addr, err := launchRedis(t, bin)
		if err == nil {
			return addr
		}
		lastErr = err
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return ""
}

// launchRedis starts one redis-server on a port that was free, and waits
// until it answers PING.
func launchRedis(t testing.TB, bin string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case err := <-exited:
			exited <- err // for stop, should it be called
			return "", errors.Join(errors.New("redis-server exited (port taken?)"), err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			t.Cleanup(stop)
			return addr, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// client returns a go-redis client of addr, closed in t.Cleanup.
func client(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
