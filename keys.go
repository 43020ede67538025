package redislock

import (
	"strconv"
	"strings"
	"sync"
)

// The kinds of data this package keeps beside a lock key (see sideKey).
const (
	fenceKind   = "fence"   // the fence counter (see WithFencing)
	queueKind   = "queue"   // the tokens of the places in line, oldest first
	placesKind  = "places"  // each place's deadline, lease and Locker
	readersKind = "readers" // the shared holders of a read-write lock
	limitKind   = "limit"   // a semaphore's number of permits
	gensKind    = "gens"    // the generations of the holders' leases
	holdersKind = "holders" // the holders' descriptions (see WithHolder)

	// releasedKind, followed by ":" and a token, is the release mark of the
	// lock of that token (see releaseScript).
	releasedKind = "released"
)

// sideKey returns the name of a key this package keeps beside the lock key
// key, for one kind of data (fenceKind, queueKind, placesKind). Scripts touch it together with
// the lock key, so Redis Cluster requires it in the lock key's hash slot: its
// hash tag is the part of key that Redis hashes, or, where that part contains
// "}" and cannot be a tag, another tag of the same slot. The whole key follows
// the tag, so different lock keys never share a side key.
func sideKey(key, kind string) string {
	h := hashPart(key)
	if strings.Contains(h, "}") {
		h = slotTag(slot(h))
	}
	return "{" + h + "}:redislock:" + kind + ":" + key
}

// wakeChannel is the pub/sub channel on which the Locker with the given id
// hears that a key was handed to one of its places (see handoffLua).
func wakeChannel(locker string) string { return wakePrefix + locker }

const wakePrefix = "redislock:wake:"

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
