package tests

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// Specifies Until for a quorum lock (NewQuorum): while time.Now() is
// before Until, a majority of the masters hold the key for the lock's
// token, as read right before; with KeepAlive renewing, Refresh racing it
// with other ttls, and one master frozen (SIGSTOP) then thawed in the
// middle; and no two quorum Lockers hold the key at once.
func TestReview_QuorumUntilWithinMajority(t *testing.T) {
	servers := startMasters(t, 3)
	ctx := ctxT(t, 60*time.Second)
	readers := quorumClients(t, addrsOf(servers))
	h := &reviewHolders{byKey: map[string][]*reviewHeld{}, t: t}
	var lockers []*redislock.Locker
	for range 2 {
		lockers = append(lockers, redislock.NewQuorum(quorumClients(t, addrsOf(servers))))
	}
	end := time.Now().Add(6 * time.Second)
	go func() {
		time.Sleep(2 * time.Second)
		servers[1].Freeze(t)
		time.Sleep(1500 * time.Millisecond)
		servers[1].Thaw(t)
	}()
	var checks, bad int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				octx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				lk, err := l.Obtain(octx, "q", time.Duration(200+rand.N(300))*time.Millisecond)
				cancel()
				if err != nil {
					continue
				}
				h.acquire(lk, false, "quorum"+string(rune('0'+i)))
				kept := lk.KeepAlive(ctx)
				for s := 0; s < 6 && kept.Err() == nil; s++ {
					if rand.N(2) == 0 {
						_ = lk.Refresh(ctx, time.Duration(150+rand.N(400))*time.Millisecond)
					}
					n := 0
					for _, r := range readers {
						rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
						if v, err := r.Get(rctx, "q").Result(); err == nil && v == lk.Token() {
							n++
						}
						rcancel()
					}
					if now := time.Now(); now.Before(lk.Until()) {
						mu.Lock()
						checks++
						if n < 2 {
							bad++
							t.Errorf("%d of 3 masters hold the key %v before Until", n, lk.Until().Sub(now))
						}
						mu.Unlock()
					}
					time.Sleep(time.Duration(rand.N(80)) * time.Millisecond)
				}
				h.release(lk)
				_ = lk.Release(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d checks before Until, %d bad", checks, bad)
	assert.Zero(t, h.violations.Load())
	for _, l := range lockers {
		require.NoError(t, l.Shutdown(ctxT(t, 20*time.Second)))
	}
	for _, r := range readers {
		assert.Zero(t, r.(*redis.Client).Exists(ctx, "q").Val(), "key left on a master")
	}
}
