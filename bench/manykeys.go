package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	ours "github.com/seed5e0b76d9/redislock"
)

// manyKeysSetup is the name of the many-keys setup in -setups: -mk-workers
// goroutines of the bench each take and release a lock on a random key out of
// -mk-keys, again and again, for -duration. Two workers rarely want the same
// key: this is the common case of per-order or per-message locks.
const manyKeysSetup = "many-keys"

// mkImpl is an implementation of the many-keys setup, taking one lock once
// (or with its default wait), on any go-redis client.
type mkImpl struct {
	name string
	desc string
	make func(rdb redis.UniversalClient) impl
}

// mkImpls are the implementations of the many-keys setup, in table order;
// the floor is no lock at all, nativeName a release by DELIFEQ (skipped on
// a server without it).
var mkImpls = []mkImpl{
	{"ours", "redislock: Locker.Obtain (default options: waits for a held key until ctx's deadline), Lock.Release", func(rdb redis.UniversalClient) impl {
		return &oursImpl{n: "ours", l: ours.New(rdb)}
	}},
	{"ours-no-cancel", "redislock: as ours, with a ctx that cannot end (context.WithoutCancel): waits for a held key until it gets it; no goroutine per call", func(rdb redis.UniversalClient) impl {
		return &oursImpl{n: "ours-no-cancel", l: ours.New(rdb), noCancel: true}
	}},
	{"bsm", "bsm/redislock: Obtain with NoRetry (fails at once on a held key), Lock.Release", func(rdb redis.UniversalClient) impl {
		return &bsmImpl{n: "bsm", c: bsm.New(rdb), retry: bsm.NoRetry}
	}},
	{"redsync", "redsync: Mutex.LockContext, default options (32 tries, 50..250ms apart), UnlockContext", func(rdb redis.UniversalClient) impl {
		return &redsyncImpl{n: "redsync", rs: redsync.New(redsyncgoredis.NewPool(rdb))}
	}},
	{"floor", "no lock: SET key token PX 8000 NX, then DEL key; the most any lock could do", func(rdb redis.UniversalClient) impl {
		return floorImpl{rdb}
	}},
	{nativeName, nativeDesc, func(rdb redis.UniversalClient) impl {
		return nativeImpl{rdb}
	}},
}

// mkConfig is a configuration of the many-keys setup: an implementation on
// a plain *redis.Client, or on that client's AutoPipeliner.
type mkConfig struct {
	impl mkImpl
	auto bool
}

// name is the implementation's name with the client kind: "ours/plain",
// "ours/auto".
func (c mkConfig) name() string { return c.impl.name + "/" + c.kind() }

// kind names the client: "plain" or "auto".
func (c mkConfig) kind() string {
	if c.auto {
		return "auto"
	}
	return "plain"
}

// ours reports whether the configuration is this module's.
func (c mkConfig) ours() bool { return strings.HasPrefix(c.impl.name, "ours") }

// peer reports whether the configuration is another library's (not ours,
// not the floor, not nativeName's).
func (c mkConfig) peer() bool {
	return !c.ours() && c.impl.name != "floor" && c.impl.name != nativeName
}

// mkConfigs returns every configuration of the many-keys setup, in table
// order: each implementation on a plain client, then on an AutoPipeliner.
func mkConfigs() []mkConfig {
	var out []mkConfig
	for _, im := range mkImpls {
		out = append(out, mkConfig{impl: im}, mkConfig{impl: im, auto: true})
	}
	return out
}

// floorImpl is no lock: SET key token PX ttl NX, then DEL key (no check of
// the token). Both commands go through Process, so that an AutoPipeliner
// batches them.
type floorImpl struct{ rdb redis.UniversalClient }

// floorTokens makes the floor's tokens unique at no cost.
var floorTokens atomic.Uint64

// errFloorTaken is the floor's "not obtained": SET NX found the key.
var errFloorTaken = errors.New("floor: key taken")

func (f floorImpl) name() string { return "floor" }

func (f floorImpl) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	token := strconv.FormatUint(floorTokens.Add(1), 36)
	set := redis.NewBoolCmd(ctx, "set", key, token, "px", leaseTTL.Milliseconds(), "nx")
	if err := f.rdb.Process(ctx, set); err != nil {
		return nil, err
	}
	if !set.Val() {
		return nil, errFloorTaken
	}
	return func(ctx context.Context) error {
		return f.rdb.Process(ctx, redis.NewIntCmd(ctx, "del", key))
	}, nil
}

// isNotObtained reports whether a lock call failed because another holder
// had the key, as each implementation says it.
func isNotObtained(err error) bool {
	var taken *redsync.ErrTaken
	return errors.Is(err, ours.ErrNotObtained) || errors.Is(err, bsm.ErrNotObtained) ||
		errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.Is(err, errFloorTaken) || errors.Is(err, errNativeTaken)
}

// mkKeys returns the n keys of the many-keys setup, named prefix0 to
// prefix<n-1>.
func mkKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// cycler is what one worker of a many-keys run did.
type cycler struct {
	latencies   []int64 // of its successful cycles, nanoseconds
	inWindow    int     // successful cycles that ended within the run's duration
	notObtained int     // cycles that found the key held by another worker (and did not wait for it)
	failed      int     // cycles that ended in an error: of the lock call (timeouts at -bound included) or the release
	errors      []string
}

// runCycles runs workers goroutines, each taking and releasing the lock on a
// random key out of keys again and again until d has passed (a cycle begun
// before that runs to its end), and returns what they did.
func runCycles(ctx context.Context, im impl, keys []string, workers int, d, bound time.Duration) []cycler {
	out := make([]cycler, workers)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { out[i].run(ctx, im, keys, end, bound) })
	}
	wg.Wait()
	return out
}

// run cycles on random keys until end or until ctx (the whole bench) is
// cancelled.
func (c *cycler) run(ctx context.Context, im impl, keys []string, end time.Time, bound time.Duration) {
	for ctx.Err() == nil && time.Now().Before(end) {
		key := keys[rand.IntN(len(keys))]
		begun := time.Now()
		held, err := cycle(ctx, im, key, bound)
		switch {
		case err == nil:
			done := time.Now()
			c.latencies = append(c.latencies, int64(done.Sub(begun)))
			if !done.After(end) {
				c.inWindow++
			}
		case ctx.Err() != nil: // interrupted
		case held:
			c.notObtained++
		default:
			c.failed++
			c.errors = keepError(c.errors, err.Error(), 3)
		}
	}
}
