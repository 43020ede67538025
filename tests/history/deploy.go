package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// Deployments of the locks' Redis.
const (
	// DeploySingle is one redis-server with appendonly yes and appendfsync
	// always, which the workers reach through a fault proxy (New).
	DeploySingle = "single"
	// DeployQuorum is 3 independent masters with appendfsync always
	// (NewQuorum).
	DeployQuorum = "quorum"
	// DeploySentinel is a primary, a replica and 3 Sentinels, reached with
	// a FailoverClient, every lease acknowledged by the replica
	// (WithReplicas(1, ...)).
	DeploySentinel = "sentinel"
	// DeployCluster is a Cluster of 3 masters with a replica each, reached
	// with a ClusterClient, every lease acknowledged by the slot's replica
	// (WithReplicas(1, ...)).
	DeployCluster = "cluster"
)

// aofAlways makes a redis-server write every write to disk before it
// answers: a restart keeps every lock and fence counter.
var aofAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

// A DeployConfig tells a worker process how to reach the locks' Redis.
type DeployConfig struct {
	Kind        string
	Addrs       []string // single: the proxy; quorum: the masters; sentinel: the Sentinels; cluster: the nodes
	MasterName  string   // sentinel
	Replicas    int      // WithReplicas's n, 0 for none
	ReplicaWait time.Duration
}

// Locker makes the worker's Locker on the deployment, and a function that
// closes its clients.
func (d DeployConfig) Locker(opts ...redislock.Option) (*redislock.Locker, func(), error) {
	if d.Replicas > 0 {
		opts = append(opts, redislock.WithReplicas(d.Replicas, d.ReplicaWait))
	}
	switch d.Kind {
	case DeploySingle:
		c := redis.NewClient(&redis.Options{Addr: d.Addrs[0]})
		return redislock.New(c, opts...), func() { _ = c.Close() }, nil
	case DeploySentinel:
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: d.MasterName, SentinelAddrs: d.Addrs})
		return redislock.New(c, opts...), func() { _ = c.Close() }, nil
	case DeployCluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Addrs})
		return redislock.New(c, opts...), func() { _ = c.Close() }, nil
	case DeployQuorum:
		clients := make([]redis.UniversalClient, len(d.Addrs))
		for i, a := range d.Addrs {
			// Short timeouts, as the quorum tests use: a dead or frozen
			// master costs one short dial or read, not go-redis's retries.
			clients[i] = redis.NewClient(&redis.Options{Addr: a, DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
				ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
		}
		return redislock.NewQuorum(clients, opts...), func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}, nil
	}
	return nil, nil, fmt.Errorf("unknown deployment %q", d.Kind)
}

// A Deployment is a running deployment of the locks' Redis, with what the
// nemesis needs to fault it and to heal it.
type Deployment struct {
	Name   string
	Config DeployConfig
	TTL    time.Duration // the leases the workers take
	// Bound is the liveness bound: after the faults heal, every Obtain is
	// served within Bound of when it was called, or of the heal if it was
	// waiting then.
	Bound time.Duration
	// Kinds are the kinds of lock the deployment supports.
	Kinds []string
	// Unfair says that waiting is not fair: Obtain polls (NewQuorum), so
	// a waiter may lose every round for longer than Bound.
	Unfair bool
	// Sets says that the workers also take sets of keys (ObtainMulti,
	// TryObtainMulti, WithLockMulti); NewQuorum refuses them.
	Sets bool

	single  *redistest.Server   // DeploySingle
	proxy   *faultproxy.Proxy   // DeploySingle: between the workers and single
	masters []*redistest.Server // DeployQuorum
	sent    *redistest.Sentinel // DeploySentinel
	cluster *redistest.Cluster  // DeployCluster

	mu   sync.Mutex
	down map[*redistest.Server]bool // killed and not restarted yet
}

// StartSingle starts DeploySingle.
func StartSingle(t testing.TB) *Deployment {
	srv := redistest.Start(t, aofAlways...)
	px := faultproxy.New(t, srv.Addr())
	return &Deployment{
		Name: DeploySingle, Config: DeployConfig{Kind: DeploySingle, Addrs: []string{px.Addr()}},
		TTL: time.Second, Bound: 4 * time.Second, Kinds: []string{KindLock, KindRW, KindSemaphore}, Sets: true,
		single: srv, proxy: px, down: map[*redistest.Server]bool{},
	}
}

// StartQuorum starts DeployQuorum.
func StartQuorum(t testing.TB) *Deployment {
	masters := make([]*redistest.Server, 3)
	var wg sync.WaitGroup
	for i := range masters {
		wg.Go(func() { masters[i] = redistest.Start(t, aofAlways...) })
	}
	wg.Wait()
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	return &Deployment{
		Name: DeployQuorum, Config: DeployConfig{Kind: DeployQuorum, Addrs: addrs},
		// Obtain polls on a quorum (it is not fair): the bound allows for
		// losing many rounds to the other workers.
		TTL: time.Second, Bound: 8 * time.Second, Kinds: []string{KindLock}, Unfair: true,
		masters: masters, down: map[*redistest.Server]bool{},
	}
}

// StartSentinel starts DeploySentinel.
func StartSentinel(t testing.TB) *Deployment {
	s := redistest.StartSentinel(t)
	return &Deployment{
		Name: DeploySentinel,
		Config: DeployConfig{Kind: DeploySentinel, Addrs: s.SentinelAddrs(), MasterName: s.MasterName(),
			Replicas: 1, ReplicaWait: 500 * time.Millisecond},
		TTL: 2 * time.Second, Bound: 6 * time.Second, Kinds: []string{KindLock, KindRW, KindSemaphore}, Sets: true,
		sent: s, down: map[*redistest.Server]bool{},
	}
}

