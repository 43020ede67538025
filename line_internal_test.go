package redislock

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
func TestLine_RenewalNeverTakesAFreeKey(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := New(rdb)
	res, err := runAttempt(ctx, l.client, l.keys, attemptArgs{key: "k", token: "a-token-with-no-place", ttl: time.Minute, place: placeLease, renew: true, wake: l.wakeFor("k")})
	if err != nil {
		t.Fatal(err)
	}
	if res.ours {
		t.Error("the renewal holds the key")
	}
	if !res.noPlace {
		t.Error("the renewal found a place")
	}
	if n := rdb.Exists(ctx, "k").Val(); n != 0 {
		t.Error("the free key was taken by a renewal")
	}
}
