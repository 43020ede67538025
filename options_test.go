package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/seed5e0b76d9/redislock"
)

// WithReplicas's longest timeout on a client with go-redis's default
// ReadTimeout is the one its godoc gives for that go-redis: 2.7s where the
// default is 3s (before v9.22: the library's go.mod floor, where this
// module's tests run), 4.5s where it is 5s (CI runs them at the latest
// too). One millisecond more is ErrInvalidOption before anything is sent;
// the longest is accepted (the call then fails on the address nobody
// listens at, not on the option).
func TestWithReplicas_LongestTimeoutWithTheDefaultReadTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	longest := map[time.Duration]time.Duration{3 * time.Second: 2700 * time.Millisecond, 5 * time.Second: 4500 * time.Millisecond}[rdb.Options().ReadTimeout]
	if longest == 0 {
		t.Fatalf("go-redis's default ReadTimeout is %v, the godoc gives 3s and 5s", rdb.Options().ReadTimeout)
	}
	ctx := context.Background()
	_, err := redislock.New(rdb, redislock.WithReplicas(1, longest+time.Millisecond)).TryObtain(ctx, "k", time.Second)
	if !errors.Is(err, redislock.ErrInvalidOption) {
		t.Errorf("WithReplicas(1, %v): %v, want ErrInvalidOption", longest+time.Millisecond, err)
	}
	_, err = redislock.New(rdb, redislock.WithReplicas(1, longest)).TryObtain(ctx, "k", time.Second)
	if err == nil || errors.Is(err, redislock.ErrInvalidOption) {
		t.Errorf("WithReplicas(1, %v): %v, want the dial's error", longest, err)
	}
}