// StartCluster starts DeployCluster.
func StartCluster(t testing.TB) *Deployment {
	c := redistest.StartCluster(t)
	return &Deployment{
		Name:   DeployCluster,
		Config: DeployConfig{Kind: DeployCluster, Addrs: c.Addrs(), Replicas: 1, ReplicaWait: 500 * time.Millisecond},
		// A killed master makes every master refuse commands for 1-2 s
		// (CLUSTERDOWN) until its replica takes over: leases of 2 s are
		// lost then, and told.
		TTL: 2 * time.Second, Bound: 6 * time.Second, Kinds: []string{KindLock, KindRW, KindSemaphore}, Sets: true,
		cluster: c, down: map[*redistest.Server]bool{},
	}
}

// Heal undoes every fault that may still be in effect (a frozen or killed
// server, a paused proxy) and waits until the deployment serves again:
// every master answers; a Sentinel deployment is steady, a Cluster is
// healthy, and every primary counts its replica for WAIT (WithReplicas
// needs it).
func (d *Deployment) Heal(t testing.TB) {
	t.Helper()
	for _, s := range d.servers(t) {
		s.Thaw(t)
	}
	d.mu.Lock()
	var dead []*redistest.Server
	for s := range d.down {
		dead = append(dead, s)
	}
	d.down = map[*redistest.Server]bool{}
	d.mu.Unlock()
	for _, s := range dead {
		s.Restart(t)
	}
	if d.proxy != nil {
		d.proxy.Resume()
	}
	switch {
	case d.sent != nil:
		d.sent.WaitSynced(t)
		d.waitAcknowledged(t, []string{d.sent.CurrentPrimary(t)})
	case d.cluster != nil:
		d.cluster.WaitHealthy(t)
		var addrs []string
		for _, m := range d.cluster.Masters(t) {
			addrs = append(addrs, m.Addr())
		}
		d.waitAcknowledged(t, addrs)
	default:
		for _, s := range d.servers(t) {
			if err := ping(s.Addr()); err != nil {
				t.Fatalf("heal %s: %v", d.Name, err)
			}
		}
	}
}

// waitAcknowledged waits until each of the primaries counts a replica
// for WAIT (WAIT 1 on a connection that wrote nothing returns how many
// replicas are online). A replica whose link is up, as Sentinel and the
// replica's INFO report it, is counted only once the primary has its first
// REPLCONF ACK, up to a second later: until then every write WithReplicas
// fails with ErrNotReplicated, as documented for the time before a replica
// reattaches.
func (d *Deployment) waitAcknowledged(t testing.TB, primaries []string) {
	t.Helper()
	for _, addr := range primaries {
		deadline := time.Now().Add(20 * time.Second)
		for {
			n, err := do(addr, "WAIT", 1, 100)
			if err == nil && n == int64(1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("heal %s: %s counts no replica for WAIT after 20 s: %v %v", d.Name, addr, n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// servers are the data processes of the deployment.
func (d *Deployment) servers(t testing.TB) []*redistest.Server {
	switch {
	case d.single != nil:
		return []*redistest.Server{d.single}
	case d.masters != nil:
		return d.masters
	case d.sent != nil:
		return []*redistest.Server{d.sent.Primary(), d.sent.Replica()}
	case d.cluster != nil:
		return d.cluster.Nodes()
	}
	t.Fatalf("deployment %s has no servers", d.Name)
	return nil
}

// kill kills s (SIGKILL) and remembers to restart it at the heal.
func (d *Deployment) kill(t testing.TB, s *redistest.Server) {
	d.mu.Lock()
	d.down[s] = true
	d.mu.Unlock()
	s.Kill(t)
}

// restart restarts s, killed by kill.
func (d *Deployment) restart(t testing.TB, s *redistest.Server) {
	d.mu.Lock()
	delete(d.down, s)
	d.mu.Unlock()
	s.Restart(t)
}

// ping checks that the Redis at addr answers PING, trying for 10 s.
func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// do runs one command on a fresh client of addr.
func do(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return v, err
}

// Resource is the Redis that holds the protected resources. No fault
// touches it: the resource is what the locks protect, and its history is
// checked for linearizability on its own.
func StartResource(t testing.TB) string {
	return redistest.Start(t).Addr()
}

// keySpecs returns the lock keys of an episode of prefix: one per kind,
// in order (KindLock, KindRW, KindSemaphore; fewer when the deployment
// does not support a kind), and with sets a second lock and a second
// read-write key, for the sets to take 2 or 3 of them. Each second key has
// the first key of its kind as its hash tag ("{h1e2:lock}:b"): on a
// Cluster it is in the first one's slot, so that a set is taken by one
// script run when its keys share a slot and in parts, slot by slot, when
// they do not.
func keySpecs(prefix string, kinds []string, sets bool) []KeySpec {
	var ks []KeySpec
	for _, k := range kinds {
		spec := KeySpec{Name: prefix + strings.ToLower(k), Kind: k}
		if k == KindSemaphore {
			spec.Permits = 2
		}
		ks = append(ks, spec)
	}
	if sets {
		for _, spec := range ks {
			if spec.Kind == KindLock || spec.Kind == KindRW {
				ks = append(ks, KeySpec{Name: "{" + spec.Name + "}:b", Kind: spec.Kind})
			}
		}
	}
	return ks
}
