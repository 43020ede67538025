package tests

import (
	"context"
	"encoding"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// backend is a Redis the tests run against: an embedded miniredis (fast,
// always there) or a real redis-server started by the test.
type backend struct {
	name string
	addr string
	mr   *miniredis.Miniredis // nil for a real server
	srv  *redistest.Server    // nil for miniredis
}

// eachBackend runs f once on miniredis and once on a real redis-server. The
// real one is skipped when redis-server is not installed, except with CI=true
// where that fails the test.
func eachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		f(t, miniBackend(t))
	})
	t.Run("redis", func(t *testing.T) {
		f(t, realBackend(t))
	})
}

// realBackend starts a real redis-server for t.
func realBackend(t testing.TB, args ...string) *backend {
	srv := redistest.Start(t, args...)
	return &backend{name: "redis", addr: srv.Addr(), srv: srv}
}

// client returns a new go-redis client of b with a command counter.
func (b *backend) client(t testing.TB, opts ...func(*redis.Options)) (*redis.Client, *counter) {
	t.Helper()
	o := &redis.Options{Addr: b.addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	n := &counter{}
	c.AddHook(n)
	return c, n
}

// elapse lets d pass for the keys in b: miniredis only expires keys when told
// that time has passed.
func (b *backend) elapse(d time.Duration) {
	time.Sleep(d)
	if b.mr != nil {
		b.mr.FastForward(d)
	}
}

// counter is a go-redis hook counting the commands a client sends.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Load returns the number of commands sent so far.
func (c *counter) Load() int64 { return c.n.Load() }

// ctxT returns a context that ends with the test or after d.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// miniBackend starts an embedded miniredis for t.
func miniBackend(t testing.TB) *backend {
	mr := miniredis.RunT(t)
	return &backend{name: "miniredis", addr: mr.Addr(), mr: mr}
}

// hook is a go-redis hook that calls before ahead of sending each command
// (pipelined or not), pipeline ahead of sending a pipeline, and after once a
// command's reply is in. Any may be nil.
type hook struct {
	before   func(cmd redis.Cmder)
	pipeline func(cmds []redis.Cmder)
	after    func(cmd redis.Cmder, err error)
}

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.before != nil {
			h.before(cmd)
		}
		err := next(ctx, cmd)
		if h.after != nil {
			set := cmd.Err()
			h.after(cmd, err)
			if e := cmd.Err(); e != set {
				err = e // an error after sets is the command's
			}
		}
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.pipeline != nil {
			h.pipeline(cmds)
		}
		for _, c := range cmds {
			if h.before != nil {
				h.before(c)
			}
		}
		err := next(ctx, cmds)
		for _, c := range cmds {
			if h.after != nil {
				h.after(c, c.Err())
			}
		}
		return err
	}
}

// queued returns the tokens in key's line in Redis, first in line first.
func queued(t testing.TB, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	q, err := rdb.LRange(context.Background(), sideKey(key, "line"), 0, -1).Result()
	require.NoError(t, err)
	return q
}

// waitQueued waits until key's line in Redis has n places.
func waitQueued(t testing.TB, rdb redis.UniversalClient, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(queued(t, rdb, key)) == n }, 15*time.Second, time.Millisecond,
		"%d places in line, want %d", len(queued(t, rdb, key)), n)
}

// obtained is the outcome of an Obtain run in the background.
type obtained struct {
	lock *redislock.Lock
	err  error
	at   time.Time
}

// obtainAsync starts Obtain in a goroutine; its outcome arrives on the
// returned channel.
func obtainAsync(ctx context.Context, l *redislock.Locker, key string, ttl time.Duration, opts ...redislock.Option) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		lk, err := l.Obtain(ctx, key, ttl, opts...)
		ch <- obtained{lk, err, time.Now()}
	}()
	return ch
}

// withoutMarks returns keys without the release marks, which a Release
// leaves for a while: they must expire, within twice go-redis's retry
// window (50 s with default options).
func withoutMarks(t testing.TB, rdb redis.UniversalClient, keys []string) []string {
	t.Helper()
	var rest []string
	for _, k := range keys {
		if strings.Contains(k, "}:rl1:spent:") || isSpentFlag(rdb, k) {
			pttl := rdb.PTTL(context.Background(), k).Val()
			require.True(t, pttl > 0 && pttl <= 50*time.Second, "spent mark %q expires in %v", k, pttl)
			continue
		}
		rest = append(rest, k)
	}
	return rest
}

