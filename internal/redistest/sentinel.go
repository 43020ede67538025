package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMasterName is the name under which [StartSentinel] monitors the
// primary unless [SentinelConfig.MasterName] says otherwise.
const DefaultMasterName = "mymaster"

const (
	sentinelCount   = 3
	sentinelQuorum  = 2
	sentinelConf    = "sentinel.conf"
	sentinelSettle  = 20 * time.Second // startup and WaitSynced
	failoverTimeout = 20 * time.Second // Failover, all steps together
)

// replArgs make a full resync start at once. Redis 7.0 defaults to diskless
// sync with a 5 s delay (waiting for more replicas to share the transfer),
// which would make every replica start or role change 5 s slower.
var replArgs = []string{"--repl-diskless-sync-delay", "0"}

// SentinelConfig configures [StartSentinel]. A zero field takes its default.
type SentinelConfig struct {
	// MasterName is the name the primary is monitored under.
	// Default [DefaultMasterName].
	MasterName string
	// DownAfter is "sentinel down-after-milliseconds": how long the primary
	// must be unreachable (killed, frozen) before a Sentinel sees it down.
	// Automatic failover needs 2 Sentinels to agree after that. Default 1s.
	DownAfter time.Duration
	// FailoverTimeout is "sentinel failover-timeout". It bounds each step
	// of a failover and, doubled, the pause before Sentinels retry a failed
	// automatic failover of the same primary. Default 3s.
	FailoverTimeout time.Duration
	// ServerArgs are extra redis-server arguments for both the primary and
	// the replica (for example "--appendonly", "yes"). They come last, so
	// they can override the harness defaults.
	ServerArgs []string
}

// Sentinel is a primary, one replica and three Sentinels started by
// [StartSentinel]. Every process listens on its own free 127.0.0.1 port.
type Sentinel struct {
	cfg       SentinelConfig
	primary   *Server
	replica   *Server
	sentinels []*Server
}

// StartSentinel starts a Sentinel deployment on loopback: a primary, a
// replica of it (--replicaof) and three Sentinels (redis-server <conf>
// --sentinel, each with a writable config file in its own t.TempDir) that
// monitor the primary with a quorum of 2. Each opt edits the configuration
// first. It returns once the replica is in sync and every Sentinel knows the
// primary, the replica and the two other Sentinels, which usually takes
// about 2 s: Sentinels find each other through hello messages published
// every 2 s, a period Redis does not let us change.
//
// Timing with the defaults (measured with Redis 7.0 on loopback): start
// about 2 s; [Sentinel.Failover] about 1.2 s; the old primary becomes a
// replica about 10 s after that; an automatic failover after killing the
// primary ([Server.Kill] on [Sentinel.Primary]) about 2.3 s (DownAfter, then
// agreement and election). Tested with Redis 7.0 and 8.0 and Valkey 8.1
// and 9 (valkey-server takes the same --sentinel and configuration).
//
// All processes are killed and reaped in t.Cleanup. A missing redis-server
// skips the test, or fails it when $CI is "true" (see [Start]).
func StartSentinel(t testing.TB, opts ...func(*SentinelConfig)) *Sentinel {
	t.Helper()
	s := &Sentinel{cfg: SentinelConfig{
		MasterName:      DefaultMasterName,
		DownAfter:       time.Second,
		FailoverTimeout: 3 * time.Second,
	}}
	for _, opt := range opts {
		opt(&s.cfg)
	}
	args := append(append([]string(nil), replArgs...), s.cfg.ServerArgs...)
	s.primary = Start(t, args...)
	s.replica = Start(t, append([]string{
		"--replicaof", "127.0.0.1", strconv.Itoa(s.primary.Port()),
	}, args...)...)
	// The replica must be connected before the Sentinels start: they learn
	// about replicas from the primary's INFO, which they poll only every 10 s
	// after the first one.
	if err := waitFor(sentinelSettle, "replica sync", func() error {
		return checkReplicaOf(s.replica.Addr(), s.primary.Addr())
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	for range sentinelCount {
		s.sentinels = append(s.sentinels, s.startSentinel(t))
	}
	s.WaitSynced(t)
	return s
}

// startSentinel writes a config file monitoring the primary and starts a
// redis-server in Sentinel mode on it.
func (s *Sentinel) startSentinel(t testing.TB) *Server {
	t.Helper()
	srv := newServer(t, []string{"--sentinel"})
	srv.conf = filepath.Join(srv.dir, sentinelConf)
	name := s.cfg.MasterName
	conf := strings.Join([]string{
		"sentinel resolve-hostnames no",
		"sentinel announce-hostnames no",
		"sentinel announce-ip 127.0.0.1",
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, s.primary.Port(), sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, s.cfg.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, s.cfg.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		"",
	}, "\n")
	if err := os.WriteFile(srv.conf, []byte(conf), 0o644); err != nil {
		t.Fatalf("redistest: write sentinel config: %v", err)
	}
	srv.start(t)
	return srv
}

// MasterName returns the name the Sentinels monitor the primary under.
func (s *Sentinel) MasterName() string { return s.cfg.MasterName }

// SentinelAddrs returns the addresses of the three Sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, srv := range s.sentinels {
		addrs[i] = srv.Addr()
	}
	return addrs
}

