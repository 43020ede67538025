// Package redisurl makes a go-redis client of any kind from one URL: a
// single node, a Sentinel-managed primary, or a Cluster. The demo and the
// command line take their Redis this way.
//
//	redis://[user:password@]host:port[/db]          one node (rediss:// for TLS)
//	redis+sentinel://host:port[?addr=host:port...]&master_name=NAME[&db=N]
//	                                                 Sentinels; the primary they name
//	redis+cluster://host:port[?addr=host:port...]   a Cluster, from any of its nodes
//
// A redis:// URL with a master_name parameter is read as a Sentinel URL,
// and one with addr parameters as a Cluster URL, as go-redis's
// ParseFailoverURL and ParseClusterURL read them. Query parameters are
// go-redis's (dial_timeout, read_timeout, pool_size, ...). Every port, of
// the host and of each addr parameter, must be a number in 1..65535; the
// host's may be left out (6379).
package redisurl

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewClient returns a client of the Redis that raw names (see the package
// doc). It does not contact Redis.
func NewClient(raw string) (redis.UniversalClient, error) {
	kind, u, err := parse(raw)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "sentinel":
		o, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, fmt.Errorf("redisurl: %w", err)
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("redisurl: %q: a Sentinel URL needs master_name=", raw)
		}
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("redisurl: %w", err)
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("redisurl: %w", err)
	}
	return redis.NewClient(o), nil
}

// parse returns what kind of deployment raw names ("node", "sentinel" or
// "cluster") and the URL in go-redis's own form.
func parse(raw string) (kind, goredis string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("redisurl: %w", err)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("redisurl: %q: no host (want e.g. redis://127.0.0.1:6379)", raw)
	}
	if err := checkPort(u.Host, u.Port(), strings.HasSuffix(u.Host, ":")); err != nil {
		return "", "", fmt.Errorf("redisurl: %q: %w", raw, err)
	}
	q := u.Query()
	for _, addr := range q["addr"] {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return "", "", fmt.Errorf("redisurl: %q: addr=%s: want host:port", raw, addr)
		}
		if err := checkPort(addr, port, true); err != nil {
			return "", "", fmt.Errorf("redisurl: %q: addr=%w", raw, err)
		}
	}
	scheme, tls := u.Scheme, false
	if strings.HasPrefix(scheme, "rediss") {
		scheme, tls = "redis"+strings.TrimPrefix(scheme, "rediss"), true
	}
	switch scheme {
	case "redis+sentinel":
		kind = "sentinel"
	case "redis+cluster":
		kind = "cluster"
	case "redis":
		switch {
		case q.Has("master_name"):
			kind = "sentinel"
		case q.Has("addr"):
			kind = "cluster"
		default:
			kind = "node"
		}
	default:
		return "", "", fmt.Errorf("redisurl: %q: unknown scheme %q (redis, rediss, redis+sentinel, redis+cluster)", raw, u.Scheme)
	}
	u.Scheme = "redis"
	if tls {
		u.Scheme = "rediss"
	}
	return kind, u.String(), nil
}

// checkPort checks the port of the address hostport: a decimal number in
// 1..65535, or none at all when given is false (go-redis then takes 6379).
// go-redis takes any number, and 0 or 99999 would fail only when dialed.
func checkPort(hostport, port string, given bool) error {
	if port == "" && !given {
		return nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("%s: port %q: want a number in 1..65535", hostport, port)
	}
	return nil
}
