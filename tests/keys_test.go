package tests

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// The names of the keys the library keeps beside a lock key, computed
// here from the layout keys.go documents (layout rl1, no namespace): the
// package does not export them. TestKeys_NamesAsWritten checks them
// against the keys the library writes.

// sideKey returns the name of the side key of kind ("line", "places",
// "gens", "holders", "spent:<token>") of the lock on key, without a
// namespace: {<hash part of key>}:rl1:<kind>:<key>, in the key's hash
// slot; a hash part that holds "}" cannot be a tag, and is replaced by
// another tag of the same slot (see keyspace.side).
func sideKey(key, kind string) string {
	h := hashPart(key)
	if strings.Contains(h, "}") {
		h = slotTag(slot(h))
	}
	return "{" + h + "}:rl1:" + kind + ":" + key
}

// fenceKey returns the fence counter of the lock on key, without a
// namespace: one per hash slot, {<slot tag>}:rl1:fence (see
// keyspace.fence).
func fenceKey(key string) string {
	return "{" + slotTag(slot(hashPart(key))) + "}:rl1:fence"
}

// hashPart returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the first "}" after it, if that is not empty,
// else the whole key.
func hashPart(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// slot returns the Redis Cluster hash slot of a hash part: CRC16 (XMODEM)
// modulo 16384.
func slot(h string) uint16 {
	var crc uint16
	for i := 0; i < len(h); i++ {
		crc ^= uint16(h[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// slotTags holds, for each hash slot, the shortest decimal number that
// hashes to it.
var slotTags = sync.OnceValue(func() *[16384]string {
	var tags [16384]string
	for i, left := 0, len(tags); left > 0; i++ {
		t := strconv.Itoa(i)
		if s := slot(t); tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return &tags
})

// slotTag returns the tag of the fence counter of slot s, and of the side
// keys of a key whose hash part holds "}".
func slotTag(s uint16) string { return slotTags()[s] }

// The names sideKey and fenceKey give are those of the keys the library
// writes: with a holder (described, fenced, its lease changed by Refresh)
// and a waiter in line, Redis holds the lock key, its line, places, gens
// and holders keys, and its slot's fence counter, and nothing else; for
// plain keys, keys with a hash tag, and keys whose hash part holds "}".
func TestKeys_NamesAsWritten(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 20*time.Second)
	rdb, _ := b.client(t)
	for _, key := range []string{"k", "order:42", "{user:1}:cart", "a{}b", "{}x}", "x{a}}y"} {
		holder, err := redislock.New(rdb, redislock.WithHolder("h")).Obtain(ctx, key, time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		require.NoError(t, holder.Refresh(ctx, 2*time.Minute))
		wctx, cancel := context.WithCancel(ctx)
		waiter := redislock.New(rdb)
		ch := obtainAsync(wctx, waiter, key, time.Minute)
		want := []string{key, sideKey(key, "line"), sideKey(key, "places"), sideKey(key, "gens"), sideKey(key, "holders"), fenceKey(key)}
		slices.Sort(want)
		var got []string
		require.Eventually(t, func() bool {
			got = rdb.Keys(ctx, "*").Val()
			slices.Sort(got)
			return slices.Equal(got, want)
		}, 5*time.Second, 5*time.Millisecond, "key %q: keys in Redis %q, want %q", key, got, want)
		cancel()
		require.ErrorIs(t, (<-ch).err, context.Canceled)
		require.NoError(t, waiter.Shutdown(ctx))
		require.NoError(t, holder.Release(ctx))
		require.NoError(t, rdb.FlushAll(ctx).Err())
	}
}

// slot is CRC16 (XMODEM) modulo 16384, as the Redis Cluster specification
// gives it (TestDeploy_Cluster checks that the side keys are in their lock
// key's slot on a real Cluster).
func TestKeys_Slot(t *testing.T) {
	for key, want := range map[string]uint16{"123456789": 0x31C3 % 16384, "foo": 12182, "bar": 5061, "": 0} {
		assert.Equal(t, want, slot(key), "slot(%q)", key)
	}
	assert.Equal(t, slot(hashPart("{}x}")), slot(hashPart(sideKey("{}x}", "line"))), "a side key is in its lock key's slot")
	assert.Equal(t, slot(hashPart("{user:1}:cart")), slot(hashPart(fenceKey("{user:1}:cart"))), "the fence counter is in its lock key's slot")
}

// The names of the side keys are the library's: a lock key that is one
// ("...}:rl1:...") is ErrInvalidKey (TestBadInputTable), and data a user
// puts under such a name may be changed. Still, nothing there is deleted
// as a whole: a string or a hash at the holders or gens name stays as it
// was through a fenced Obtain, a hand-off to a waiter and a reader's
// Obtain (none of them described); a hash at the line name makes an Obtain
// fail at once with ErrWrongKind, without script internals in the error,
// and stays as it was.
func TestKeys_UserDataAtSideKeyNames(t *testing.T) {
	b := realBackend(t)
	ctx := ctxT(t, 60*time.Second)
	rdb, _ := b.client(t)
	a, c := redislock.New(rdb), redislock.New(rdb)
	for _, kind := range []string{"holders", "gens"} {
		for _, hash := range []bool{false, true} {
			require.NoError(t, rdb.FlushAll(ctx).Err())
			name := sideKey("k", kind)
			if hash {
				require.NoError(t, rdb.HSet(ctx, name, "field", "user data").Err())
			} else {
				require.NoError(t, rdb.Set(ctx, name, "user data", 0).Err())
			}
			before := rdb.Dump(ctx, name).Val()

			lk, err := c.Obtain(ctx, "k", time.Minute, redislock.WithFencing())
			require.NoError(t, err)
			w := obtainAsync(ctx, a, "k", time.Minute)
			waitQueued(t, rdb, "k", 1)
			require.NoError(t, lk.Release(ctx))
			o := <-w
			require.NoError(t, o.err)
			require.NoError(t, o.lock.Release(ctx))
			lk, err = c.Obtain(ctx, "k", time.Minute, redislock.WithShared())
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))

			assert.Equal(t, before, rdb.Dump(ctx, name).Val(), "%s (hash %v) changed", name, hash)
			assert.Equal(t, time.Duration(-1), rdb.PTTL(ctx, name).Val(), "%s (hash %v) got an expiry", name, hash)
		}
	}
	for _, kind := range []string{"line"} {
		require.NoError(t, rdb.FlushAll(ctx).Err())
		name := sideKey("k", kind)
		require.NoError(t, rdb.HSet(ctx, name, "field", "user data").Err())
		lk, err := c.Obtain(ctx, "k", time.Minute, redislock.WithFencing())
		if err == nil { // the key was free: a waiter must use the line
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = a.Obtain(wctx, "k", time.Minute)
			cancel()
			require.NoError(t, lk.Release(ctx))
		}
		require.ErrorIs(t, err, redislock.ErrWrongKind, kind)
		assert.NotContains(t, err.Error(), "script", kind)
		assert.Equal(t, map[string]string{"field": "user data"}, rdb.HGetAll(ctx, name).Val(), kind)
		assert.Equal(t, time.Duration(-1), rdb.PTTL(ctx, name).Val(), kind)
	}
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, c.Shutdown(ctx))
}
