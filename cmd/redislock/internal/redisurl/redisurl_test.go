package redisurl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// TestMain fails the run if a goroutine outlives the tests: clients that
// NewClient made, or began to make before it failed, leave none behind.
func TestMain(m *testing.M) { redistest.Main(m) }

// mustClient returns the client NewClient makes of raw, closed at the end
// of t, and fails t if there is none.
func mustClient(t *testing.T, raw string) redis.UniversalClient {
	t.Helper()
	c, err := NewClient(raw)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", raw, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// mustFail checks that NewClient fails on raw with an *Error whose text
// has want in it, and returns no client.
func mustFail(t *testing.T, raw, want string) {
	t.Helper()
	c, err := NewClient(raw)
	var e *Error
	switch {
	case c != nil:
		_ = c.Close()
		t.Errorf("NewClient(%q) made a client", raw)
	case !errors.As(err, &e):
		t.Errorf("NewClient(%q): error %v (%T), want an *Error", raw, err, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("NewClient(%q): error %q, want %q in it", raw, err, want)
	}
}

// Each URL form makes the client of its kind, and a bad URL an error.
func TestParse(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/2":                               "node",
		"rediss://u:p@127.0.0.1:6379":                            "node",
		"redis+sentinel://127.0.0.1:26379?master_name=mymaster":  "sentinel",
		"redis://127.0.0.1:26379?master_name=m&addr=127.0.0.1:1": "sentinel",
		"redis+cluster://127.0.0.1:7000":                         "cluster",
		"redis://127.0.0.1:7000?addr=127.0.0.1:7001":             "cluster",
		"rediss+cluster://127.0.0.1:7000?addr=127.0.0.1:7001":    "cluster",
	} {
		if kind, _, err := parse(raw); err != nil || kind != want {
			t.Errorf("parse(%q) = %q, %v; want %q", raw, kind, err, want)
		}
	}
	for raw, want := range map[string]string{
		"":                                 "no host",
		"127.0.0.1:6379":                   "first path segment",
		"http://127.0.0.1":                 `unknown scheme "http"`,
		"redis://":                         "no host",
		"redis+sentinel://127.0.0.1:26379": "master_name",
		"redis://127.0.0.1:6379?bogus=1":   "unexpected option: bogus",
		"%zz":                              `invalid URL escape "%zz"`,
	} {
		mustFail(t, raw, want)
	}
}

// A port must be a decimal number in 1..65535, in the URL's host and in
// every addr parameter, for every kind of URL: go-redis takes 0, 65536 or
// 99999 as they come, and the mistake would show only when dialing.
func TestParse_PortOutOfRange(t *testing.T) {
	for _, port := range []string{"0", "65536", "99999", "-1", "x", "+80", "6379x", ""} {
		for _, raw := range []string{
			"redis://127.0.0.1:" + port,
			"rediss://127.0.0.1:" + port + "/2",
			"redis://[::1]:" + port,
			"redis+sentinel://127.0.0.1:" + port + "?master_name=m",
			"redis+sentinel://127.0.0.1:26379?master_name=m&addr=127.0.0.1:" + port,
			"redis://127.0.0.1:26379?master_name=m&addr=127.0.0.1:" + port,
			"redis+cluster://127.0.0.1:" + port,
			"redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:" + port,
			"redis://127.0.0.1:7000?addr=127.0.0.1:" + port,
		} {
			mustFail(t, raw, "port")
		}
	}
	for _, raw := range []string{"redis://127.0.0.1:1", "redis://127.0.0.1:65535", "redis://127.0.0.1", "redis://[::1]:6379",
		"redis+cluster://127.0.0.1:7000?addr=[::1]:65535"} {
		mustClient(t, raw)
	}
}

// A database below 0, in the path or a db parameter, and the numbers of
// query parameters out of their range are errors, not a panic (a negative
// pool_size), a process out of memory (a huge one) or another value taken
// silently (database -1 as 0); -1 is taken where go-redis gives it a
// meaning (max_retries, max_redirects, pipeline_pool_size: none).
func TestNewClient_NumbersOutOfRange(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/-1":                                     "database -1: want 0 or more",
		"redis+sentinel://127.0.0.1:26379/-1?master_name=m":             "database -1",
		"redis+sentinel://127.0.0.1:26379?master_name=m&db=-2":          "db=-2: want 0 or more",
		"redis://127.0.0.1:6379?pool_size=-5":                           "pool_size=-5: want a number in 0..10000",
		"redis+sentinel://127.0.0.1:26379?master_name=m&pool_size=-1":   "pool_size=-1",
		"redis+cluster://127.0.0.1:7000?pool_size=1000000000":           "pool_size=1000000000",
		"redis://127.0.0.1:6379?pool_size=5&pool_size=-5":               "pool_size=-5",
		"redis://127.0.0.1:6379?min_idle_conns=-1":                      "min_idle_conns=-1",
		"redis://127.0.0.1:6379?max_active_conns=10001":                 "max_active_conns=10001",
		"redis://127.0.0.1:6379?max_retries=-2":                         "max_retries=-2: want -1 or more",
		"redis+cluster://127.0.0.1:7000?max_redirects=-5":               "max_redirects=-5",
		"redis://127.0.0.1:6379?protocol=-1":                            "protocol=-1: want a number in 2..3",
		"redis://127.0.0.1:6379?pipeline_read_buffer_size=999999999999": "pipeline_read_buffer_size",
		"redis://127.0.0.1:6379?pool_size=x":                            "invalid pool_size number", // go-redis's
	} {
		mustFail(t, raw, want)
	}
	valid := []string{
		"redis://127.0.0.1:6379/0?pool_size=10000&max_retries=-1&protocol=2",
		"redis+cluster://127.0.0.1:7000?max_redirects=-1",
		"redis+sentinel://127.0.0.1:26379/3?master_name=m&db=0",
	}
	// go.mod's go-redis (v9.18) predates the auto-pipelining options: built
	// with it, the command refuses them as go-redis does (unexpected option).
	if _, err := redis.ParseURL("redis://127.0.0.1:6379?pipeline_pool_size=-1"); err == nil {
		valid = append(valid, "redis://127.0.0.1:6379?pipeline_pool_size=-1")
	}
	for _, raw := range valid {
		mustClient(t, raw)
	}
}

