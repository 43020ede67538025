package scripts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// A late copy is seen by documented means (see Timing.MayResend): a reply
// that came after the client's ReadTimeout may come from a copy that
// go-redis sent again (here Redis was frozen past the first try's timeout,
// and ran both copies when it thawed), and says so; a reply in time says
// nothing of the kind; a client that never retries never resends. The same
// holds for a release, whose reply after a timeout may be the one of the
// copy that found the key gone by the other: it says so. CI runs
// this at both ends of the supported go-redis range (go.mod's floor, and
// the latest: .ci/run).
func TestTiming_ResendSeenByTheReadTimeout(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		retries int
		frozen  bool
		resent  bool
	}{
		{"in time", 2, false, false},
		{"after a timeout, retried", 2, true, true},
		{"no retries", -1, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: c.retries})
			defer rdb.Close()
			r := NewRedis(rdb, "")
			if err := takeScript.Load(ctx, rdb).Err(); err != nil {
				t.Fatal(err)
			}
			if c.frozen {
				srv.Freeze(t)
				thaw := time.AfterFunc(450*time.Millisecond, func() { srv.Thaw(t) })
				defer thaw.Stop()
			}
			key, token := "k:"+c.name, NewToken()
			res, err := r.Attempt(ctx, AttemptArgs{Keys: []string{key}, Token: token, TTL: time.Minute, Plain: true})
			if err != nil || !res.Ours {
				t.Fatalf("go-redis %s: %+v, %v", redis.Version(), res, err)
			}
			if res.Resent != c.resent {
				t.Errorf("go-redis %s: acquire resent %v, want %v (timing %+v)", redis.Version(), res.Resent, c.resent, r.Timing)
			}

			if c.frozen {
				srv.Freeze(t)
				thaw := time.AfterFunc(450*time.Millisecond, func() { srv.Thaw(t) })
				defer thaw.Stop()
			}
			rel, err := r.Release(ctx, ReleaseArgs{Keys: []string{key}, Token: token})
			if err != nil {
				t.Fatalf("go-redis %s: release: %v", redis.Version(), err)
			}
			if rel.Resent != c.resent || !c.resent && !rel.Released {
				t.Errorf("go-redis %s: release %+v, want resent %v (and released, when not resent)", redis.Version(), rel, c.resent)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Errorf("the key is left after its release")
			}
		})
	}
}
