package redistest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterMasters  = 3
	clusterSlots    = 16384
	clusterSettle   = 20 * time.Second // StartCluster, WaitHealthy, failovers
	clusterPortSkew = 10000            // Redis' default bus port offset
)

// ClusterConfig configures [StartCluster]. A zero field takes its default.
type ClusterConfig struct {
	// NodeTimeout is --cluster-node-timeout: how long a node may be
	// unreachable before it is flagged as failing. It drives how long an
	// automatic failover takes (see [Cluster.WaitFailover]). Default 1s.
	NodeTimeout time.Duration
	// ServerArgs are extra redis-server arguments for every node (for
	// example "--appendonly", "yes"). They come last, so they can override
	// the harness defaults.
	ServerArgs []string
}

// Cluster is a Redis Cluster of three masters with one replica each,
// started by [StartCluster]. Its methods may be called from multiple
// goroutines.
type Cluster struct {
	cfg   ClusterConfig
	nodes []*Server // nodes[i+3] was started as the replica of nodes[i]

	mu   sync.Mutex
	last []slotRange // slot map seen by the last successful health check
}

// slotRange is one entry of CLUSTER SLOTS, with addresses.
type slotRange struct {
	start, end int
	master     string
	replicas   []string // sorted
}

// StartCluster starts a Redis Cluster on loopback: six redis-server
// processes (--cluster-enabled yes, nodes.conf in each node's own
// t.TempDir), each on a free 127.0.0.1 port with its cluster bus on port
// +10000 (or -10000 when that would exceed 65535). Three masters get the
// slots 0-5460, 5461-10921 and 10922-16383 and one replica each. The
// cluster is built with CLUSTER ADDSLOTSRANGE, MEET and REPLICATE, so no
// redis-cli is needed. Each opt edits the configuration first.
//
// It returns once [Cluster.WaitHealthy] holds, usually after about 2.5 s (a
// master that just started waits 2 s before declaring the cluster ok).
// Timing with the defaults (Redis 7.0, loopback): [Cluster.Failover] about
// 0.3-0.5 s, kill to healthy via [Cluster.WaitFailover] about 2.4 s, a
// restarted node back as a replica in under 1 s. Requires Redis 7.0 or
// later (cluster-port, ADDSLOTSRANGE); Valkey 8.1 and 9 work the same.
//
// All processes are killed and reaped in t.Cleanup. A missing redis-server
// skips the test, or fails it when $CI is "true" (see [Start]).
func StartCluster(t testing.TB, opts ...func(*ClusterConfig)) *Cluster {
	t.Helper()
	c := &Cluster{cfg: ClusterConfig{NodeTimeout: time.Second}}
	for _, opt := range opts {
		opt(&c.cfg)
	}
	args := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // relative to --dir
		"--cluster-node-timeout", strconv.FormatInt(c.cfg.NodeTimeout.Milliseconds(), 10),
		"--cluster-announce-ip", "127.0.0.1",
		// A replica with replication offset 0 counts as unavailable (CLUSTER
		// SLOTS omits it) until its master sends something; with no writes
		// that is the replication PING, every 10 s by default.
		"--repl-ping-replica-period", "1",
	}, replArgs...)
	args = append(args, c.cfg.ServerArgs...)
	for range 2 * clusterMasters {
		srv := newServer(t, args)
		srv.portArgs = func(port int) []string {
			return []string{"--cluster-port", strconv.Itoa(busPort(port))}
		}
		srv.start(t)
		c.nodes = append(c.nodes, srv)
	}
	if err := c.create(); err != nil {
		t.Fatalf("redistest: create cluster: %v", err)
	}
	c.WaitHealthy(t)
	return c
}

// busPort returns the cluster bus port of the node listening on port.
func busPort(port int) int {
	if port+clusterPortSkew > 65535 {
		return port - clusterPortSkew
	}
	return port + clusterPortSkew
}

