package line

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A waiter whose ctx ends while another owner holds the key fails with
// ErrNotObtained beside ctx's error, having taken a place in the key's
// line (Redis saw it wait); once it gave up, its place is withdrawn and
// its subscription ends: the key holds its owner's token, and nothing else
// of the line is left in Redis.
func TestWait_GiveUpLeavesNothing(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	r := scripts.NewRedis(rdb, "")
	owner := scripts.NewToken()
	if res, err := r.Attempt(ctx, scripts.AttemptArgs{Keys: []string{"k"}, Token: owner, TTL: time.Minute, Plain: true}); err != nil || !res.Ours {
		t.Fatal(res, err)
	}
	env := &lease.Env{Background: &scripts.Background{}}
	ls := New(r, env, "locker")

	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := ls.Wait(wctx, &lease.Request{Keys: []string{"k"}, TTL: time.Minute, MinBackoff: 8 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, nil)
		done <- err
	}()
	for info, _ := r.Inspect(ctx, "k"); info.Waiting != 1; info, _ = r.Inspect(ctx, "k") {
		time.Sleep(5 * time.Millisecond)
	}
	err := <-done
	if !errors.Is(err, scripts.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait: %v, want ErrNotObtained and the deadline", err)
	}

	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := env.Background.Wait(sctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != "k" {
		t.Errorf("left in Redis: %v, want the key alone", keys)
	}
	if v := rdb.Get(ctx, "k").Val(); v != owner {
		t.Errorf("the key holds %q, not its owner's token", v)
	}
}

// A poll delay is drawn from [floor, 3 x the previous], capped at ceiling,
// so that waiters spread out; a previous delay at the floor or below gives
// the floor.
func TestNextBackoff_WithinItsBounds(t *testing.T) {
	floor, ceiling := 8*time.Millisecond, 100*time.Millisecond
	spread := map[time.Duration]bool{}
	for prev := time.Duration(0); prev <= 200*time.Millisecond; prev += time.Millisecond {
		for range 10 {
			d := NextBackoff(prev, floor, ceiling)
			if d < floor || d > min(max(3*prev, floor), ceiling) {
				t.Fatalf("NextBackoff(%v): %v, out of [%v, min(3 x prev, %v)]", prev, d, floor, ceiling)
			}
			spread[d] = true
		}
	}
	if len(spread) < 50 {
		t.Errorf("%d distinct delays: waiters would poll in lockstep", len(spread))
	}
	if d := NextBackoff(time.Millisecond, floor, ceiling); d != floor {
		t.Errorf("NextBackoff below the floor: %v, want %v", d, floor)
	}
}
