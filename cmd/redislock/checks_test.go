package main

import (
	"fmt"
	"strings"
	"testing"
)

// The checks of the tests. what, if given, is a format and its arguments
// that say what was checked.

// equal fails t, going on, when got is not want.
func equal[T comparable](t *testing.T, got, want T, what ...any) {
	t.Helper()
	if got != want {
		t.Errorf("%sgot %#v, want %#v", label(what), got, want)
	}
}

// contains fails t, going on, when s does not have sub in it.
func contains(t *testing.T, s, sub string, what ...any) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%s%q not in %q", label(what), sub, s)
	}
}

// lacks fails t, going on, when s has sub in it.
func lacks(t *testing.T, s, sub string, what ...any) {
	t.Helper()
	if strings.Contains(s, sub) {
		t.Errorf("%s%q in %q", label(what), sub, s)
	}
}

// check fails t, going on, when ok is false.
func check(t *testing.T, ok bool, what ...any) {
	t.Helper()
	if !ok {
		t.Errorf("%sfailed", label(what))
	}
}

// must fails t at once when err is not nil.
func must(t *testing.T, err error, what ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s%v", label(what), err)
	}
}

// label is what, formatted, as the start of a failure's message.
func label(what []any) string {
	if len(what) == 0 {
		return ""
	}
	return fmt.Sprintf(what[0].(string), what[1:]...) + ": "
}
