package scripts

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// The data this package keeps in Redis is a protocol between the processes
// of a deployment: every process that locks a key must read and write it
// the same way. Its version, the layout, is written into everything it
// stores: tokens, the members that mark a key's holders as a read-write
// lock's or a semaphore's, and the names of the side keys and channels. A
// process meets data of another layout as data it did not write (see
// ErrWrongKind): a lock or a reader waits for a string, as for any foreign
// lock (a semaphore refuses it), and fails at once on anything else; it
// never changes it. See the CHANGELOG for which releases share a layout.
const Layout = "rl1"

// CheckKey returns ErrInvalidKey for a lock key that is empty or could be
// the name of a key the library keeps beside another lock ("...}:rl1:...",
// in any namespace): a lock there would take that key over.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: must be a non-empty string", ErrInvalidKey)
	case strings.Contains(key, "}:"+Layout+":"):
		return fmt.Errorf("%w: %s: keys with \"}:%s:\" in them are the library's own", ErrInvalidKey, QuoteKey(key), Layout)
	}
	return nil
}

// tokenPrefix starts every token (the value of an exclusive lock's key, a
// holder in a sorted set of holders): a key that holds a string with
// another start was not written by this layout.
const tokenPrefix = Layout + ":"

// NewToken returns a new token: tokenPrefix and 128 random bits from
// crypto/rand, base64url-encoded (26 bytes in all).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	var t [len(tokenPrefix) + 22]byte
	copy(t[:], tokenPrefix)
	base64.RawURLEncoding.Encode(t[len(tokenPrefix):], b[:])
	return string(t[:])
}

// IsToken reports whether s could be a token of this layout.
func IsToken(s string) bool {
	return len(s) == len(tokenPrefix)+22 && strings.HasPrefix(s, tokenPrefix) && !strings.ContainsAny(s[len(tokenPrefix):], " \t\r\n")
}

// The kinds of side keys this package keeps beside a lock key (see
// Keyspace.Side); each is described in the table at the top of scripts.go.
const (
	lineKind    = "line"    // the tokens of the places in line, first first
	placesKind  = "places"  // each place's deadline, lease, mode and channel; and the spent mark flag
	gensKind    = "gens"    // the generations of the holders' leases
	holdersKind = "holders" // the holders' descriptions (WithHolder)
	spentKind   = "spent"   // followed by ":" and a token: the token is spent (see spend.lua)
)

// A Keyspace names the keys and channels a Locker uses in Redis. Its
// namespace (WithNamespace, "" by default) starts every one of them, so
// that a Redis ACL user limited to a key and channel pattern (~app:* and
// &app:*) can use the Locker; Lockers that share locks must use the same
// one.
type Keyspace struct {
	NS string
}

// Lock returns the Redis key of the lock on key.
func (ks Keyspace) Lock(key string) string { return ks.NS + key }

// Side returns the name of a key this package keeps beside the lock on
// key, for one kind of data. Scripts touch it together with the lock key,
// so Redis Cluster requires it in the lock key's hash slot: its hash tag is
// the part of the Redis key that Redis hashes, or, where that part contains
// "}" and cannot be a tag, another tag of the same slot. The lock's key
// follows, so different locks never share a side key.
func (ks Keyspace) Side(key, kind string) string {
	h := HashPart(ks.Lock(key))
	if strings.Contains(h, "}") {
		h = slotTag(Slot(h))
	}
	return ks.NS + "{" + h + "}:" + Layout + ":" + kind + ":" + key
}

// Fence returns the fence counter of the lock on key: one per Redis
// Cluster hash slot (and namespace), shared by the locks whose keys hash to
// it, so that there are at most 16,384 of them however many keys are
// locked (see WithFencing).
func (ks Keyspace) Fence(key string) string {
	return ks.NS + "{" + slotTag(Slot(HashPart(ks.Lock(key)))) + "}:" + Layout + ":fence"
}

// Wake returns the channel on which the Locker with the given id hears
// that the lock on key was handed to one of its places (see handOff in
// line.lua). On a Cluster it is a shard channel in the key's hash slot
// (SPUBLISH, SSUBSCRIBE: no other shard relays it), one per slot the
// Locker waits in; elsewhere one channel per Locker.
func (ks Keyspace) Wake(id, key string, sharded bool) Wakeup {
	if sharded {
		return Wakeup{Channel: ks.NS + "{" + slotTag(Slot(HashPart(ks.Lock(key)))) + "}:" + Layout + ":wake:" + id, Sharded: true}
	}
	return Wakeup{Channel: ks.NS + Layout + ":wake:" + id}
}

// A Wakeup is how a hand-off to a place of a Locker is announced: on which
// channel, sharded (SPUBLISH) or not (PUBLISH).
type Wakeup struct {
	Channel string
	Sharded bool
}

// pub is the wakeup as acquire.lua takes it.
func (w Wakeup) pub() string {
	if w.Sharded {
		return markSPublish
	}
	return markPublish
}

// HashPart returns the part of key that Redis Cluster hashes to find its
// slot: the text between the first "{" and the first "}" after it, if that
// is not empty, else the whole key.
func HashPart(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Slot returns the Redis Cluster hash slot of a key's hash part: CRC16
// (XMODEM) modulo 16384.
func Slot(h string) uint16 {
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

// slotTags holds, for each hash slot, the shortest decimal number that
// hashes to it; it is filled on first use (about 200,000 hashes, once).
var slotTags = sync.OnceValue(func() *[16384]string {
	var tags [16384]string
	for i, left := 0, len(tags); left > 0; i++ {
		t := strconv.Itoa(i)
		if s := Slot(t); tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return &tags
})

// slotTag returns a short tag, free of "{" and "}", that hashes to slot s.
func slotTag(s uint16) string { return slotTags()[s] }

// A Mode is how a holder holds a key: exclusive (the zero Mode), shared (a
// reader of a read-write lock) or a permit of a semaphore of Permits.
type Mode struct {
	Shared  bool
	Permits int
}

// Exclusive reports whether m is the exclusive mode.
func (m Mode) Exclusive() bool { return !m.Shared && m.Permits == 0 }

func (m Mode) String() string {
	switch {
	case m.Shared:
		return "a reader's lock (WithShared)"
	case m.Permits > 0:
		return fmt.Sprintf("a permit of a semaphore of %d (WithPermits)", m.Permits)
	}
	return "an exclusive lock"
}

// arg is the mode as the scripts take it.
func (m Mode) arg() string {
	switch {
	case m.Shared:
		return markShared
	case m.Permits > 0:
		return strconv.Itoa(m.Permits)
	}
	return markExclusive
}
