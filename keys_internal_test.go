package redislock

import (
	"strings"
	"testing"
)

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 0x31C3 % 16384, "foo": 12182, "bar": 5061, "": 0} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestSideKey(t *testing.T) {
	for key, want := range map[string]string{
		"order:42":       "{order:42}:redislock:fence:order:42",
		"{user:1}:cart":  "{user:1}:redislock:fence:{user:1}:cart",
		"a{b}c{d}":       "{b}:redislock:fence:a{b}c{d}",
		"only{open":      "{only{open}:redislock:fence:only{open",
		"{{nested}}:key": "{{nested}:redislock:fence:{{nested}}:key",
		"{}order":        "", // empty tag: the whole key is hashed, and it has "}"
		"a}b":            "",
		"x{}{y}":         "",
	} {
		got := sideKey(key, "fence")
		if want != "" && got != want {
			t.Errorf("sideKey(%q) = %q, want %q", key, got, want)
		}
		checkSideKey(t, key, "fence", got)
	}
	if sideKey("order", "queue") == sideKey("{order}", "queue") {
		t.Error("two lock keys share a side key")
	}
}

// FuzzSideKey checks that side keys are always in the lock key's hash slot
// and belong to one lock key each, whatever the key.
func FuzzSideKey(f *testing.F) {
	for _, seed := range []string{"order:42", "{user:1}:cart", "{}", "}{", "a}b", "{{}}", "x{}{y}", "\x00{\xff}"} {
		f.Add(seed, "x")
	}
	f.Fuzz(func(t *testing.T, key, other string) {
		if key == "" {
			return
		}
		sk := sideKey(key, "queue")
		checkSideKey(t, key, "queue", sk)
		if other != "" && other != key && sideKey(other, "queue") == sk {
			t.Errorf("lock keys %q and %q share side key %q", key, other, sk)
		}
	})
}

func checkSideKey(t *testing.T, key, kind, sk string) {
	t.Helper()
	if !strings.HasSuffix(sk, "}:redislock:"+kind+":"+key) {
		t.Errorf("sideKey(%q) = %q: not a %s key of it", key, sk, kind)
	}
	if a, b := slot(hashPart(key)), slot(hashPart(sk)); a != b {
		t.Errorf("sideKey(%q) = %q: slot %d, lock key slot %d", key, sk, b, a)
	}
}