// create assigns slots and epochs to the masters, joins all nodes and
// attaches the replicas.
func (c *Cluster) create() error {
	for i, m := range c.nodes[:clusterMasters] {
		lo, hi := i*clusterSlots/clusterMasters, (i+1)*clusterSlots/clusterMasters-1
		// Distinct epochs avoid a round of collision handling, as redis-cli does.
		if _, err := query(m.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return err
		}
		if _, err := query(m.Addr(), "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return err
		}
	}
	for _, n := range c.nodes[1:] {
		if _, err := query(c.nodes[0].Addr(), "CLUSTER", "MEET", "127.0.0.1", n.Port(), busPort(n.Port())); err != nil {
			return err
		}
	}
	if err := waitFor(clusterSettle, "nodes meet", c.checkMet); err != nil {
		return err
	}
	for i, r := range c.nodes[clusterMasters:] {
		id, err := queryString(c.nodes[i].Addr(), "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		if _, err := query(r.Addr(), "CLUSTER", "REPLICATE", id); err != nil {
			return err
		}
	}
	return nil
}

// checkMet reports whether every node knows all six nodes, connected.
func (c *Cluster) checkMet() error {
	for _, n := range c.nodes {
		s, err := queryString(n.Addr(), "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(s), "\n")
		if len(lines) != len(c.nodes) {
			return fmt.Errorf("%s knows %d nodes, want %d", n.Addr(), len(lines), len(c.nodes))
		}
		for _, l := range lines {
			// <id> <addr> <flags> <master> <ping> <pong> <epoch> <link> <slots...>
			f := strings.Fields(l)
			if len(f) < 8 || f[7] != "connected" || badFlags(f[2]) {
				return fmt.Errorf("%s: node not ready: %s", n.Addr(), l)
			}
		}
	}
	return nil
}

// badFlags reports whether CLUSTER NODES flags show a node that is not yet,
// or no longer, a normal member (handshake, noaddr, fail?, fail).
func badFlags(flags string) bool {
	for _, f := range strings.Split(flags, ",") {
		switch f {
		case "handshake", "noaddr", "fail?", "fail":
			return true
		}
	}
	return false
}

// Nodes returns the six processes: the three started as masters first, then
// their replicas in the same order. Roles change with failovers; see
// [Cluster.Masters].
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Addrs returns the addresses of all six nodes, as in [Cluster.Nodes].
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// node returns the process listening on addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Client returns a go-redis cluster client seeded with all node addresses.
// Each opt is applied to the options before the client is created. The
// client is closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, opt := range opts {
		opt(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Masters returns the current masters in slot order, as the first answering
// running node reports them (CLUSTER SLOTS).
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var ms []*Server
	for _, r := range c.slots(t) {
		if m := c.node(r.master); m != nil && !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	return ms
}

// MasterFor returns the master currently serving key's slot (CLUSTER
// KEYSLOT, then CLUSTER SLOTS on the first answering running node).
func (c *Cluster) MasterFor(t testing.TB, key string) *Server {
	t.Helper()
	ranges := c.slots(t)
	v := c.anyNode(t).Do(t, "CLUSTER", "KEYSLOT", key)
	slot, ok := v.(int64)
	if !ok {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q = %v", key, v)
	}
	for _, r := range ranges {
		if int64(r.start) <= slot && slot <= int64(r.end) {
			if m := c.node(r.master); m != nil {
				return m
			}
		}
	}
	t.Fatalf("redistest: no master serves slot %v of %q", v, key)
	return nil
}

// ReplicaOf returns a replica of master as the cluster currently reports it,
// or fails the test if master has none.
func (c *Cluster) ReplicaOf(t testing.TB, master *Server) *Server {
	t.Helper()
	for _, r := range c.slots(t) {
		if r.master == master.Addr() && len(r.replicas) > 0 {
			if n := c.node(r.replicas[0]); n != nil {
				return n
			}
		}
	}
	t.Fatalf("redistest: %s is not a master with a replica", master.Addr())
	return nil
}

// anyNode returns the first running node that answers PING.
func (c *Cluster) anyNode(t testing.TB) *Server {
	t.Helper()
	for _, n := range c.nodes {
		if n.running() {
			if _, err := query(n.Addr(), "PING"); err == nil {
				return n
			}
		}
	}
	t.Fatalf("redistest: no cluster node answers")
	return nil
}

// slots returns the slot map as the first answering running node sees it.
func (c *Cluster) slots(t testing.TB) []slotRange {
	t.Helper()
	ranges, err := slotMap(c.anyNode(t).Addr())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return ranges
}

// KillMaster kills (SIGKILL) the master serving key and returns it. Use
// [Cluster.WaitFailover] to wait for its replica to take over, and
// [Server.Restart] to bring it back (it rejoins as a replica).
func (c *Cluster) KillMaster(t testing.TB, key string) *Server {
	t.Helper()
	m := c.MasterFor(t, key)
	c.refreshLast(t)
	m.Kill(t)
	return m
}

// WaitFailover waits until the replica of old, a master killed (or
// otherwise lost) since the last successful [Cluster.WaitHealthy], has been
// promoted and [Cluster.WaitHealthy] holds again. It returns the new master.
// With the default 1 s node timeout this takes about 2-3 s: the node timeout
// to flag the master as failing, up to half of it again for the other
// masters to agree, then a random 0.5-1 s election delay.
func (c *Cluster) WaitFailover(t testing.TB, old *Server) *Server {
	t.Helper()
	c.mu.Lock()
	before := c.last
	c.mu.Unlock()
	var want *slotRange
	for i, r := range before {
		if r.master == old.Addr() {
			want = &before[i]
			break
		}
	}
	if want == nil || len(want.replicas) == 0 {
		t.Fatalf("redistest: %s was not a master with a replica at the last health check", old.Addr())
	}
	c.WaitHealthy(t)
	return c.servedBy(t, want.start, want.replicas)
}

// servedBy checks that slot is now served by one of addrs and returns it.
func (c *Cluster) servedBy(t testing.TB, slot int, addrs []string) *Server {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.last {
		if r.start <= slot && slot <= r.end && slices.Contains(addrs, r.master) {
			return c.node(r.master)
		}
	}
	t.Fatalf("redistest: slot %d is not served by any of %v: %v", slot, addrs, c.last)
	return nil
}

// Failover makes the replica of master take over in a controlled way
// (CLUSTER FAILOVER on the replica: master stops writes until the replica
// has caught up, so nothing is lost) and waits until master is a replica of
// it and [Cluster.WaitHealthy] holds. It returns the new master. This
// usually takes well under a second plus the health check.
func (c *Cluster) Failover(t testing.TB, master *Server) *Server {
	t.Helper()
	r := c.ReplicaOf(t, master)
	slot := -1
	for _, rg := range c.slots(t) {
		if rg.master == master.Addr() {
			slot = rg.start
			break
		}
	}
	r.Do(t, "CLUSTER", "FAILOVER")
	if err := waitFor(clusterSettle, "manual failover to "+r.Addr(), func() error {
		if err := checkRole(r.Addr(), "master"); err != nil {
			return err
		}
		return checkReplicaOf(master.Addr(), r.Addr())
	}); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c.WaitHealthy(t)
	return c.servedBy(t, slot, []string{r.Addr()})
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// the same slot map, the map covers all 16384 slots with running masters,
// every running node appears in it (as a master or an available replica),
// and every replica's replication link is up. Nodes killed with
// [Server.Kill] are ignored; a frozen node makes it time out, so thaw or
// kill it first.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := waitFor(clusterSettle, "cluster healthy", c.checkHealthy); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// refreshLast records the current slot map for WaitFailover, if the
// cluster is healthy.
func (c *Cluster) refreshLast(t testing.TB) {
	t.Helper()
	if err := c.checkHealthy(); err != nil {
		t.Fatalf("redistest: cluster not healthy: %v", err)
	}
}

// checkHealthy reports why the cluster is not healthy, or nil; on success
// it records the slot map in c.last.
func (c *Cluster) checkHealthy() error {
	var live []*Server
	for _, n := range c.nodes {
		if n.running() {
			live = append(live, n)
		}
	}
	var ref []slotRange
	for _, n := range live {
		if err := checkNode(n.Addr()); err != nil {
			return err
		}
		ranges, err := slotMap(n.Addr())
		if err != nil {
			return err
		}
		if ref == nil {
			ref = ranges
		} else if !slices.EqualFunc(ref, ranges, slotRange.equal) {
			return fmt.Errorf("slot maps differ: %s has %v, %s has %v", live[0].Addr(), ref, n.Addr(), ranges)
		}
	}
	if err := c.checkMap(ref, live); err != nil {
		return err
	}
	c.mu.Lock()
	c.last = ref
	c.mu.Unlock()
	return nil
}

// checkNode reports whether addr says cluster_state:ok and, if it is a
// replica, has its replication link up.
func checkNode(addr string) error {
	s, err := queryString(addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if st := infoFields(s)["cluster_state"]; st != "ok" {
		return fmt.Errorf("%s: cluster_state:%s", addr, st)
	}
	s, err = queryString(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if f := infoFields(s); f["role"] == "slave" && f["master_link_status"] != "up" {
		return fmt.Errorf("%s: replica link %s", addr, f["master_link_status"])
	}
	return nil
}

// checkMap reports whether ranges cover every slot with running masters and
// mention every live node.
func (c *Cluster) checkMap(ranges []slotRange, live []*Server) error {
	next := 0
	seen := make(map[string]bool)
	for _, r := range ranges {
		if r.start != next {
			return fmt.Errorf("slots %d-%d are not served: %v", next, r.start-1, ranges)
		}
		next = r.end + 1
		if n := c.node(r.master); n == nil || !n.running() {
			return fmt.Errorf("slots %d-%d are served by %s, which is not running", r.start, r.end, r.master)
		}
		seen[r.master] = true
		for _, a := range r.replicas {
			seen[a] = true
		}
	}
	if next != clusterSlots {
		return fmt.Errorf("slots %d-%d are not served: %v", next, clusterSlots-1, ranges)
	}
	for _, n := range live {
		if !seen[n.Addr()] {
			return fmt.Errorf("%s is neither a master nor an available replica: %v", n.Addr(), ranges)
		}
	}
	return nil
}

// slotMap parses CLUSTER SLOTS from addr.
func slotMap(addr string) ([]slotRange, error) {
	v, err := query(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: CLUSTER SLOTS = %v", addr, v)
	}
	ranges := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		r, err := parseSlotRange(e)
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER SLOTS: %w", addr, err)
		}
		ranges = append(ranges, r)
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return a.start - b.start })
	return ranges, nil
}

// parseSlotRange parses [start end [ip port id ...] [replica...]...].
func parseSlotRange(e any) (slotRange, error) {
	a, ok := e.([]any)
	if !ok || len(a) < 3 {
		return slotRange{}, fmt.Errorf("bad entry %v", e)
	}
	start, ok1 := a[0].(int64)
	end, ok2 := a[1].(int64)
	if !ok1 || !ok2 {
		return slotRange{}, fmt.Errorf("bad range in %v", e)
	}
	r := slotRange{start: int(start), end: int(end)}
	var errs []error
	for i, n := range a[2:] {
		addr, err := nodeAddr(n)
		errs = append(errs, err)
		if i == 0 {
			r.master = addr
		} else {
			r.replicas = append(r.replicas, addr)
		}
	}
	slices.Sort(r.replicas)
	return r, errors.Join(errs...)
}

// nodeAddr parses the [ip port ...] part of a CLUSTER SLOTS entry.
func nodeAddr(n any) (string, error) {
	a, ok := n.([]any)
	if !ok || len(a) < 2 {
		return "", fmt.Errorf("bad node %v", n)
	}
	return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
}

// equal reports whether two ranges are identical.
func (r slotRange) equal(o slotRange) bool {
	return r.start == o.start && r.end == o.end && r.master == o.master && slices.Equal(r.replicas, o.replicas)
}

// String formats r for error messages.
func (r slotRange) String() string {
	return fmt.Sprintf("%d-%d:%s%v", r.start, r.end, r.master, r.replicas)
}

// running reports whether the server process is up (not killed).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}
