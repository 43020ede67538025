package scripts

import (
	"context"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// A renewal of a place never takes a free key: only a hand-off to its place
// gives it the key. So a copy of a renewal that go-redis sent again, and
// that runs after the hand-off's lease ran out, takes nothing: it finds no
// place, and the key stays free.
func TestAcquire_RenewalNeverTakesAFreeKey(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := NewRedis(rdb, "")
	res, err := r.Attempt(ctx, AttemptArgs{Keys: []string{"k"}, Token: "a-token-with-no-place", TTL: time.Minute, Place: time.Second, Renew: true, Wake: r.Keys.Wake("id", "k", false)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ours {
		t.Error("the renewal holds the key")
	}
	if !res.NoPlace {
		t.Error("the renewal found a place")
	}
	if n := rdb.Exists(ctx, "k").Val(); n != 0 {
		t.Error("the free key was taken by a renewal")
	}
}
