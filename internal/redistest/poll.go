package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// pollInterval is how often the waits in this package re-check a condition.
const pollInterval = 50 * time.Millisecond

// waitFor calls check every pollInterval until it returns nil. If that has
// not happened within timeout it returns the last error, naming what.
func waitFor(timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %v: %w", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// query runs one command against addr on a fresh RESP2 connection and
// returns its reply. Unlike [Server.Do] it reports errors instead of failing
// the test, so it can be used while polling; redis.Nil is returned as nil.
func query(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		Protocol:     2,
		MaxRetries:   -1,
		DialTimeout:  time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: time.Second,
		PoolSize:     1,
	})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s %v: %w", addr, args, err)
	}
	return v, nil
}

// queryString is query for commands with a bulk-string reply (INFO, CLUSTER
// INFO, CLUSTER NODES...).
func queryString(addr string, args ...any) (string, error) {
	v, err := query(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s %v: reply %T, want string", addr, args, v)
	}
	return s, nil
}

// infoFields parses "key:value" lines of an INFO-style reply.
func infoFields(s string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			m[k] = v
		}
	}
	return m
}

// replyMap turns a RESP2 flat key/value array (as SENTINEL MASTER returns)
// into a map of strings.
func replyMap(v any) (map[string]string, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("reply %v is not a key/value array", v)
	}
	m := make(map[string]string, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		m[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	return m, nil
}

// replyMaps is replyMap for an array of key/value arrays (SENTINEL REPLICAS).
func replyMaps(v any) ([]map[string]string, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("reply %v is not an array", v)
	}
	ms := make([]map[string]string, 0, len(a))
	for _, e := range a {
		m, err := replyMap(e)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// checkReplicaOf reports whether the server at addr is a replica of primary
// with its replication link up.
func checkReplicaOf(addr, primary string) error {
	s, err := queryString(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	f := infoFields(s)
	got := f["master_host"] + ":" + f["master_port"]
	if f["role"] != "slave" || got != primary || f["master_link_status"] != "up" {
		return fmt.Errorf("%s: role=%s master=%s link=%s, want a replica of %s with link up",
			addr, f["role"], got, f["master_link_status"], primary)
	}
	return nil
}

// checkRole reports whether ROLE on addr answers want ("master" or "slave").
func checkRole(addr, want string) error {
	v, err := query(addr, "ROLE")
	if err != nil {
		return err
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 || a[0] != want {
		return fmt.Errorf("%s: ROLE = %v, want %s", addr, v, want)
	}
	return nil
}