// isSpentFlag reports whether k is a places key that holds nothing but the
// flag of spent marks (see spendLua).
func isSpentFlag(rdb redis.UniversalClient, k string) bool {
	if !strings.Contains(k, "}:rl1:places:") {
		return false
	}
	// The spent flag, and the fences of hand-offs to holders that died
	// (their lease ran out; the field goes with the hash, which the flag
	// keeps as long as the mark: see spend.lua)
	fields, err := rdb.HKeys(context.Background(), k).Result()
	if err != nil || !slices.Contains(fields, "~spent") {
		return false
	}
	for _, f := range fields {
		if f != "~spent" && !strings.HasPrefix(f, "~fence:") {
			return false
		}
	}
	return true
}

// requireOnlyMarks fails t if Redis holds any key but release marks.
func requireOnlyMarks(t testing.TB, rdb redis.UniversalClient) {
	t.Helper()
	require.Empty(t, withoutMarks(t, rdb, rdb.Keys(context.Background(), "*").Val()))
}

// deadConns is a go-redis Dialer whose connections can go silently dead:
// once a connection has been picked by KillNext, everything written to it is
// dropped and its reads block until it is closed, as on a connection whose
// packets are lost while the socket stays open.
type deadConns struct {
	next atomic.Pointer[func([]byte) bool] // the next write it matches kills its connection
	dead atomic.Int64                      // connections killed so far
}

// killNext makes the next connection that writes bytes matching match
// silently dead, before those bytes reach Redis.
func (d *deadConns) killNext(match func([]byte) bool) { d.next.Store(&match) }

// dial is a go-redis Options.Dialer.
func (d *deadConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &deadConn{Conn: c, owner: d, closed: make(chan struct{})}, nil
}

type deadConn struct {
	net.Conn
	owner     *deadConns
	dead      atomic.Bool
	deadline  atomic.Pointer[time.Time] // the read deadline go-redis set
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *deadConn) Write(b []byte) (int, error) {
	if m := c.owner.next.Load(); !c.dead.Load() && m != nil && (*m)(b) && c.owner.next.CompareAndSwap(m, nil) {
		c.dead.Store(true)
		c.owner.dead.Add(1)
	}
	if c.dead.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// Read on a dead connection waits for the read deadline, as a socket whose
// peer went silent does.
func (c *deadConn) Read(b []byte) (int, error) {
	if !c.dead.Load() {
		n, err := c.Conn.Read(b)
		if !c.dead.Load() {
			return n, err
		}
	}
	var timeout <-chan time.Time
	if d := c.deadline.Load(); d != nil && !d.IsZero() {
		t := time.NewTimer(time.Until(*d))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	}
}

func (c *deadConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetReadDeadline(t)
}

func (c *deadConn) SetDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetDeadline(t)
}

