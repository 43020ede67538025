package redistest

import (
	"os/exec"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		fields map[string]string
		want   Version
	}{
		{map[string]string{"redis_version": "7.0.15"}, Version{"redis", 7, 0, 15}},
		{map[string]string{"redis_version": "8.0.2", "redis_mode": "standalone"}, Version{"redis", 8, 0, 2}},
		{map[string]string{"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}, Version{"valkey", 9, 1, 2}},
	} {
		got, err := parseVersion(tc.fields)
		if err != nil || got != tc.want {
			t.Errorf("parseVersion(%v) = %v, %v; want %v", tc.fields, got, err, tc.want)
		}
	}
	if _, err := parseVersion(map[string]string{"server_name": "valkey", "redis_version": "7.2.4"}); err == nil {
		t.Error("parseVersion of a valkey without valkey_version: no error")
	}
}

func TestVersionMatchesBinary(t *testing.T) {
	t.Parallel()
	s := Start(t)
	v := s.Version(t)
	// "Redis server v=7.0.15 sha=..." or "Valkey server v=9.1.2 sha=..."
	out, err := exec.Command(s.bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", s.bin, err)
	}
	name, ver, _ := strings.Cut(string(out), " server v=")
	ver, _, _ = strings.Cut(ver, " ")
	if got := strings.ToLower(name) + " " + ver; got != v.String() {
		t.Errorf("Version() = %q, %s --version says %q", v, s.bin, got)
	}
	if !v.AtLeast(v.Name, v.Major, v.Minor) || v.AtLeast(v.Name, v.Major, v.Minor+1) || v.AtLeast("other", 0, 0) {
		t.Errorf("AtLeast is wrong around %v", v)
	}
	t.Logf("%s (%s)", v, s.bin)
}
