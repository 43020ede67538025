package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// Version is the server software a [Server] runs and its version, as its
// INFO server reports them: Valkey says server_name:valkey and
// valkey_version (its redis_version is a fixed 7.2.4, for clients that
// check it); Redis has no server_name and says redis_version.
type Version struct {
	Name                string // "redis" or "valkey"
	Major, Minor, Patch int
}

// String returns the version as "valkey 9.1.2".
func (v Version) String() string {
	return fmt.Sprintf("%s %d.%d.%d", v.Name, v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v is name (as in [Version.Name]) at major.minor
// or later: Version.AtLeast("valkey", 9, 0) for DELIFEQ, say.
func (v Version) AtLeast(name string, major, minor int) bool {
	return v.Name == name && (v.Major > major || v.Major == major && v.Minor >= minor)
}

// Version asks the server which software and version it runs (INFO
// server), so that a test can skip or adapt where servers differ.
func (s *Server) Version(t testing.TB) Version {
	t.Helper()
	info, err := queryString(s.Addr(), "INFO", "server")
	if err != nil {
		t.Fatalf("redistest: INFO server: %v", err)
	}
	v, err := parseVersion(infoFields(info))
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return v
}

// parseVersion reads the fields of INFO server.
func parseVersion(f map[string]string) (Version, error) {
	v := Version{Name: "redis"}
	raw := f["redis_version"]
	if name := f["server_name"]; name != "" {
		v.Name = name
		raw = f[name+"_version"]
	}
	parts := strings.SplitN(raw, ".", 3)
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("INFO server: %s version %q is not major.minor.patch", v.Name, raw)
	}
	for i, p := range []*int{&v.Major, &v.Minor, &v.Patch} {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return Version{}, fmt.Errorf("INFO server: %s version %q is not major.minor.patch", v.Name, raw)
		}
		*p = n
	}
	return v, nil
}