// Sentinels returns the three Sentinel processes, for example to kill one.
func (s *Sentinel) Sentinels() []*Server {
	return append([]*Server(nil), s.sentinels...)
}

// Primary returns the process started as the primary. After a failover it
// may be a replica (or still a stale primary, see [Sentinel.Failover]); use
// [Sentinel.CurrentPrimary] for the current role.
func (s *Sentinel) Primary() *Server { return s.primary }

// Replica returns the process started as the replica. After a failover it
// is the primary; use [Sentinel.CurrentPrimary] for the current role.
func (s *Sentinel) Replica() *Server { return s.replica }

// CurrentPrimary returns the primary's address as the first answering
// Sentinel reports it (SENTINEL get-master-addr-by-name).
func (s *Sentinel) CurrentPrimary(t testing.TB) string {
	t.Helper()
	var errs []error
	for _, srv := range s.sentinels {
		addr, err := s.primaryFrom(srv.Addr())
		if err == nil {
			return addr
		}
		errs = append(errs, err)
	}
	t.Fatalf("redistest: no Sentinel reports the primary: %v", errors.Join(errs...))
	return ""
}

// primaryFrom asks the Sentinel at addr for the primary's address.
func (s *Sentinel) primaryFrom(addr string) (string, error) {
	v, err := query(addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.cfg.MasterName)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("%s: get-master-addr-by-name = %v", addr, v)
	}
	return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
}

// server returns the data process (primary or replica) listening on addr.
func (s *Sentinel) server(addr string) *Server {
	for _, srv := range []*Server{s.primary, s.replica} {
		if srv.Addr() == addr {
			return srv
		}
	}
	return nil
}

// other returns the data process that is not srv.
func (s *Sentinel) other(srv *Server) *Server {
	if srv == s.primary {
		return s.replica
	}
	return s.primary
}

