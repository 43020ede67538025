// Package redistest starts real redis-server processes for tests.
//
// The server is Redis or Valkey, whichever $REDIS_SERVER_BIN names (a
// valkey-server, or one of the wrappers .ci/servers writes, which run a
// newer Debian release's Redis or Valkey on this machine): every helper,
// Sentinel and Cluster included, works with Redis 7.0 and later and Valkey
// 8.1 and later (docs/servers.md lists what CI runs on each). A test that
// depends on the server asks [Server.Version].
//
// Each call to [Start] launches an independent redis-server bound to a free
// loopback port with its own data directory (a t.TempDir), so it is safe to
// use from parallel tests. The process is always killed and reaped when the
// test finishes.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvBin is the environment variable that, when set, names the redis-server
// binary to use instead of looking up "redis-server" in PATH: a
// valkey-server, say, or a wrapper that execs one (it must exec, so that the
// server keeps the pid that [Server.Freeze] and [Server.Kill] signal and
// that startup checks against INFO's process_id).
const EnvBin = "REDIS_SERVER_BIN"

const (
	installHint    = "install it with `apt-get install -y redis-server` or set " + EnvBin
	readyTimeout   = 5 * time.Second
	restartTimeout = 5 * time.Second
	startAttempts  = 5
	logName        = "redis.log"
	stdioName      = "redis-stdio.log"
)

// Server is a redis-server process started by [Start]. Its methods may be
// called from multiple goroutines.
type Server struct {
	bin  string
	dir  string
	port int
	args []string // extra user args, appended after the defaults

	conf     string                  // config file passed as argv[1], if any
	portArgs func(port int) []string // args derived from the port, if any

	temp bool // dir was made by Launch: Close removes it

	mu   sync.Mutex
	proc *process // nil when not running
}

var errNotRunning = errors.New("redis-server is not running")

// process is one running redis-server and the goroutine that reaps it.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // result of cmd.Wait, valid after done is closed
}

// Start launches a redis-server on a free 127.0.0.1 port and waits until it
// answers PING. The server runs with
//
//	--port N --bind 127.0.0.1 --save "" --appendonly no --dir <t.TempDir()> --logfile <dir>/redis.log
//
// followed by args, so args can override any of these defaults (for example
// "--appendonly", "yes", "--appendfsync", "always").
//
// The binary is taken from $REDIS_SERVER_BIN if set, otherwise from PATH. If
// it cannot be found the test is skipped, or fails when $CI is "true".
// The process is killed and reaped in t.Cleanup.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s := newServer(t, args)
	s.start(t)
	return s
}

// newServer prepares a Server (binary, data directory, cleanup) without
// starting it, so callers can set conf or portArgs first.
func newServer(t testing.TB, args []string) *Server {
	t.Helper()
	s := &Server{
		bin:  findBinary(t),
		dir:  t.TempDir(), // registered before our cleanup, so removed after the kill
		args: append([]string(nil), args...),
	}
	t.Cleanup(s.stop)
	return s
}

// start launches s on a free port, retrying when the port is taken.
func (s *Server) start(t testing.TB) {
	t.Helper()
	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: pick free port: %v", err)
		}
		p, retry, err := s.launch(port)
		if err == nil {
			s.mu.Lock()
			s.port, s.proc = port, p
			s.mu.Unlock()
			return
		}
		lastErr = err
		if !retry {
			break
		}
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
}

func findBinary(t testing.TB) string {
	t.Helper()
	p, err := lookBinary()
	switch {
	case errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("redistest: %v", err)
	case err != nil:
		t.Fatalf("redistest: %v", err)
	}
	return p
}

// ErrNotInstalled is the error of [Launch] when redis-server is not in PATH
// (and $REDIS_SERVER_BIN is not set): where [Start] skips the test, unless
// $CI is "true".
var ErrNotInstalled = errors.New("redis-server not found in PATH; " + installHint)

// lookBinary returns the redis-server binary: $REDIS_SERVER_BIN, else the
// one in PATH.
func lookBinary() (string, error) {
	if env := os.Getenv(EnvBin); env != "" {
		p, err := exec.LookPath(env)
		if err != nil {
			return "", fmt.Errorf("%s=%q is not usable: %w", EnvBin, env, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNotInstalled
	}
	return p, nil
}

// Launch starts a redis-server as [Start] does, for a caller that has no
// testing.TB (a TestMain, say, for the package's examples): it returns an
// error instead of failing a test (wrapping [ErrNotInstalled] when there is
// no redis-server), and the caller must stop it with [Server.Close]. The
// methods that take a testing.TB work on it as on a server from Start.
func Launch(args ...string) (*Server, error) {
	bin, err := lookBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, args: append([]string(nil), args...), temp: true}
	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			lastErr = err
			break
		}
		p, retry, err := s.launch(port)
		if err == nil {
			s.port, s.proc = port, p
			return s, nil
		}
		lastErr = err
		if !retry {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-server: %w", lastErr)
}

// Close kills a server from [Launch] and removes its data directory. A
// server from [Start] is closed with its test; Close only kills it.
func (s *Server) Close() {
	s.stop()
	if s.temp {
		_ = os.RemoveAll(s.dir)
	}
}

// freePort asks the kernel for a free loopback port. The port is released
// before returning, so another process may grab it; callers retry on that.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

// Addr returns the server address, "127.0.0.1:<port>".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the TCP port the server listens on. It does not change across
// [Server.Restart].
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's working directory (its --dir), which holds the log
// file and any persistence files.
func (s *Server) Dir() string { return s.dir }

// Client returns a new go-redis client connected to Addr. Each opt is applied
// to the options before the client is created. The client is closed in
// t.Cleanup.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do runs one command on a fresh, short-lived client and returns its reply.
// A redis.Nil reply is returned as nil; any other error fails the test.
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("redistest: %v: %v", args, err)
	}
	return v
}

