package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server process owned by the harness.
type server struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan struct{} // closed when the process has been reaped
}

// startServer starts redis-server (found in PATH) on a free loopback port,
// without persistence, and waits until it answers PING. The process is
// killed if the harness dies (see setDeathSignal); stop it with stop.
func startServer(ctx context.Context) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found in PATH (install it, or pass -redis URL): %w", err)
	}
	var lastErr error
	for range 5 { // the free port may be taken before redis-server binds it
		s, err := launch(ctx, bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// launch starts redis-server from bin on a free port and waits until it
// answers.
func launch(ctx context.Context, bin string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redislock-bench-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	setDeathSignal(s.cmd)
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			s.stop()
			return nil, fmt.Errorf("redis-server exited at start: %s", lastLines(string(log), 3))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING: %w", s.addr, err)
		}
	}
}

// url is the server's redis:// URL.
func (s *server) url() string { return "redis://" + s.addr }

// stop terminates the server (SIGTERM, then SIGKILL after 2s), reaps it and
// removes its directory.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(s.dir)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastLines returns the last n lines of s, joined by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// newClient returns a client of the Redis at url.
func newClient(url string) (*redis.Client, error) {
	opt, err := clientOptions(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// clientOptions parses a redis:// URL.
func clientOptions(url string) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", url, err)
	}
	return opt, nil
}

// serverSnap is what a redis-server reports of its own load at one moment.
type serverSnap struct {
	cpu   float64          // used_cpu_sys + used_cpu_user: seconds of CPU, all its threads
	calls map[string]int64 // INFO commandstats calls per command name ("set", "client|setinfo", ...), Lua-internal calls included
}

// snapshot reads INFO cpu and commandstats, in one command.
func snapshot(ctx context.Context, rdb *redis.Client) (serverSnap, error) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return serverSnap{}, err
	}
	s := serverSnap{calls: make(map[string]int64)}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return serverSnap{}, fmt.Errorf("INFO cpu line %q: %w", line, err)
			}
			s.cpu += v
		case strings.HasPrefix(name, "cmdstat_"):
			n, err := callsField(rest)
			if err != nil {
				return serverSnap{}, fmt.Errorf("commandstats line %q: %w", line, err)
			}
			s.calls[strings.TrimPrefix(name, "cmdstat_")] = n
		}
	}
	return s, nil
}

// connectedClients returns the number of clients connected to the server,
// the caller included.
func connectedClients(ctx context.Context, rdb *redis.Client) (int, error) {
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO clients: no connected_clients")
}

// callsField returns the calls=N field of a commandstats line's value.
func callsField(fields string) (int64, error) {
	for _, field := range strings.Split(fields, ",") {
		if v, ok := strings.CutPrefix(field, "calls="); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no calls field")
}

// bookkeeping reports whether a command is the harness's or a connection's
// set-up rather than a lock implementation's: these are left out of the
// command counts.
func bookkeeping(cmd string) bool {
	switch base, _, _ := strings.Cut(cmd, "|"); base {
	case "info", "dbsize", "hello", "client", "ping", "auth", "select", "config", "flushall":
		return true
	}
	return false
}

// statsDelta returns after-before per command, without bookkeeping commands.
func statsDelta(before, after map[string]int64) map[string]int64 {
	d := make(map[string]int64)
	for cmd, n := range after {
		if bookkeeping(cmd) {
			continue
		}
		if n -= before[cmd]; n != 0 {
			d[cmd] = n
		}
	}
	return d
}

// sentCounter is a go-redis hook that counts the commands a client sends
// (a pipeline counts each of its commands; go-redis's own retries of one
// command count once) and its writes: one per command sent alone, one per
// pipeline (an AutoPipeliner's batch runs the pipeline hook once). go-redis
// writes the commands of a PubSub (SUBSCRIBE, UNSUBSCRIBE, ...) without
// running the hooks: see subscriptionCmds.
type sentCounter struct{ n, writes atomic.Int64 }

// counts returns the commands and writes counted so far.
func (c *sentCounter) counts() (cmds, writes int64) { return c.n.Load(), c.writes.Load() }

// DialHook leaves dialing alone.
func (c *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command, written alone.
func (c *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		c.writes.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts each command of a pipeline, and the pipeline
// as one write.
func (c *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		c.writes.Add(1)
		return next(ctx, cmds)
	}
}

// subscriptionCmds counts, in a commandstats delta, the commands go-redis
// sends on PubSub connections without running its hooks, so that sentCounter
// misses them: the subscribe and unsubscribe commands.
func subscriptionCmds(delta map[string]int64) int64 {
	var n int64
	for _, cmd := range []string{"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe"} {
		n += delta[cmd]
	}
	return n
}

// isTimeout reports whether a lock attempt ended because its bound passed.
func isTimeout(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded)
}
