//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// The tests run the built binary as real processes against a real
// redis-server that TestMain starts on a free loopback port.
var (
	binary    string // the redislock binary built by TestMain
	redisAddr string // "127.0.0.1:port" of the redis-server, "" when there is none
)

// TestMain builds redislock (with -race when the tests run with it),
// starts a redis-server, runs the tests (see defaultSignals), and fails the
// run if a goroutine outlives them.
// With $REDISLOCK_TEST_HELPER set, the test binary is a COMMAND instead
// (see helper).
func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h, os.Args[1:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "redislock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "redislock")
	build := exec.Command("go", "build", "-o", binary, ".")
	if raceEnabled {
		build.Args = append(build.Args[:2], append([]string{"-race"}, build.Args[2:]...)...)
	}
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build redislock:", err)
		return 1
	}
	stop, err := startRedis()
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "redis-server:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "redis-server:", err, "(tests that need it are skipped; install redis-server)")
	}
	defaultSignals()
	code := m.Run()
	stop()
	if code == 0 {
		if leaked := redistest.LeakedGoroutines(); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	return code
}

// defaultSignals makes the processes the tests start begin with SIGHUP and
// SIGINT at their default action, however the tests were started. Started
// with them ignored (nohup; "cmd &" in a script; go test un-ignores SIGINT,
// a test binary run directly does not), the tests would pass that on to
// redislock, which keeps them ignored as the README says, and the tests
// that send them would wait in vain. A signal ignored stays ignored across
// exec, one handled goes back to its default action, and signal.Notify for
// a signal the process was started with ignored un-ignores it: so the test
// process handles those it ignores, by dropping them, and they still do
// nothing to it. SIGQUIT and SIGTERM need nothing: Go's runtime handles
// them whatever it inherited. TestRun_IgnoredSignalsStayIgnored ignores
// them itself, in a wrapper.
func defaultSignals() {
	dropped := make(chan os.Signal, 1) // never read: Notify does not block
	for _, s := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(s) {
			signal.Notify(dropped, s)
		}
	}
}

// startRedis starts a redis-server on a free loopback port, without
// persistence (see redistest.Launch). stop kills it.
func startRedis() (stop func(), err error) {
	srv, err := redistest.Launch()
	if err != nil {
		return func() {}, err
	}
	redisAddr = srv.Addr()
	return srv.Close, nil
}

// needRedis skips t when there is no redis-server (TestMain fails the run
// instead when CI=true).
func needRedis(t *testing.T) {
	t.Helper()
	if redisAddr == "" {
		t.Skip("no redis-server")
	}
}

// testRedisURL is the URL of the test's Redis, database db.
func testRedisURL(db int) string { return fmt.Sprintf("redis://%s/%d", redisAddr, db) }

// client returns a client of the test's Redis (database 0), closed at the
// end of t.
func client(t *testing.T) *redis.Client {
	t.Helper()
	needRedis(t)
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testKey returns a key of its own for t.
func testKey(t *testing.T) string { return "redislock-cmd-test:" + t.Name() }

// A proc is a redislock process started by start.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	exited  chan struct{}
	started time.Time
	ended   time.Time
	stdout  string // the files its output goes to
	stderr  string
}

// start starts redislock with args and REDIS_URL set to the test's Redis
// (database 0), in a session of its own (no controlling terminal, so never
// an interactive foreground job), with SIGHUP and SIGINT at their default
// action (see defaultSignals). Its output goes to files, so that
// processes it leaves running cannot hold up the test. It is killed at the
// end of t if still running.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startEnv(t, []string{"REDIS_URL=" + testRedisURL(0)}, args...)
}

func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startVia(t, env, nil, args...)
}

// startVia starts redislock as startEnv does, through the command via
// (nil: none): "sh -c 'trap ...; exec \"$0\" \"$@\"'", to start it with
// signals ignored.
func startVia(t *testing.T, env, via []string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{t: t, exited: make(chan struct{}), stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr")}
	out, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	argv := append(append(via[:len(via):len(via)], binary), args...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	// The race detector sleeps a second before a process exits by default.
	p.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.ended = time.Now()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// wait waits up to limit for p to exit and returns its exit status (128+N
// for a signal).
func (p *proc) wait(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		p.t.Fatalf("redislock %q still running after %v; stderr:\n%s", p.cmd.Args[1:], limit, p.errors())
	}
	return exitStatus(p.cmd.ProcessState)
}

// running reports whether p has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) output() string { return readFile(p.t, p.stdout) }
func (p *proc) errors() string { return readFile(p.t, p.stderr) }

// runCLI runs redislock with args to its end (at most 10 s) and returns its
// exit status, stdout and stderr.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, args...)
	code = p.wait(10 * time.Second)
	return code, p.output(), p.errors()
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// lines returns the lines of file name.
func lines(t *testing.T, name string) []string {
	t.Helper()
	var ls []string
	s := bufio.NewScanner(strings.NewReader(readFile(t, name)))
	for s.Scan() {
		ls = append(ls, s.Text())
	}
	return ls
}

// hasLine fails t, going on, when file name has no line that is line.
func hasLine(t *testing.T, name, line string, what ...any) {
	t.Helper()
	if ls := lines(t, name); !slices.Contains(ls, line) {
		t.Errorf("%sno line %q in %q", label(what), line, ls)
	}
}

// waitFor polls cond every 10 ms for up to limit, and fails t with what if
// it does not hold by then.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// waitLine waits up to limit for file name to have a line that starts with
// prefix, and returns when it saw it.
func waitLine(t *testing.T, name, prefix string, limit time.Duration) time.Time {
	t.Helper()
	waitFor(t, limit, fmt.Sprintf("a line %q in %s", prefix, filepath.Base(name)), func() bool {
		for _, l := range lines(t, name) {
			if strings.HasPrefix(l, prefix) {
				return true
			}
		}
		return false
	})
	return time.Now()
}

// exists reports whether key exists in the test's Redis.
func exists(t *testing.T, c *redis.Client, key string) bool {
	t.Helper()
	n, err := c.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}
