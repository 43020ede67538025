package backend

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/redistest"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// noEvents is a Locker that reports nothing.
type noEvents struct{}

func (noEvents) Lost(context.Context, *lease.Hold, error)                           {}
func (noEvents) Renewed(context.Context, *lease.Hold, time.Time, bool, lease.Reply) {}

// node returns a Node on rdb, as a Locker whose wake channels id names
// makes it, and waits for its background work at the test's end.
func node(t *testing.T, rdb redis.UniversalClient, id string) *Node {
	env := &lease.Env{Events: noEvents{}, Background: &scripts.Background{}}
	n := NewNode(rdb, "", id, env, func(context.Context, string, bool, int) {})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := env.Background.Wait(ctx); err != nil {
			t.Error(err)
		}
		if err := n.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return n
}

// plain is the request of a plain lock on keys.
func plain(keys ...string) *lease.Request {
	return &lease.Request{Keys: keys, Set: len(keys) > 1, TTL: time.Minute, MinBackoff: 8 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
}

// release releases h as Lock.Release does.
func release(ctx context.Context, n *Node, h *lease.Hold) error {
	if !h.BeginRelease() {
		return errors.New("not held")
	}
	return n.Release(ctx, h)
}

// A plain lock, of one key or a set's, is its keys holding the token, and
// nothing else: one attempt takes them, the release deletes them, and
// nothing is left in Redis.
func TestNode_PlainLockIsItsKeysAlone(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := node(t, rdb, "a")
	for _, keys := range [][]string{{"k"}, {"x", "y", "z"}} {
		h, attempts, err := n.Acquire(ctx, plain(keys...))
		if err != nil || attempts != 1 {
			t.Fatalf("%v: %v after %d attempts", keys, err, attempts)
		}
		got, _ := rdb.Keys(ctx, "*").Result()
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Errorf("Redis holds %v, want the keys %v alone", got, keys)
		}
		for _, k := range keys {
			if v := rdb.Get(ctx, k).Val(); v != h.Token {
				t.Errorf("%s holds %q, not the token", k, v)
			}
		}
		if err := release(ctx, n, h); err != nil {
			t.Fatal(err)
		}
		if size := rdb.DBSize(ctx).Val(); size != 0 {
			t.Errorf("%d keys left after the release", size)
		}
	}
}

// A release hands the key to the waiter of another Node (another Locker)
// in the same script: the waiter holds it when its Acquire returns, and the
// line leaves nothing behind once it is released.
func TestNode_ReleaseHandsTheKeyToAnotherNodesWaiter(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := node(t, rdb, "a"), node(t, rdb, "b")
	h, _, err := a.Acquire(ctx, plain("k"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lease.Hold, 1)
	go func() {
		hb, _, err := b.Acquire(ctx, plain("k"))
		if err != nil {
			t.Error(err)
		}
		got <- hb
	}()
	for info, _ := a.Inspect(ctx, "k"); info.Waiting == 0; info, _ = a.Inspect(ctx, "k") {
		time.Sleep(5 * time.Millisecond)
	}
	if err := release(ctx, a, h); err != nil {
		t.Fatal(err)
	}
	hb := <-got
	if hb == nil {
		t.FailNow()
	}
	if v := rdb.Get(ctx, "k").Val(); v != hb.Token {
		t.Errorf("the key holds %q, not the waiter's token", v)
	}
	if err := release(ctx, b, hb); err != nil {
		t.Fatal(err)
	}
	if size := rdb.DBSize(ctx).Val(); size != 0 {
		keys, _ := rdb.Keys(ctx, "*").Result()
		t.Errorf("left in Redis: %v", keys)
	}
}

// slotGroups groups a set's keys by Cluster hash slot, in the order of the
// slots, each group in the caller's order: every set takes the slots in
// one order, which is what keeps sets across slots from deadlocking.
func TestSlotGroups_OrderOfTheSlots(t *testing.T) {
	keys := []string{"{b}2", "{a}1", "{b}1", "{c}", "{a}2"}
	groups := slotGroups(keys)
	if len(groups) != 3 {
		t.Fatalf("%d groups, want one per slot: %v", len(groups), groups)
	}
	for i, g := range groups {
		for _, k := range g {
			if slot(k) != slot(g[0]) {
				t.Errorf("group %v mixes slots", g)
			}
		}
		if i > 0 && slot(groups[i-1][0]) >= slot(g[0]) {
			t.Errorf("groups %v are not in the order of their slots", groups)
		}
	}
	for _, g := range groups {
		if !slices.IsSortedFunc(g, func(x, y string) int { return slices.Index(keys, x) - slices.Index(keys, y) }) {
			t.Errorf("group %v is not in the caller's order %v", g, keys)
		}
	}
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	for i, g := range slotGroups(reversed) {
		if slot(g[0]) != slot(groups[i][0]) {
			t.Errorf("another order of the keys takes the slots in another order: %v, %v", groups, slotGroups(reversed))
		}
	}
}

func slot(key string) uint16 { return scripts.Slot(scripts.HashPart(key)) }
