package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel brings up a steady deployment: the Sentinels report the
// process started as primary, the replica is in sync with it, the extra
// server args reach both data processes, and all addresses are loopback.
func TestStartSentinelTopology(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartSentinel(t, func(c *SentinelConfig) {
		c.MasterName = "locks"
		c.ServerArgs = []string{"--appendonly", "yes"}
	})
	t.Logf("StartSentinel took %v", time.Since(start))

	if s.MasterName() != "locks" {
		t.Fatalf("MasterName() = %q", s.MasterName())
	}
	if got := s.CurrentPrimary(t); got != s.Primary().Addr() {
		t.Fatalf("CurrentPrimary = %s, want %s", got, s.Primary().Addr())
	}
	addrs := append(s.SentinelAddrs(), s.Primary().Addr(), s.Replica().Addr())
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	if len(addrs) != 5 || len(slices.Compact(sorted)) != 5 {
		t.Fatalf("addresses %v, want 5 distinct", addrs)
	}
	for _, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("address %s is not loopback", a)
		}
	}
	for _, srv := range []*Server{s.Primary(), s.Replica()} {
		if got := fmt.Sprint(srv.Do(t, "CONFIG", "GET", "appendonly")); !strings.Contains(got, "yes") {
			t.Fatalf("%s: appendonly = %s, want ServerArgs applied", srv.Addr(), got)
		}
	}
	if got := s.Replica().Do(t, "ROLE").([]any)[0]; got != "slave" {
		t.Fatalf("replica ROLE = %v", got)
	}
	if got := s.Sentinels()[0].Do(t, "SENTINEL", "CKQUORUM", "locks"); !strings.HasPrefix(fmt.Sprint(got), "OK") {
		t.Fatalf("CKQUORUM = %v", got)
	}
}

// A FailoverClient writes through the Sentinels to the primary; after a
// forced failover it writes to the new primary (the former replica), which
// also kept the data written before the failover.
func TestSentinelFailoverClient(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	c := s.Client(t, func(o *redis.FailoverOptions) { o.MaxRetries = 5 })
	ctx := context.Background()

	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.Primary().Do(t, "GET", "before"); got != "1" {
		t.Fatalf("GET before on primary = %v, want 1", got)
	}
	if got := s.Primary().Do(t, "WAIT", 1, 5000); got != int64(1) {
		t.Fatalf("WAIT = %v, want the replica to acknowledge", got)
	}

	start := time.Now()
	p := s.Failover(t)
	t.Logf("Failover took %v", time.Since(start))
	if p != s.Replica() || s.CurrentPrimary(t) != s.Replica().Addr() {
		t.Fatalf("new primary %s, want the former replica %s", s.CurrentPrimary(t), s.Replica().Addr())
	}
	if got := p.Do(t, "GET", "before"); got != "1" {
		t.Fatalf("GET before on new primary = %v, want 1", got)
	}

	// The client learns of the switch asynchronously (+switch-master over
	// pubsub); all Sentinels have announced it when Failover returns, but a
	// pooled connection to the old primary, which stays a writable primary
	// for about 10 s, could in theory still carry the very first command.
	// Allow that for 2 s and log it; every later write must be on p.
	stale := 0
	if err := waitFor(2*time.Second, "client follows the failover", func() error {
		if err := c.Set(ctx, "probe", stale, 0).Err(); err != nil {
			return err
		}
		if got := p.Do(t, "GET", "probe"); got != fmt.Sprint(stale) {
			stale++
			return fmt.Errorf("SET went to the old primary (new primary has probe=%v)", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stale > 0 {
		t.Logf("%d write(s) right after Failover went to the old primary", stale)
	}
	for i := range 20 {
		key := fmt.Sprintf("after%d", i)
		if err := c.Set(ctx, key, "2", 0).Err(); err != nil {
			t.Fatalf("SET after failover: %v", err)
		}
		if got := p.Do(t, "GET", key); got != "2" {
			t.Fatalf("write %d after Failover did not reach the new primary (GET = %v)", i, got)
		}
	}
}

// After a failover WaitSynced waits until Sentinel has turned the old primary
// into a replica of the new one; a second Failover then moves the primary
// back.
func TestSentinelFailoverTwice(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	s.Failover(t)
	start := time.Now()
	s.WaitSynced(t)
	t.Logf("old primary rejoined as replica after %v", time.Since(start))
	if got := s.Primary().Do(t, "ROLE").([]any)[0]; got != "slave" {
		t.Fatalf("old primary ROLE = %v, want slave", got)
	}
	if p := s.Failover(t); p != s.Primary() {
		t.Fatalf("second failover promoted %s, want %s", p.Addr(), s.Primary().Addr())
	}
}

// Without redis-server StartSentinel skips, or fails when CI=true, like Start.
func TestStartSentinelMissingBinary(t *testing.T) {
	checkMissingBinary(t, func(tb testing.TB) { StartSentinel(tb) })
}

// checkMissingBinary runs start with no redis-server in PATH, without and
// with CI=true, and checks that it skips and then fails with the install hint.
func checkMissingBinary(t *testing.T, start func(testing.TB)) {
	t.Setenv(EnvBin, "")
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct{ ci, want string }{{"", "skip"}, {"true", "fatal"}} {
		t.Setenv("CI", tc.ci)
		r := &recTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			start(r)
		}()
		<-done
		if r.kind != tc.want || !strings.Contains(r.msg, "apt-get install -y redis-server") {
			t.Errorf("CI=%q: got %s %q, want %s with install hint", tc.ci, r.kind, r.msg, tc.want)
		}
	}
}
