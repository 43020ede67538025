package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/faultproxy"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// Resend detection (counted) counts the writes of go-redis's protocol
// writer, which it recognises by the package of the function that calls
// MarshalBinary. This guard fails loudly when a go-redis release moves that
// code: a command written once counts 1, and one that go-redis writes again
// after its reply was lost counts 2. CI runs it at both ends of the
// supported go-redis range (go.mod's floor, and the latest: .ci/run).
func TestCounted_CountsGoRedisWrites(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.New(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 2, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pttlScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	run := func() sends {
		s := scriptCall{pttlScript, []string{"k"}, []any{&counted{s: "rl1:token"}}}
		cmd, n := s.run(ctx, rdb)
		if err := cmd.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if n := run(); n != 1 || !counting.Load() {
		t.Fatalf("go-redis %s: a command written once counted %d writes (counting: %v): resend detection does not work with this go-redis; "+
			"counted.MarshalBinary must be called by its protocol writer (a function of a package named internal/proto)", redis.Version(), n, counting.Load())
	}
	proxy.DropNextReply(faultproxy.MatchCommand("evalsha"))
	if n := run(); n != 2 || !n.resent() {
		t.Fatalf("go-redis %s: a command written again after its reply was lost counted %d writes: resend detection does not see go-redis's retries", redis.Version(), n)
	}
}
