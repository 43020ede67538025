package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartDoClient(t *testing.T) {
	t.Parallel()
	s := Start(t)

	if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
	if got := s.Do(t, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET = %v, want OK", got)
	}
	if got := s.Do(t, "GET", "missing"); got != nil {
		t.Fatalf("GET missing = %v, want nil", got)
	}
	// The defaults are in effect...
	if got := fmt.Sprint(s.Do(t, "CONFIG", "GET", "appendonly")); !strings.Contains(got, "no") {
		t.Fatalf("appendonly = %s, want no", got)
	}

	var applied bool
	c := s.Client(t, func(o *redis.Options) { applied = true; o.DB = 3 })
	if !applied {
		t.Fatal("Client did not apply option")
	}
	ctx := context.Background()
	if err := c.Set(ctx, "k", "db3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k on db0 = %v, want v (client should be on db 3)", got)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "db3" {
		t.Fatalf("GET k on db3 = %q, %v", got, err)
	}
}

func TestFreezeThaw(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	s.Freeze(t)
	start := time.Now()
	err := c.Ping(ctx).Err()
	if err == nil {
		t.Fatal("PING on frozen server succeeded")
	}
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING on frozen server: %v, want timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timeout took %v", d)
	}

	s.Thaw(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after thaw: %v", err)
	}
}

func TestKillRestartSamePortWithAOF(t *testing.T) {
	t.Parallel()
	s := Start(t, "--appendonly", "yes", "--appendfsync", "always")
	port := s.Port()
	if got := fmt.Sprint(s.Do(t, "CONFIG", "GET", "appendonly")); !strings.Contains(got, "yes") {
		t.Fatalf("extra args did not override defaults: appendonly = %s", got)
	}
	s.Do(t, "SET", "durable", "1")

	s.Kill(t)
	s.Kill(t) // idempotent
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}

	s.Restart(t)
	if s.Port() != port {
		t.Fatalf("port changed across restart: %d -> %d", port, s.Port())
	}
	if got := s.Do(t, "GET", "durable"); got != "1" {
		t.Fatalf("GET after restart = %v, want 1 (AOF in same dir)", got)
	}

	// Restart of a running server kills it first.
	s.Restart(t)
	if got := s.Do(t, "GET", "durable"); got != "1" {
		t.Fatalf("GET after second restart = %v, want 1", got)
	}
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Kill(t)

	// Someone else holds the port for a while; Restart must keep trying.
	ln, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("occupy port: %v", err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(700 * time.Millisecond)
		ln.Close()
	}()
	start := time.Now()
	s.Restart(t)
	<-released
	if time.Since(start) < 700*time.Millisecond {
		t.Fatalf("Restart returned after %v while the port was still busy", time.Since(start))
	}
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING = %v", got)
	}
}

func TestCleanupReapsProcessAndGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	var pids []int
	t.Run("inner", func(t *testing.T) {
		s := Start(t)
		pids = append(pids, s.proc.cmd.Process.Pid)
		s.Do(t, "PING")
		s.Kill(t)
		s.Restart(t)
		pids = append(pids, s.proc.cmd.Process.Pid)
		s.Freeze(t) // cleanup must cope with a stopped process
	})
	for _, pid := range pids {
		// A zombie would still accept signal 0; a reaped process is gone.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after cleanup (kill 0: %v)", pid, err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before, %d after cleanup\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestParallelServersAreIndependent(t *testing.T) {
	t.Parallel()
	for i := range 4 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			s := Start(t)
			s.Do(t, "SET", "who", i)
			if got := s.Do(t, "GET", "who"); got != strconv.Itoa(i) {
				t.Fatalf("GET who = %v, want %d", got, i)
			}
			if got := s.Do(t, "DBSIZE"); got != int64(1) {
				t.Fatalf("DBSIZE = %v, want 1", got)
			}
		})
	}
}

// recTB intercepts Fatalf/Skipf so the missing-binary paths can be checked.
type recTB struct {
	testing.TB
	kind, msg string
}

func (r *recTB) Fatalf(format string, args ...any) {
	r.kind, r.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recTB) Skipf(format string, args ...any) {
	r.kind, r.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runStart(t *testing.T) *recTB {
	r := &recTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(r)
	}()
	<-done
	return r
}

func TestMissingBinary(t *testing.T) {
	t.Setenv(EnvBin, "")
	t.Setenv("PATH", t.TempDir())

	t.Setenv("CI", "")
	if r := runStart(t); r.kind != "skip" || !strings.Contains(r.msg, "apt-get install -y redis-server") {
		t.Errorf("without CI: got %s %q, want skip with install hint", r.kind, r.msg)
	}
	t.Setenv("CI", "true")
	if r := runStart(t); r.kind != "fatal" || !strings.Contains(r.msg, "apt-get install -y redis-server") {
		t.Errorf("with CI=true: got %s %q, want fatal with install hint", r.kind, r.msg)
	}
	if _, err := Launch(); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Launch: %v, want ErrNotInstalled", err)
	}
	t.Setenv("CI", "")
	t.Setenv(EnvBin, "/nonexistent/redis-server")
	if r := runStart(t); r.kind != "fatal" || !strings.Contains(r.msg, EnvBin) {
		t.Errorf("with bad %s: got %s %q, want fatal", EnvBin, r.kind, r.msg)
	}
	if _, err := Launch(); err == nil || errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), EnvBin) {
		t.Errorf("Launch with bad %s: %v, want an error naming it", EnvBin, err)
	}
}

// A server from Launch (no testing.TB) runs until Close, which kills and
// reaps it and removes its directory.
func TestLaunchClose(t *testing.T) {
	t.Parallel()
	s, err := Launch("--maxmemory-policy", "noeviction")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Do(t, "CONFIG", "GET", "maxmemory-policy")); !strings.Contains(got, "noeviction") {
		t.Errorf("args not applied: maxmemory-policy = %s", got)
	}
	pid := s.proc.cmd.Process.Pid
	s.Close()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Close (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left after Close (stat: %v)", s.Dir(), err)
	}
	s.Close() // idempotent
}

func TestBadArgsReportsLog(t *testing.T) {
	t.Parallel()
	r := &recTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(r, "--no-such-option", "1")
	}()
	<-done
	if r.kind != "fatal" || !strings.Contains(r.msg, "no-such-option") {
		t.Fatalf("got %s %q, want fatal including redis-server output", r.kind, r.msg)
	}
}
