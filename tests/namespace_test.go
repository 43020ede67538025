package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// A Redis ACL user limited to the keys and channels of a prefix (~app:*
// and &app:*), with the commands WithNamespace's doc lists and no others,
// cannot use a Locker without a namespace (its side keys are
// outside the prefix: NOPERM), and can use every feature of a Locker made
// WithNamespace("app:"): plain locks, waiting (hand-offs announced on a
// channel of the prefix), fencing, kept leases, readers, permits and
// Inspect; every key the library wrote is under the prefix, and Lock.Key
// is the key as given.
func TestNamespace_ACLUserLimitedToAPrefix(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	admin, _ := b.client(t)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">secret", "resetkeys", "~app:*", "resetchannels", "&app:*",
		"-@all", "+@scripting", "+@read", "+@write", "+@pubsub", "+time", "+wait").Err())
	user := func() *redis.Client {
		c, _ := b.client(t, func(o *redis.Options) { o.Username, o.Password = "app", "secret" })
		return c
	}
	require.NoError(t, user().Set(ctx, "app:plain-set", "v", time.Minute).Err(), "the user may write its keys")
	_, err := redislock.New(user()).TryObtain(ctx, "app:a", time.Minute)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOPERM", "without a namespace, the side keys are outside the user's keys")

	ns := redislock.WithNamespace("app:")
	a, b2 := redislock.New(user(), ns, redislock.WithFencing()), redislock.New(user(), ns, redislock.WithFencing())
	lk, err := a.TryObtain(ctx, "a", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "a", lk.Key())
	assert.Equal(t, lk.Token(), admin.Get(ctx, "app:a").Val())
	waiter := obtainAsync(ctx, b2, "a", time.Minute)
	waitWaiting(t, a, "a", 1)
	kept := lk.KeepAlive(ctx)
	require.NoError(t, lk.Release(ctx))
	require.Error(t, kept.Err())
	r := <-waiter
	require.NoError(t, r.err, "handed over on the namespace's channel")
	assert.Greater(t, r.lock.Fence(), lk.Fence())
	info, err := a.Inspect(ctx, "a")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	assert.Equal(t, r.lock.Token(), info.Holders[0].Token)
	require.NoError(t, r.lock.Release(ctx))

	reader, err := a.Obtain(ctx, "doc", time.Minute, redislock.WithShared())
	require.NoError(t, err)
	writer := obtainAsync(ctx, b2, "doc", time.Minute)
	waitWaiting(t, a, "doc", 1)
	require.NoError(t, reader.Release(ctx))
	w := <-writer
	require.NoError(t, w.err)
	require.NoError(t, w.lock.Release(ctx))
	permit, err := a.Obtain(ctx, "pool", time.Minute, redislock.WithPermits(2))
	require.NoError(t, err)
	require.NoError(t, permit.Release(ctx))
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, b2.Shutdown(ctx))

	for _, k := range admin.Keys(ctx, "*").Val() {
		assert.True(t, strings.HasPrefix(k, "app:"), "key %q outside the namespace", k)
	}
}

// A namespace is the Locker's: Lockers of two namespaces lock different
// Redis keys for the same key, and do not see each other's holders.
func TestNamespace_SeparatesLockers(t *testing.T) {
	b := miniBackend(t)
	ctx := context.Background()
	rdb, _ := b.client(t)
	x, err := redislock.New(rdb, redislock.WithNamespace("x:")).TryObtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	y, err := redislock.New(rdb, redislock.WithNamespace("y:")).TryObtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"x:k", "y:k"}, rdb.Keys(ctx, "*").Val())
	require.NoError(t, x.Release(ctx))
	require.NoError(t, y.Release(ctx))
}

// waitWaiting waits until n places wait in key's line, as l's Inspect sees it.
func waitWaiting(t *testing.T, l *redislock.Locker, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := l.Inspect(context.Background(), key)
		return err == nil && info.Waiting == n
	}, 5*time.Second, 5*time.Millisecond, "%d places in line", n)
}
