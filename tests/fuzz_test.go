package tests

// Fuzz tests for everything that builds keys and values: lock keys of any
// bytes, the tokens stored in them, values that differ from a token by a
// little, and fenced writes. Their seed corpora run in every `go test`; fuzz
// one with e.g.
//
//	go test -run '^$' -fuzz '^FuzzLockKey$' -fuzztime 60s .

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed5e0b76d9/redislock"
)

// fuzzRedis returns a miniredis shared by the iterations of one fuzz target,
// and a client of it with a command counter.
func fuzzRedis(f *testing.F) (*miniredis.Miniredis, *redis.Client, *counter) {
	mr := miniredis.RunT(f)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = rdb.Close() })
	n := &counter{}
	rdb.AddHook(n)
	return mr, rdb, n
}

var keySeeds = []string{
	"order:42", "k", " ", "{", "}", "{}", "{user:1}:cart", "a{b}c{d}", "}{", "{{}}",
	"\x00", "\x00\x00{\x00}", "\xff\xfe\xfd", "key with spaces\r\nand lines",
	"*3\r\n$3\r\nDEL\r\n$1\r\nk\r\n", // a RESP request as a key
	"🔒:résumé", "%s%d%%", "*", "?", "[a-z]", `\`, `"`, "'", "redislock:fence",
	"{x}:redislock:fence", strings.Repeat("k", 1<<16), strings.Repeat("{}", 4096),
}

// Any non-empty key can be locked: the key holds the token ("rl1:" and 22
// base64url characters, 128 bits) with the lease as its ttl and nothing
// else is written, a second acquire fails, Refresh and TTL work, Release
// leaves nothing behind. With WithHolder, the description goes with the
// lease. With fencing, the fence counter of the key's slot (which never
// expires) is the only key left. The empty key is refused without a
// command.
func FuzzLockKey(f *testing.F) {
	for _, k := range keySeeds {
		f.Add(k)
	}
	f.Add("")
	mr, rdb, n := fuzzRedis(f)
	locker := redislock.New(rdb)
	f.Fuzz(func(t *testing.T, key string) {
		mr.FlushAll()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if key == "" || strings.Contains(key, "}:rl1:") { // no key, or the library's own
			before := n.Load()
			_, err := locker.Obtain(ctx, key, time.Minute)
			require.ErrorIs(t, err, redislock.ErrInvalidKey)
			require.Equal(t, before, n.Load())
			return
		}

		lk, err := locker.Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		require.Equal(t, key, lk.Key())
		raw, ok := strings.CutPrefix(lk.Token(), "rl1:")
		require.True(t, ok, "token %q", lk.Token())
		tok, err := base64.RawURLEncoding.DecodeString(raw)
		require.NoError(t, err, "token %q", lk.Token())
		require.Len(t, tok, 16)
		require.Equal(t, raw, base64.RawURLEncoding.EncodeToString(tok))
		require.Equal(t, lk.Token(), rdb.Get(ctx, key).Val(), "the key holds the token")
		require.Equal(t, int64(1), rdb.DBSize(ctx).Val(), "the lock key alone is written")
		pttl := rdb.PTTL(ctx, key).Val()
		require.Positive(t, pttl)
		require.LessOrEqual(t, pttl, time.Minute)

		_, err = locker.TryObtain(ctx, key, time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		require.NoError(t, lk.Refresh(ctx, 2*time.Minute))
		ttl, err := lk.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Minute)
		require.Equal(t, lk.Token(), rdb.Get(ctx, key).Val())

		require.NoError(t, lk.Release(ctx))
		require.Equal(t, int64(0), rdb.DBSize(ctx).Val(), "release leaves nothing behind")
		require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)

		described, err := redislock.New(rdb, redislock.WithHolder("web-3 pid 4711")).Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		holders := sideKey(key, "holders")
		require.Equal(t, "web-3 pid 4711", rdb.HGet(ctx, holders, described.Token()).Val())
		require.LessOrEqual(t, rdb.PTTL(ctx, holders).Val(), rdb.PTTL(ctx, key).Val(), "the description goes with the lease")
		require.NoError(t, described.Release(ctx))
		require.Equal(t, int64(0), rdb.DBSize(ctx).Val(), "release leaves nothing behind")
		require.NoError(t, rdb.FlushAll(ctx).Err())

		fenced, err := locker.Obtain(ctx, key, time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		require.Equal(t, int64(1), fenced.Fence())
		require.Equal(t, fenced.Token(), rdb.Get(ctx, key).Val())
		require.Equal(t, int64(2), rdb.DBSize(ctx).Val(), "the lock and its slot's fence counter")
		require.NoError(t, fenced.Release(ctx))
		keys := withoutMarks(t, rdb, rdb.Keys(ctx, "*").Val())
		require.Len(t, keys, 1)
		require.NotEqual(t, key, keys[0])
		require.Equal(t, fenceKey(key), keys[0])
		require.Equal(t, time.Duration(-1), rdb.PTTL(ctx, keys[0]).Val(), "the fence counter never expires")
		require.Equal(t, "1", rdb.Get(ctx, keys[0]).Val())
		again, err := locker.Obtain(ctx, key, time.Minute, redislock.WithFencing())
		require.NoError(t, err)
		require.Equal(t, int64(2), again.Fence())
	})
}

