package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	ours "github.com/seed5e0b76d9/redislock"
)

// impl is one lock implementation in one configuration. lock blocks until the
// lock on key is held or ctx ends (each implementation is made to respect
// ctx's deadline) and returns the function that releases it.
type impl interface {
	name() string
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
}

// leaseTTL is the lease every implementation acquires: redsync's default
// expiry, far longer than any critical section here, so no lease expires.
const leaseTTL = 8 * time.Second

// config names an implementation and builds it on a go-redis client. The
// name is also what a child process is told to run (-child NAME).
type config struct {
	name string
	desc string
	make func(rdb *redis.Client) impl
	// contextTimeout sets ContextTimeoutEnabled on the configuration's lock
	// client (go-redis then stops socket reads at ctx deadlines itself).
	contextTimeout bool
}

// ours reports whether a configuration is this module's rather than a
// peer's.
func (c config) ours() bool { return strings.HasPrefix(c.name, "ours") }

// lockClient returns a client for the configuration's lock operations.
func (c config) lockClient(url string) (*redis.Client, error) {
	opt, err := clientOptions(url)
	if err != nil {
		return nil, err
	}
	opt.ContextTimeoutEnabled = c.contextTimeout
	return redis.NewClient(opt), nil
}

// configs are the configurations compared, in table order.
var configs = []config{
	{"ours", "redislock, default options (a fair line with direct hand-off)", func(rdb *redis.Client) impl {
		return &oursImpl{n: "ours", l: ours.New(rdb)}
	}, false},
	{"ours-ctx-timeout", "redislock, default options, on a client with ContextTimeoutEnabled", func(rdb *redis.Client) impl {
		return &oursImpl{n: "ours-ctx-timeout", l: ours.New(rdb)}
	}, true},
	{"ours-no-cancel", "redislock, default options, called with a ctx that cannot end (context.WithoutCancel): waits until it gets the key; no goroutine per call, Redis calls bounded by go-redis's timeouts as the peers' are", func(rdb *redis.Client) impl {
		return &oursImpl{n: "ours-no-cancel", l: ours.New(rdb), noCancel: true}
	}, false},

	{"bsm-linear-10ms", "bsm/redislock, LinearBackoff(10ms)", func(rdb *redis.Client) impl {
		return &bsmImpl{n: "bsm-linear-10ms", c: bsm.New(rdb), retry: func() bsm.RetryStrategy { return bsm.LinearBackoff(10 * time.Millisecond) }}
	}, false},
	{"bsm-linear-1ms", "bsm/redislock, LinearBackoff(1ms)", func(rdb *redis.Client) impl {
		return &bsmImpl{n: "bsm-linear-1ms", c: bsm.New(rdb), retry: func() bsm.RetryStrategy { return bsm.LinearBackoff(time.Millisecond) }}
	}, false},
	{"bsm-exp-1ms-64ms", "bsm/redislock, ExponentialBackoff(1ms, 64ms) (delays 4,8,16,32,64,64.. ms)", func(rdb *redis.Client) impl {
		// ExponentialBackoff counts its calls: it must be fresh per Obtain.
		return &bsmImpl{n: "bsm-exp-1ms-64ms", c: bsm.New(rdb), retry: func() bsm.RetryStrategy { return bsm.ExponentialBackoff(time.Millisecond, 64*time.Millisecond) }}
	}, false},
	{"redsync-default", "redsync, default options (32 tries, delay rand 50..250ms)", func(rdb *redis.Client) impl {
		return &redsyncImpl{n: "redsync-default", rs: redsync.New(redsyncgoredis.NewPool(rdb))}
	}, false},
	{"redsync-delay-1ms", "redsync, WithRetryDelay(1ms), WithTries(MaxInt32)", func(rdb *redis.Client) impl {
		return &redsyncImpl{n: "redsync-delay-1ms", rs: redsync.New(redsyncgoredis.NewPool(rdb)),
			opts: []redsync.Option{redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32)}}
	}, false},

	{nativeName, nativeDesc + "; uncontended cycles only", func(rdb *redis.Client) impl {
		return nativeImpl{rdb}
	}, false},
}

// findConfig returns the configuration called name.
func findConfig(name string) (config, error) {
	var names []string
	for _, c := range configs {
		if c.name == name {
			return c, nil
		}
		names = append(names, c.name)
	}
	return config{}, fmt.Errorf("unknown implementation %q (have %s)", name, strings.Join(names, ", "))
}

// oursImpl adapts github.com/seed5e0b76d9/redislock.
type oursImpl struct {
	n string
	l *ours.Locker
	// noCancel calls with a ctx that cannot end (no bound on the wait):
	// the library then runs its Redis calls on the caller's goroutine
	// (see ours.New).
	noCancel bool
}

func (o *oursImpl) name() string { return o.n }

func (o *oursImpl) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	if o.noCancel {
		return o.lockNoCancel(ctx, key)
	}
	lk, err := o.l.Obtain(ctx, key, leaseTTL)
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// lockMulti takes keys as one lock with ObtainMulti: it waits in each
// key's line, until ctx's deadline (or, noCancel, until it gets them).
func (o *oursImpl) lockMulti(ctx context.Context, keys []string) (func(context.Context) error, error) {
	if o.noCancel {
		lk, err := o.l.ObtainMulti(context.WithoutCancel(ctx), keys, leaseTTL)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return lk.Release(context.WithoutCancel(ctx)) }, nil
	}
	lk, err := o.l.ObtainMulti(ctx, keys, leaseTTL)
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// lockNoCancel waits for the key until it gets it, with a ctx that cannot
// end.
func (o *oursImpl) lockNoCancel(ctx context.Context, key string) (func(context.Context) error, error) {
	lk, err := o.l.Obtain(context.WithoutCancel(ctx), key, leaseTTL)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return lk.Release(context.WithoutCancel(ctx)) }, nil
}

// bsmImpl adapts github.com/bsm/redislock. Obtain retries per its
// RetryStrategy until ctx's deadline.
type bsmImpl struct {
	n     string
	c     *bsm.Client
	retry func() bsm.RetryStrategy
}

func (b *bsmImpl) name() string { return b.n }

func (b *bsmImpl) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lk, err := b.c.Obtain(ctx, key, leaseTTL, &bsm.Options{RetryStrategy: b.retry()})
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// lockMulti takes keys as one lock with ObtainMulti (one script over all
// the keys, all or none), retrying per the RetryStrategy until ctx's
// deadline.
func (b *bsmImpl) lockMulti(ctx context.Context, keys []string) (func(context.Context) error, error) {
	lk, err := b.c.ObtainMulti(ctx, keys, leaseTTL, &bsm.Options{RetryStrategy: b.retry()})
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// redsyncImpl adapts github.com/go-redsync/redsync/v4 with a single pool. A
// Mutex holds the state of one acquisition, so each lock makes a new one.
type redsyncImpl struct {
	n    string
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (r *redsyncImpl) name() string { return r.n }

func (r *redsyncImpl) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = redsync.ErrFailed
		}
		return err
	}, nil
}