func (c *deadConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// lagConns is a go-redis Dialer whose next write matching a predicate is
// delivered to Redis only after a delay, as a TCP segment that is lost and
// retransmitted: go-redis times the read out and closes the connection, but
// the kernel still delivers the buffered bytes before the FIN (close() with
// unsent data in the send buffer goes on sending it).
type lagConns struct {
	next  atomic.Pointer[func([]byte) bool]
	delay time.Duration
	hits  atomic.Int64
	wg    sync.WaitGroup
	ran   chan time.Time // when the delayed bytes were written to Redis
}

func (d *lagConns) lagNext(match func([]byte) bool) { d.next.Store(&match) }

func (d *lagConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lagConn{Conn: c, owner: d}, nil
}

type lagConn struct {
	net.Conn
	owner   *lagConns
	mu      sync.Mutex
	pending bool
	closing bool
}

func (c *lagConn) Write(b []byte) (int, error) {
	if m := c.owner.next.Load(); m != nil && (*m)(b) && c.owner.next.CompareAndSwap(m, nil) {
		buf := append([]byte(nil), b...)
		c.mu.Lock()
		c.pending = true
		c.mu.Unlock()
		c.owner.hits.Add(1)
		c.owner.wg.Add(1)
		go func() {
			defer c.owner.wg.Done()
			time.Sleep(c.owner.delay)
			_ = c.Conn.SetWriteDeadline(time.Time{}) // the bytes were in the kernel's buffer
			_, werr := c.Conn.Write(buf)
			lagLog(werr, buf)
			if c.owner.ran != nil {
				select {
				case c.owner.ran <- time.Now():
				default:
				}
			}
			time.Sleep(20 * time.Millisecond) // let Redis read it before the FIN
			c.mu.Lock()
			c.pending = false
			closing := c.closing
			c.mu.Unlock()
			if closing {
				_ = c.Conn.Close()
			}
		}()
		return len(b), nil
	}
	return c.Conn.Write(b)
}

var lagLog = func(err error, b []byte) {}

func (c *lagConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending {
		c.closing = true
		return nil
	}
	return c.Conn.Close()
}

// lateCopyClient returns a client whose next write that lagNext matches
// reaches Redis only after delay (its first copy); go-redis times the read
// out after 100 ms and sends the command again on another connection.
func lateCopyClient(t *testing.T, b *backend, delay time.Duration) (*redis.Client, *lagConns) {
	t.Helper()
	lc := &lagConns{delay: delay, ran: make(chan time.Time, 1)}
	rdb, _ := b.client(t, func(o *redis.Options) { o.Dialer = lc.dial; o.ReadTimeout = 100 * time.Millisecond })
	loadScripts(t, rdb) // the scripts run by EVALSHA from now on
	t.Cleanup(lc.wg.Wait)
	return rdb, lc
}

// untilWithinExpiry waits until d after at (when a late copy of a command
// reached Redis), then fails t if lk's Until is later than its key's
// expiry in Redis (PTTL -2: the key is gone).
func untilWithinExpiry(t *testing.T, rdb *redis.Client, lk *redislock.Lock, at time.Time, d time.Duration) {
	t.Helper()
	time.Sleep(time.Until(at.Add(d)))
	local, left := leaseGap(t, rdb, lk)
	require.LessOrEqual(t, local, left+5*time.Millisecond, "Until after the key's expiry (PTTL %v)", left)
}

// until - now, and PTTL of key, measured right after. The two reads are
// not one moment: on a kept lock a renewal may land between them.
func leaseGap(t *testing.T, rdb *redis.Client, lk *redislock.Lock) (local, redisLeft time.Duration) {
	t.Helper()
	pttl := rdb.PTTL(context.Background(), lk.Key()).Val()
	local = time.Until(lk.Until())
	return local, pttl
}

// requireUntilAfterDelayedCopy waits until the copy that lc delayed has run
// in Redis, then requires that lk's Until is not later than the key's
// expiry (5 ms for reading the two clocks), and waits for lc's goroutines.
func requireUntilAfterDelayedCopy(t *testing.T, lc *lagConns, checker *redis.Client, lk *redislock.Lock) {
	t.Helper()
	ranAt := <-lc.ran
	time.Sleep(50 * time.Millisecond)
	local, left := leaseGap(t, checker, lk)
	t.Logf("delayed copy ran %v ago; Until-now=%v, PTTL=%v", time.Since(ranAt), local, left)
	require.LessOrEqual(t, local, left+5*time.Millisecond, "Until is later than the key's expiry")
	lc.wg.Wait()
}

// slowConns delays every write by lag, honouring the write deadline (a
// slow link: 30 ms one way).
type slowConns struct{ lag time.Duration }

func (s *slowConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: c, lag: s.lag}, nil
}

type slowConn struct {
	net.Conn
	lag time.Duration
	mu  sync.Mutex
	wd  time.Time
}

func (c *slowConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wd = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *slowConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.wd = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *slowConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	wd := c.wd
	c.mu.Unlock()
	if !wd.IsZero() && time.Until(wd) < c.lag {
		time.Sleep(max(time.Until(wd), 0))
		return 0, os.ErrDeadlineExceeded
	}
	time.Sleep(c.lag)
	return c.Conn.Write(b)
}

// mustClient returns a new go-redis client of b.
func (b *backend) mustClient(t testing.TB) *redis.Client {
	t.Helper()
	c, _ := b.client(t)
	return c
}

// carries reports whether cmd, a command as a go-redis hook sees it, has s
// among its arguments (the library passes a token as a value that go-redis
// marshals: see encoding.BinaryMarshaler).
func carries(cmd redis.Cmder, s string) bool {
	for _, a := range cmd.Args() {
		var v string
		switch a := a.(type) {
		case string:
			v = a
		case []byte:
			v = string(a)
		case encoding.BinaryMarshaler:
			b, err := a.MarshalBinary()
			if err != nil {
				continue
			}
			v = string(b)
		default:
			v = fmt.Sprint(a)
		}
		if v == s {
			return true
		}
	}
	return false
}

// acquireCounter is a go-redis hook that counts, per key, the acquire
// commands a client sends (takeScript and acquireScript, by the lock key,
// their KEYS[1]): an Obtain, TryObtain or WithLock that joins a lock, or
// fails without trying, sends none.
type acquireCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// of returns how many acquire commands were sent for key so far.
func (a *acquireCounter) of(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[key]
}

// hook returns the go-redis hook that counts.
func (a *acquireCounter) hook() hook {
	return hook{before: func(cmd redis.Cmder) {
		if !acquires(cmd) {
			return
		}
		key, _ := cmd.Args()[3].(string)
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.n == nil {
			a.n = make(map[string]int)
		}
		a.n[key]++
	}}
}