// A lock whose key was overwritten with another value (a new owner's, or
// anything else) is not held: Refresh, TTL and Release say ErrNotHeld and
// leave the value and its ttl alone, and nobody else obtains the key. The
// value is the lock's own token with a part cut out and other bytes put in,
// so it is often a near miss (a prefix, an extension, one byte changed).
func FuzzForeignValue(f *testing.F) {
	f.Add("k", uint8(0), uint8(0), "x")
	f.Add("k", uint8(0), uint8(21), "")
	f.Add("k", uint8(22), uint8(22), "\x00")
	f.Add("k", uint8(21), uint8(22), "")
	f.Add("k", uint8(5), uint8(6), "A")
	f.Add("{k}", uint8(0), uint8(22), "")
	f.Add("k", uint8(11), uint8(11), strings.Repeat("\xff", 1000))
	mr, rdb, _ := fuzzRedis(f)
	locker := redislock.New(rdb)
	f.Fuzz(func(t *testing.T, key string, from, to uint8, insert string) {
		if key == "" {
			return
		}
		mr.FlushAll()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lk, err := locker.Obtain(ctx, key, time.Minute)
		require.NoError(t, err)
		tok := lk.Token()
		i, j := min(int(from), len(tok)), min(int(to), len(tok))
		if i > j {
			i, j = j, i
		}
		value := tok[:i] + insert + tok[j:]
		if value == tok {
			return
		}
		require.NoError(t, rdb.Set(ctx, key, value, time.Hour).Err())

		require.ErrorIs(t, lk.Refresh(ctx, 2*time.Hour), redislock.ErrNotHeld)
		_, err = lk.TTL(ctx)
		require.ErrorIs(t, err, redislock.ErrNotHeld)
		_, err = locker.TryObtain(ctx, key, time.Minute)
		require.ErrorIs(t, err, redislock.ErrNotObtained)
		require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
		require.Equal(t, value, rdb.Get(ctx, key).Val(), "the foreign value was changed")
		pttl := rdb.PTTL(ctx, key).Val()
		require.Greater(t, pttl, 59*time.Minute)
		require.LessOrEqual(t, pttl, time.Hour, "the foreign value's ttl was extended")
	})
}

// maxExactFence is the largest fence that Lua (doubles) compares exactly.
const maxExactFence = 1 << 53

// SetFenced with any key, values and fences: the first write is accepted, a
// second one is accepted when its fence is at least the first's and rejected
// (ErrFenceRejected, nothing changed) otherwise; invalid input is refused
// without a command.
func FuzzSetFenced(f *testing.F) {
	f.Add("res", "v1", int64(1), "v2", int64(2))
	f.Add("res", "v1", int64(5), "v2", int64(4))
	f.Add("res", "v1", int64(7), "v2", int64(7))
	f.Add("res", "", int64(1), "", int64(1))
	f.Add("", "v", int64(1), "v", int64(1))
	f.Add("res", "v", int64(0), "v", int64(1))
	f.Add("res", "v", int64(1), "v", int64(-1))
	f.Add("{res}", "\x00\xff", int64(maxExactFence), "x", int64(maxExactFence-1))
	f.Add("res", strings.Repeat("v", 1<<16), int64(1)<<40, "w", int64(1)<<40+1)
	f.Add("res", "value\r\nwith lines", int64(10), "*1\r\n$4\r\nPING\r\n", int64(9))
	mr, rdb, n := fuzzRedis(f)
	f.Fuzz(func(t *testing.T, key, v1 string, f1 int64, v2 string, f2 int64) {
		mr.FlushAll()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		set := func(v string, fence int64) error {
			before := n.Load()
			err := redislock.SetFenced(ctx, rdb, key, v, fence)
			switch {
			case key == "":
				require.ErrorIs(t, err, redislock.ErrInvalidKey)
			case fence < 1:
				require.ErrorIs(t, err, redislock.ErrInvalidOption)
			default:
				return err
			}
			require.Equal(t, before, n.Load(), "invalid input reached Redis")
			return err
		}
		if key == "" || f1 < 1 || f1 > maxExactFence {
			require.Error(t, set(v1, f1))
			return
		}
		require.NoError(t, set(v1, f1))
		require.Equal(t, map[string]string{"value": v1, "fence": strconv.FormatInt(f1, 10)}, rdb.HGetAll(ctx, key).Val())

		err := set(v2, f2)
		switch {
		case f2 < 1 || f2 > maxExactFence:
			require.ErrorIs(t, err, redislock.ErrInvalidOption)
		case f2 >= f1:
			require.NoError(t, err)
			require.Equal(t, map[string]string{"value": v2, "fence": strconv.FormatInt(f2, 10)}, rdb.HGetAll(ctx, key).Val())
			return
		default:
			require.ErrorIs(t, err, redislock.ErrFenceRejected)
			require.False(t, errors.Is(err, redislock.ErrInvalidOption))
		}
		require.Equal(t, map[string]string{"value": v1, "fence": strconv.FormatInt(f1, 10)}, rdb.HGetAll(ctx, key).Val(), "a rejected write changed the resource")
	})
}

// Lua compares fences as doubles, which cannot tell 2^53 from 2^53+1:
// SetFenced rejects fences above 2^53 (INCR never gets there) rather than
// misorder them.
func TestSetFencedHugeFences(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := ctxT(t, 5*time.Second)
		rdb, n := b.client(t)
		require.NoError(t, redislock.SetFenced(ctx, rdb, "res", "top", maxExactFence))
		before := n.Load()
		assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "res", "over", maxExactFence+1), redislock.ErrInvalidOption)
		assert.Equal(t, before, n.Load(), "rejected before any command")
		assert.ErrorIs(t, redislock.SetFenced(ctx, rdb, "res", "stale", maxExactFence-1), redislock.ErrFenceRejected)
		assert.Equal(t, map[string]string{"value": "top", "fence": strconv.FormatInt(maxExactFence, 10)}, rdb.HGetAll(ctx, "res").Val())
	})
}