// Failover forces a failover with SENTINEL FAILOVER (no agreement or
// down primary needed) and waits until every Sentinel reports the replica as
// the new primary and it answers ROLE master. It returns the new primary.
//
// It first waits for [Sentinel.WaitSynced], since Sentinel refuses to fail
// over without a healthy replica. The failover itself takes about 1.2 s
// (most of it waiting for Sentinel's next INFO of the promoted replica).
// When Failover returns the old primary is still a writable primary:
// Sentinel turns it into a replica of the new one only about 10 s later (it
// waits four 2 s hello periods for newer configurations, then acts on its
// next 10 s INFO poll). Writes sent directly to it meanwhile succeed and are
// lost when it resyncs (a full resync). A client from [Sentinel.Client]
// learns of the switch through +switch-master and writes to the new primary.
// So a second Failover right after a first one waits about 10 s before it
// starts.
func (s *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	s.WaitSynced(t)
	old := s.CurrentPrimary(t)
	// NOGOODSLAVE or INPROG may linger briefly while the Sentinel's own
	// view (refreshed by INFO) catches up; anything else is fatal.
	if err := waitFor(5*time.Second, "SENTINEL FAILOVER", func() error {
		_, err := query(s.sentinels[0].Addr(), "SENTINEL", "FAILOVER", s.cfg.MasterName)
		if err != nil && !strings.Contains(err.Error(), "NOGOODSLAVE") && !strings.Contains(err.Error(), "INPROG") {
			t.Fatalf("redistest: %v", err)
		}
		return err
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	want := s.other(s.server(old)).Addr()
	if err := waitFor(failoverTimeout, "failover to "+want, func() error {
		for _, srv := range s.sentinels {
			got, err := s.primaryFrom(srv.Addr())
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s reports primary %s", srv.Addr(), got)
			}
		}
		return checkRole(want, "master")
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s.server(want)
}

// WaitSynced waits until the deployment is steady: every Sentinel reports
// the same primary, which answers ROLE master; the other process replicates
// from it with its link up; and every Sentinel lists that process as its
// only replica, healthy, and knows the two other Sentinels. After
// [Sentinel.Failover] this takes about 10 s (see there).
func (s *Sentinel) WaitSynced(t testing.TB) {
	t.Helper()
	if err := waitFor(sentinelSettle, "sentinel deployment steady", s.checkSynced); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// checkSynced reports why the deployment is not steady, or nil.
func (s *Sentinel) checkSynced() error {
	primary, err := s.primaryFrom(s.sentinels[0].Addr())
	if err != nil {
		return err
	}
	for _, srv := range s.sentinels[1:] {
		if other, err := s.primaryFrom(srv.Addr()); err != nil || other != primary {
			return fmt.Errorf("sentinels disagree on the primary: %s vs %s (%v)", primary, other, err)
		}
	}
	p := s.server(primary)
	if p == nil {
		return fmt.Errorf("sentinel reports unknown primary %s", primary)
	}
	replica := s.other(p).Addr()
	if err := checkRole(primary, "master"); err != nil {
		return err
	}
	if err := checkReplicaOf(replica, primary); err != nil {
		return err
	}
	for _, srv := range s.sentinels {
		if err := s.checkSentinel(srv.Addr(), primary, replica); err != nil {
			return err
		}
	}
	return nil
}

// checkSentinel reports whether the Sentinel at addr sees primary and
// replica healthy and knows the other Sentinels.
func (s *Sentinel) checkSentinel(addr, primary, replica string) error {
	v, err := query(addr, "SENTINEL", "MASTER", s.cfg.MasterName)
	if err != nil {
		return err
	}
	m, err := replyMap(v)
	if err != nil {
		return err
	}
	if got := net.JoinHostPort(m["ip"], m["port"]); got != primary || m["flags"] != "master" {
		return fmt.Errorf("%s: primary %s flags %q, want %s master", addr, got, m["flags"], primary)
	}
	if m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
		return fmt.Errorf("%s: knows %s other sentinels", addr, m["num-other-sentinels"])
	}
	v, err = query(addr, "SENTINEL", "REPLICAS", s.cfg.MasterName)
	if err != nil {
		return err
	}
	rs, err := replyMaps(v)
	if err != nil {
		return err
	}
	if len(rs) != 1 {
		return fmt.Errorf("%s: knows %d replicas, want 1", addr, len(rs))
	}
	// The replica's own link state (master-link-status, role-reported) is
	// not checked here: Sentinels refresh it from INFO only every 10 s, so
	// after a failover it lags; checkReplicaOf asks the replica instead.
	r := rs[0]
	if got := net.JoinHostPort(r["ip"], r["port"]); got != replica || r["flags"] != "slave" {
		return fmt.Errorf("%s: replica %s flags %q, want %s slave", addr, got, r["flags"], replica)
	}
	return nil
}

// Client returns a go-redis failover client that finds the primary through
// the Sentinels and follows failovers. Each opt is applied to the options
// (MasterName and SentinelAddrs are set) before the client is created. The
// client is closed in t.Cleanup.
func (s *Sentinel) Client(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{
		MasterName:    s.cfg.MasterName,
		SentinelAddrs: s.SentinelAddrs(),
	}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
