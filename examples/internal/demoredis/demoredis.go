// Package demoredis connects the demos to a Redis: one a URL names, or an
// embedded miniredis, so that they run anywhere.
package demoredis

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Open returns a client of the Redis that raw names (see NewClient), or,
// when raw is "", of an embedded miniredis it starts, once a PING has
// answered; it prints which Redis that is. closeAll closes the client and
// the miniredis.
func Open(ctx context.Context, raw string) (rdb redis.UniversalClient, closeAll func(), err error) {
	var mr *miniredis.Miniredis
	name := Redacted(raw)
	if raw == "" {
		if mr, err = miniredis.Run(); err != nil {
			return nil, nil, err
		}
		raw, name = "redis://"+mr.Addr(), "embedded miniredis (use -redis redis://127.0.0.1:6379 for a real one)"
	}
	closeAll = func() {
		if rdb != nil {
			_ = rdb.Close()
		}
		if mr != nil {
			mr.Close()
		}
	}
	if rdb, err = NewClient(raw); err == nil {
		fmt.Println("redis:", name)
		err = rdb.Ping(ctx).Err()
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("redis %s: %w", Redacted(raw), err)
	}
	return rdb, closeAll, nil
}

// NewClient returns a client of the Redis that raw names, in go-redis's
// URL forms: redis:// or rediss:// for one node, redis+sentinel:// for the
// primary that the Sentinels at that address know by master_name=, and
// redis+cluster:// for a Cluster, from any of its nodes (more addresses in
// addr= parameters).
func NewClient(raw string) (redis.UniversalClient, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	base, kind, _ := strings.Cut(scheme, "+")
	switch kind {
	case "sentinel":
		o, err := redis.ParseFailoverURL(base + "://" + rest)
		if err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, err
		}
		return redis.NewClusterClient(o), nil
	case "":
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		return redis.NewClient(o), nil
	}
	return nil, fmt.Errorf("unknown scheme %q (redis, rediss, redis+sentinel, redis+cluster)", scheme)
}

// Redacted is raw with its password, if any, replaced by "xxxxx".
func Redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
