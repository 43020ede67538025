package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newClient returns a client of the Redis that raw names, in go-redis's URL
// forms: redis:// or rediss:// for one node, redis+sentinel:// for the
// primary that the Sentinels at that address know by master_name=, and
// redis+cluster:// for a Cluster, from any of its nodes (more addresses in
// addr= parameters).
func newClient(raw string) (redis.UniversalClient, error) {
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

// redacted is raw with its password, if any, replaced by "xxxxx".
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
