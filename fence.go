package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrFenceRejected is returned by SetFenced when the resource has already
// been written with a higher fence: a later holder of the lock has taken
// over, and this writer's lease has expired. The write did not happen.
var ErrFenceRejected = errors.New("redislock: write rejected: a newer lock holder has written with a higher fence")

// WithFencing makes acquisitions issue fencing tokens (see Lock.Fence). Give
// it to New to fence every acquisition of the Locker. Fenced acquisitions
// run a Lua script that sets the lock and increments a counter in one atomic
// step, instead of a plain SET.
//
// The counter is the key "{<hash part of the lock key>}:redislock:fence"
// (see fenceKey), in the lock key's Redis Cluster hash slot. It has no
// expiry and is never reset, so fences keep growing across releases and
// expiries; lock keys with the same hash tag share one counter, which keeps
// each key's fences increasing. Deleting the counter restarts the fences at
// 1: only do it together with the fences stored by the protected resources.
//
// Replication is asynchronous: after a failover the new primary may have
// missed the latest increments and issue a fence that was already issued.
// A resource that accepts fences equal to the highest it has seen (as
// SetFenced does) may then accept writes of two holders. Where that matters,
// run Redis with persistence and without automatic failover, or let the
// resource reject equal fences.
func WithFencing() Option {
	return func(o *options) { o.fencing = true }
}

// Fence returns the fencing token of this acquisition: a number greater than
// every fence issued before for this key, by any Locker in any process. It is
// 0 when the lock was obtained without WithFencing.
//
// Pass it along with every write to the resource the lock protects, and
// have the resource reject writes whose fence is lower than the highest it
// has seen. A holder whose lease expired during a pause (GC, a stopped VM)
// still believes it holds the lock; its fence is lower than the next
// holder's, so its late writes are rejected. For a SQL row:
//
//	UPDATE stock SET count = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// and treat "0 rows updated" as ErrFenceRejected. For a value in Redis, use
// SetFenced.
func (lk *Lock) Fence() int64 { return lk.fence }

// SetFenced writes value to the resource at key if fence is at least the
// highest fence the resource has been written with, and records fence as
// that highest one. Otherwise it returns an error wrapping ErrFenceRejected
// and writes nothing. The resource is a Redis hash with the fields "value"
// and "fence"; read it with HGET key value. fence must be at least 1 (a Fence
// of a Lock obtained WithFencing); key must not be empty.
//
// SetFenced uses client directly: the resource may live on another Redis
// than the locks.
func SetFenced(ctx context.Context, client redis.UniversalClient, key, value string, fence int64) error {
	switch {
	case client == nil:
		return ErrNilClient
	case key == "":
		return ErrInvalidKey
	case fence < 1:
		return fmt.Errorf("%w: fence %d: obtain the lock WithFencing and pass Lock.Fence()", ErrInvalidOption, fence)
	}
	res, err := bounded(ctx, func(ctx context.Context) ([]int64, error) {
		return fencedSetScript.Run(ctx, client, []string{key}, value, fence).Int64Slice()
	}, nil)
	if err != nil {
		return err
	}
	if res[0] == 0 {
		return fmt.Errorf("%w (%q: fence %d < %d)", ErrFenceRejected, key, fence, res[1])
	}
	return nil
}

// acquireFenced is the fenced form of one acquire attempt: it returns the new
// fence, or 0 when another holder has the key.
func (l *Locker) acquireFenced(ctx context.Context, lk *Lock, ttl int64) (int64, error) {
	return acquireFencedScript.Run(ctx, l.client, []string{lk.key, fenceKey(lk.key)}, lk.token, ttl).Int64()
}

// fenceKey returns the key of the fence counter for the lock key key. Redis
// Cluster requires both keys of the acquire script in one hash slot: the
// counter's hash tag is the part of key that Redis hashes. Where that part
// contains "}" it cannot be a tag; a tag of the same slot is used instead.
func fenceKey(key string) string {
	h := hashPart(key)
	if strings.Contains(h, "}") {
		h = slotTag(slot(h))
	}
	return "{" + h + "}:redislock:fence"
}

// hashPart returns the part of key that Redis Cluster hashes to find its
// slot: the text between the first "{" and the first "}" after it, if that is
// not empty, else the whole key.
func hashPart(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// slot returns the Redis Cluster hash slot of a key's hash part: CRC16
// (XMODEM) modulo 16384.
func slot(h string) uint16 {
	var crc uint16
	for i := 0; i < len(h); i++ {
		crc ^= uint16(h[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

var slotTags sync.Map // slot (uint16) -> tag (string)

// slotTag returns a short tag, free of "{" and "}", that hashes to slot s.
func slotTag(s uint16) string {
	if t, ok := slotTags.Load(s); ok {
		return t.(string)
	}
	for i := 0; ; i++ {
		if t := strconv.Itoa(i); slot(t) == s {
			slotTags.Store(s, t)
			return t
		}
	}
}
