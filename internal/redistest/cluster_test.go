package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyOn returns a key (prefix + n) that the cluster serves from m, or, if
// not is true, from any master but m.
func keyOn(t *testing.T, c *Cluster, prefix string, m *Server, not bool) string {
	t.Helper()
	for i := range 100 {
		k := fmt.Sprintf("%s%d", prefix, i)
		if (c.MasterFor(t, k) == m) != not {
			return k
		}
	}
	t.Fatalf("no key found for %s (not=%v)", m.Addr(), not)
	return ""
}

// StartCluster builds three masters on loopback, started as Nodes()[0:3],
// each with its replica Nodes()[i+3] in sync; a ClusterClient then writes
// keys that land on all three masters and are replicated.
func TestClusterClientWritesAllMasters(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, func(cc *ClusterConfig) { cc.ServerArgs = []string{"--appendonly", "yes"} })
	t.Logf("StartCluster took %v", time.Since(start))

	nodes := c.Nodes()
	if got := c.Masters(t); !slices.Equal(got, nodes[:3]) {
		t.Fatalf("Masters() = %v, want the first three nodes", got)
	}
	for i, m := range nodes[:3] {
		if r := c.ReplicaOf(t, m); r != nodes[i+3] {
			t.Fatalf("ReplicaOf(%s) = %s, want %s", m.Addr(), r.Addr(), nodes[i+3].Addr())
		}
	}
	for i, a := range c.Addrs() {
		if !strings.HasPrefix(a, "127.0.0.1:") || a != nodes[i].Addr() {
			t.Fatalf("Addrs()[%d] = %s", i, a)
		}
		if got := fmt.Sprint(nodes[i].Do(t, "CONFIG", "GET", "appendonly")); !strings.Contains(got, "yes") {
			t.Fatalf("%s: appendonly = %s, want ServerArgs applied", a, got)
		}
	}

	cc := c.Client(t)
	ctx := context.Background()
	perMaster := make(map[*Server]int)
	for i := range 30 {
		k := fmt.Sprintf("key%d", i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		m := c.MasterFor(t, k)
		if got := m.Do(t, "GET", k); got != fmt.Sprint(i) {
			t.Fatalf("GET %s on its master %s = %v", k, m.Addr(), got)
		}
		perMaster[m]++
	}
	if len(perMaster) != 3 {
		t.Fatalf("keys landed on %d masters, want 3", len(perMaster))
	}
	for i, m := range nodes[:3] {
		if got := m.Do(t, "WAIT", 1, 5000); got != int64(1) {
			t.Fatalf("WAIT on %s = %v", m.Addr(), got)
		}
		if got := nodes[i+3].Do(t, "DBSIZE"); got != int64(perMaster[m]) {
			t.Fatalf("replica %s DBSIZE = %v, want %d", nodes[i+3].Addr(), got, perMaster[m])
		}
	}
}

