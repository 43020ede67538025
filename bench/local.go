package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// localRun holds the clients of a contended run in this process: the lock
// client, whose commands a hook counts, and the data client of the critical
// section. Both have a connection per worker before the run starts, so that
// the run's measurements leave out their set-up.
type localRun struct {
	lockRDB *redis.Client
	data    *redis.Client
	sent    sentCounter
	im      impl
}

// newLocalRun makes the clients of cfg on the Redis at url and connects them
// for workers goroutines. Close it when done.
func newLocalRun(ctx context.Context, url string, cfg config, workers int) (*localRun, error) {
	lockRDB, err := cfg.lockClient(url)
	if err != nil {
		return nil, err
	}
	l := &localRun{lockRDB: lockRDB}
	lockRDB.AddHook(&l.sent)
	if l.data, err = newClient(url); err != nil {
		_ = lockRDB.Close()
		return nil, err
	}
	for _, rdb := range []*redis.Client{l.lockRDB, l.data} {
		if err := warm(ctx, rdb, workers); err != nil {
			l.close()
			return nil, fmt.Errorf("%s: connect: %w", cfg.name, err)
		}
	}
	l.im = cfg.make(lockRDB)
	return l, nil
}

// run runs the contended loop with p's timing (its impl and data are this
// run's) and counts the commands the lock client sent meanwhile.
func (l *localRun) run(ctx context.Context, p contendParams) run {
	p.impl, p.data = l.im, l.data
	before := l.sent.n.Load()
	r := contend(ctx, p)
	r.LockCmds = l.sent.n.Load() - before
	return r
}

// warm opens n connections in rdb's pool (at most its PoolSize) and leaves
// them idle there.
func warm(ctx context.Context, rdb *redis.Client, n int) error {
	conns := make([]*redis.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range min(n, rdb.Options().PoolSize) {
		c := rdb.Conn()
		conns = append(conns, c)
		if err := c.Ping(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// close closes the run's clients.
func (l *localRun) close() {
	_ = l.lockRDB.Close()
	_ = l.data.Close()
}