// Redact replaces the password of a URL's user information with "xxxxx",
// as url.URL.Redacted does, and the values of query parameters named
// *password*, leaving the rest as it was written; in a text that does not
// parse, or that has an '@' after the host (a password with an unescaped
// '/', '?' or '#'), it redacts up to the last '@'.
func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:S3cr3t@h:1/0":                 "redis://u:xxxxx@h:1/0",
		"rediss://:S3cr3t@h":                     "rediss://:xxxxx@h",
		"redis://u:@h":                           "redis://u:xxxxx@h",
		"redis://u@h":                            "redis://u@h",
		"redis://h:6379/0?client_name=a@b":       "redis://h:6379/0?client_name=a@b",
		"redis://u:S3cr3t@h:1/0?client_name=a@b": "redis://u:xxxxx@h:1/0?client_name=a@b",
		"redis://u:S3c@r3t@h":                    "redis://u:xxxxx@h",
		"redis://u:S3c/r3t@h:1":                  "redis://u:xxxxx@h:1",
		"redis://u:S3c?r3t@h":                    "redis://u:xxxxx@h",
		"redis://u:S3c#r3t@h":                    "redis://u:xxxxx@h",
		"redis://u:S3c%zz@h":                     "redis://u:xxxxx@h",
		"redis://u:S3c r3t@h/0":                  "redis://u:xxxxx@h/0",
		"u:S3cr3t@h:6379":                        "u:xxxxx@h:6379",
		"http://u:S3cr3t@h":                      "http://u:xxxxx@h",
		"redis+sentinel://h:1?master_name=m&password=S3cr3t&db=1": "redis+sentinel://h:1?master_name=m&password=xxxxx&db=1",
		"redis://h?Sentinel_Password=S3cr3t#f":                    "redis://h?Sentinel_Password=xxxxx#f",
		"redis://127.0.0.1:6379":                                  "redis://127.0.0.1:6379",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

// No error of NewClient shows the password, whatever is wrong with the URL
// (go-redis's errors and url.Parse's quote parts of it); the URL it shows
// is redacted.
func TestNewClient_ErrorsHideThePassword(t *testing.T) {
	const secret = "S3cr3t"
	for _, raw := range []string{
		"redis://u:" + secret + "@127.0.0.1:0",
		"redis://u:" + secret + "@127.0.0.1:x",
		"redis://u:" + secret + "@127.0.0.1:6379/-1",
		"redis://u:" + secret + "@127.0.0.1:6379/x",
		"redis://u:" + secret + "@127.0.0.1:6379?pool_size=-5",
		"redis://u:" + secret + "@127.0.0.1:6379?bogus=1",
		"redis://u:" + secret + "@",
		"bogus://u:" + secret + "@h",
		"redis://u:S3c%zz" + secret + "@h",
		"redis://u:" + secret + " x@h",
		"redis://u:S3c/" + secret + "@h:1",
		"redis://u:6379/" + secret + "@h/0",
		"redis://u:12?" + secret + "@h",
		"redis://u:1234#" + secret + "@h",
		"u:" + secret + "@127.0.0.1:6379",
		"redis+sentinel://127.0.0.1:26379?password=" + secret,
		"redis+sentinel://127.0.0.1:26379?master_name=m&password=" + secret + "&pool_size=-1",
	} {
		c, err := NewClient(raw)
		if err == nil {
			_ = c.Close()
			t.Errorf("NewClient(%q) made a client", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("NewClient(%q): the error shows the password: %v", raw, err)
		}
		if !strings.Contains(err.Error(), redacted) {
			t.Errorf("NewClient(%q): the error does not show the redacted URL: %v", raw, err)
		}
	}
}

// The clients reach real deployments: a node, a Sentinel-managed primary,
// and a Cluster.
func TestClientsReachRealDeployments(t *testing.T) {
	node := redistest.Start(t)
	sentinel := redistest.StartSentinel(t)
	cluster := redistest.StartCluster(t)
	for name, raw := range map[string]string{
		"node":     "redis://" + node.Addr(),
		"sentinel": "redis+sentinel://" + sentinel.SentinelAddrs()[0] + "?master_name=" + sentinel.MasterName(),
		"cluster":  "redis+cluster://" + cluster.Addrs()[0],
	} {
		t.Run(name, func(t *testing.T) {
			c := mustClient(t, raw)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Set(ctx, "k", name, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if got := c.Get(ctx, "k").Val(); got != name {
				t.Errorf("GET k = %q, want %q", got, name)
			}
			var ok bool
			switch name {
			case "node", "sentinel":
				_, ok = c.(*redis.Client)
			case "cluster":
				_, ok = c.(*redis.ClusterClient)
			}
			if !ok {
				t.Errorf("a client of type %T", c)
			}
		})
	}
}