// A killed master is replaced by its replica (WaitFailover), the
// ClusterClient serves writes for its slots again, and the killed node,
// restarted, rejoins as a replica of the new master.
func TestClusterKillMaster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	cc := c.Client(t)
	ctx := context.Background()
	if err := cc.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := c.MasterFor(t, "k")
	replica := c.ReplicaOf(t, old)
	if got := old.Do(t, "WAIT", 1, 5000); got != int64(1) {
		t.Fatalf("WAIT = %v", got)
	}

	start := time.Now()
	if killed := c.KillMaster(t, "k"); killed != old {
		t.Fatalf("KillMaster killed %s, want %s", killed.Addr(), old.Addr())
	}
	m := c.WaitFailover(t, old)
	t.Logf("kill to healthy cluster: %v", time.Since(start))
	if m != replica || c.MasterFor(t, "k") != replica {
		t.Fatalf("new master %s, want the replica %s", m.Addr(), replica.Addr())
	}
	// go-redis reloads its slot map on MOVED/ASK/READONLY replies and every
	// ClusterStateReloadInterval (60 s), but not on connection errors, so
	// until ReloadState it keeps sending the killed master's slots to the
	// dead address.
	start = time.Now()
	if err := cc.Get(ctx, "k").Err(); err != nil {
		t.Logf("GET before ReloadState (%v): %v", time.Since(start), err)
	}
	cc.ReloadState(ctx) // asynchronous
	if err := waitFor(5*time.Second, "client sees the new master", func() error {
		got, err := cc.Get(ctx, "k").Result()
		if err == nil && got != "before" {
			t.Fatalf("GET k after failover = %q, want before", got)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("client following the new master after %v", time.Since(start))
	if err := cc.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	if got := m.Do(t, "GET", "k"); got != "after" {
		t.Fatalf("GET k on new master = %v", got)
	}

	start = time.Now()
	old.Restart(t)
	c.WaitHealthy(t)
	t.Logf("restarted node rejoined after %v", time.Since(start))
	if r := c.ReplicaOf(t, m); r != old {
		t.Fatalf("replica of new master = %s, want the restarted %s", r.Addr(), old.Addr())
	}
}

// A controlled failover (CLUSTER FAILOVER) swaps a master and its replica
// without losing writes; the client follows.
func TestClusterControlledFailover(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	cc := c.Client(t)
	ctx := context.Background()
	old := c.Masters(t)[1]
	k := keyOn(t, c, "cf", old, false)
	if err := cc.Set(ctx, k, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replica := c.ReplicaOf(t, old)

	start := time.Now()
	m := c.Failover(t, old)
	t.Logf("Failover took %v", time.Since(start))
	if m != replica || c.ReplicaOf(t, m) != old {
		t.Fatalf("after Failover: master %s replica %s, want %s and %s",
			m.Addr(), c.ReplicaOf(t, m).Addr(), replica.Addr(), old.Addr())
	}
	if got := m.Do(t, "GET", k); got != "before" {
		t.Fatalf("GET %s on new master = %v", k, got)
	}
	if err := cc.Set(ctx, k, "after", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	if got := m.Do(t, "GET", k); got != "after" {
		t.Fatalf("GET %s on new master = %v", k, got)
	}
}

// PUBLISH called from a Lua script (EVAL with one key) on one master reaches
// a ClusterClient subscriber connected to another master: Redis Cluster
// broadcasts classic (non-sharded) PUBLISH over the cluster bus, from scripts
// too.
func TestClusterScriptPublishReachesOtherNode(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	cc := c.Client(t)
	ctx := context.Background()

	const channel = "lock-released"
	sub := cc.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}
	var subNode *Server
	for _, n := range c.Nodes() {
		v := n.Do(t, "PUBSUB", "NUMSUB", channel).([]any)
		if v[1] == int64(1) {
			subNode = n
		}
	}
	if subNode == nil {
		t.Fatal("no node has the subscriber")
	}
	key := keyOn(t, c, "lock", subNode, true)
	m := c.MasterFor(t, key)
	t.Logf("subscriber on %s, EVAL with key %q on %s", subNode.Addr(), key, m.Addr())

	const script = "redis.call('PUBLISH', ARGV[1], 'x')"
	m.Do(t, "EVAL", script, 1, key, channel) // directly on the key's master
	if err := cc.Eval(ctx, script, []string{key}, channel).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err) // and routed by the ClusterClient
	}
	for i := range 2 {
		msg, err := sub.ReceiveTimeout(ctx, 3*time.Second)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if mm, ok := msg.(*redis.Message); !ok || mm.Channel != channel || mm.Payload != "x" {
			t.Fatalf("message %d = %#v", i, msg)
		}
	}
}

// The cluster bus port is the data port +10000, or -10000 when that would
// not be a valid port, so a restarted node keeps its bus port.
func TestBusPort(t *testing.T) {
	for port, want := range map[int]int{6379: 16379, 55535: 65535, 55536: 45536, 60999: 50999} {
		if got := busPort(port); got != want {
			t.Errorf("busPort(%d) = %d, want %d", port, got, want)
		}
	}
}

// Without redis-server StartCluster skips, or fails when CI=true, like Start.
func TestStartClusterMissingBinary(t *testing.T) {
	checkMissingBinary(t, func(tb testing.TB) { StartCluster(tb) })
}