// Freeze stops the server process with SIGSTOP: it keeps its port and
// connections but answers nothing until [Server.Thaw]. A thaw is registered
// in t.Cleanup so a frozen server never outlives the test.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	t.Cleanup(func() { _ = s.thaw() })
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: freeze: %v", err)
	}
}

// Thaw resumes a server stopped by [Server.Freeze] (SIGCONT). Thawing a
// server that is running normally, or not running at all, is a no-op.
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	if err := s.thaw(); err != nil {
		t.Fatalf("redistest: thaw: %v", err)
	}
}

func (s *Server) thaw() error {
	err := s.signal(syscall.SIGCONT)
	if errors.Is(err, errNotRunning) {
		return nil
	}
	return err
}

func (s *Server) signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errNotRunning
	}
	err := s.proc.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil // died on its own; the reaper has it
	}
	return err
}

// Kill terminates the server with SIGKILL and waits for it to exit, simulating
// a crash. It is a no-op if the server is not running. Use [Server.Restart] to
// bring it back on the same port.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop()
}

// stop kills and reaps the current process, if any.
func (s *Server) stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // in case it is frozen
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Restart starts the server again on the same port, with the same arguments
// and data directory, and waits until it answers PING. If the server is still
// running it is killed first (like a crash followed by a restart). If the port
// is briefly in use, starting is retried for about five seconds.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	port := s.Port()
	deadline := time.Now().Add(restartTimeout)
	for {
		p, retry, err := s.launch(port)
		if err == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return
		}
		if !retry || time.Now().After(deadline) {
			t.Fatalf("redistest: restart redis-server on port %d: %v", port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// launch starts redis-server on port and waits for it to become ready. On
// failure the process has been reaped; retry reports whether the failure
// looks like the port being taken.
func (s *Server) launch(port int) (_ *process, retry bool, _ error) {
	logPath := filepath.Join(s.dir, logName)
	stdioPath := filepath.Join(s.dir, stdioName)
	logOff, stdioOff := fileSize(logPath), fileSize(stdioPath)

	// Passing an *os.File as stdout/stderr avoids copying goroutines; the
	// child gets its own descriptor, so ours can be closed right after Start.
	stdio, err := os.OpenFile(stdioPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false, err
	}
	defer stdio.Close()

	cmd := exec.Command(s.bin, s.argv(port, logPath)...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = stdio, stdio
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err = waitReady(addr, cmd.Process.Pid, p.done)
	if err == nil {
		return p, false, nil
	}
	p.kill()
	logs := readFrom(logPath, logOff) + readFrom(stdioPath, stdioOff)
	retry = strings.Contains(logs, "in use")
	return nil, retry, fmt.Errorf("%w\n--- redis-server output ---\n%s", err, logs)
}

// argv returns the command line for port: the config file (if any), the
// defaults, the port-derived args and the user args, in that order.
func (s *Server) argv(port int, logPath string) []string {
	var argv []string
	if s.conf != "" {
		argv = append(argv, s.conf) // redis-server only reads a config file from argv[1]
	}
	argv = append(argv,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", logPath,
	)
	if s.portArgs != nil {
		argv = append(argv, s.portArgs(port)...)
	}
	return append(argv, s.args...)
}

// waitReady polls addr until it answers PING and INFO reports pid as its
// process id (so a foreign server that grabbed the port is not mistaken for
// ours).
func waitReady(addr string, pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited during startup")
		default:
		}
		ok, err := probe(addr, pid)
		if ok {
			return nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not ready after %v: %v", readyTimeout, lastErr)
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probe sends PING and INFO server on a raw connection.
func probe(addr string, pid int) (bool, error) {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return false, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return false, err
	}
	if line != "+PONG\r\n" {
		return false, fmt.Errorf("PING replied %q", strings.TrimSpace(line))
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return false, err
	}
	if !strings.HasPrefix(line, "$") {
		return false, fmt.Errorf("INFO replied %q", strings.TrimSpace(line))
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return false, fmt.Errorf("INFO replied %q", strings.TrimSpace(line))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return false, err
	}
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	if !strings.Contains(string(body), want) {
		return false, errors.New("port answered by a different redis-server")
	}
	return true, nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
