package scripts

import (
	"strings"
	"testing"
)

func TestLayout_Slot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 0x31C3 % 16384, "foo": 12182, "bar": 5061, "": 0} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// A side key is named by the lock key's hash tag, the layout, its kind and
// the lock key, and is in the lock key's Cluster slot.
func TestLayout_SideKey(t *testing.T) {
	for key, want := range map[string]string{
		"order:42":       "{order:42}:rl1:line:order:42",
		"{user:1}:cart":  "{user:1}:rl1:line:{user:1}:cart",
		"a{b}c{d}":       "{b}:rl1:line:a{b}c{d}",
		"only{open":      "{only{open}:rl1:line:only{open",
		"{{nested}}:key": "{{nested}:rl1:line:{{nested}}:key",
		"{}order":        "", // empty tag: the whole key is hashed, and it has "}"
		"a}b":            "",
		"x{}{y}":         "",
	} {
		got := sideKey(key, "line")
		if want != "" && got != want {
			t.Errorf("side(%q) = %q, want %q", key, got, want)
		}
		checkSideKey(t, key, "line", got)
	}
	if sideKey("order", "line") == sideKey("{order}", "line") {
		t.Error("two lock keys share a side key")
	}
}

// A namespace starts every key and channel, and keeps side keys and the
// fence counter in the lock key's slot.
func TestKeyspace_Namespace(t *testing.T) {
	ks := Keyspace{NS: "app:"}
	rkey := ks.Lock("order:42")
	for _, name := range []string{rkey, ks.Side("order:42", lineKind), ks.Fence("order:42"), ks.Wake("id", "order:42", false).Channel, ks.Wake("id", "order:42", true).Channel} {
		if !strings.HasPrefix(name, "app:") {
			t.Errorf("%q is outside the namespace", name)
		}
	}
	for _, name := range []string{ks.Side("order:42", lineKind), ks.Fence("order:42"), ks.Wake("id", "order:42", true).Channel} {
		if Slot(HashPart(name)) != Slot(HashPart(rkey)) {
			t.Errorf("%q is not in the lock key's slot", name)
		}
	}
}

// slotTag finds a tag for every slot.
func TestLayout_SlotTag(t *testing.T) {
	for s := uint16(0); s < 16384; s++ {
		if tag := slotTag(s); Slot(tag) != s || strings.ContainsAny(tag, "{}") {
			t.Fatalf("slotTag(%d) = %q", s, tag)
		}
	}
}

// sideKey is a side key of the lock on key, without a namespace.
func sideKey(key, kind string) string { return Keyspace{}.Side(key, kind) }

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
		sk := sideKey(key, "line")
		checkSideKey(t, key, "line", sk)
		if other != "" && other != key && sideKey(other, "line") == sk {
			t.Errorf("lock keys %q and %q share side key %q", key, other, sk)
		}
	})
}

func checkSideKey(t *testing.T, key, kind, sk string) {
	t.Helper()
	if !strings.HasSuffix(sk, "}:rl1:"+kind+":"+key) {
		t.Errorf("sideKey(%q) = %q: not a %s key of it", key, sk, kind)
	}
	if a, b := Slot(HashPart(key)), Slot(HashPart(sk)); a != b {
		t.Errorf("sideKey(%q) = %q: slot %d, lock key slot %d", key, sk, b, a)
	}
}
