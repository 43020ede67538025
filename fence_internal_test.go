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

func TestFenceKey(t *testing.T) {
	for key, want := range map[string]string{
		"order:42":       "{order:42}:redislock:fence",
		"{user:1}:cart":  "{user:1}:redislock:fence",
		"a{b}c{d}":       "{b}:redislock:fence",
		"{}order":        "", // empty tag: the whole key is hashed, and it has "}"
		"a}b":            "",
		"only{open":      "{only{open}:redislock:fence",
		"x{}{y}":         "",
		"{{nested}}:key": "{{nested}:redislock:fence",
	} {
		got := fenceKey(key)
		if want != "" && got != want {
			t.Errorf("fenceKey(%q) = %q, want %q", key, got, want)
		}
		checkSameSlot(t, key, got)
	}
}

// FuzzFenceKey checks that the fence counter is always in the lock key's
// hash slot, whatever the key.
func FuzzFenceKey(f *testing.F) {
	for _, seed := range []string{"order:42", "{user:1}:cart", "{}", "}{", "a}b", "{{}}", "x{}{y}", "\x00{\xff}"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if key == "" {
			return
		}
		checkSameSlot(t, key, fenceKey(key))
	})
}

func checkSameSlot(t *testing.T, key, fk string) {
	t.Helper()
	if !strings.HasSuffix(fk, "}:redislock:fence") {
		t.Errorf("fenceKey(%q) = %q: not a counter key", key, fk)
	}
	if a, b := slot(hashPart(key)), slot(hashPart(fk)); a != b {
		t.Errorf("fenceKey(%q) = %q: slot %d, lock key slot %d", key, fk, b, a)
	}
}
