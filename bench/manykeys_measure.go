package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// mkSample is what one many-keys run of one configuration measured.
type mkSample struct {
	cycles      int           // successful Obtain+Release cycles
	inWindow    int           // of them, those that ended within window
	window      time.Duration // the run's duration
	p50, p99    time.Duration // of one successful cycle
	notObtained int           // cycles that found the key held (see cycler)
	failed      int           // cycles that ended in an error
	errors      []string
	left        int64            // keys in Redis right after the workers stopped (more than at the start)
	leftLater   int64            // the same, 1 s later
	lockCmds    int64            // commands the lock client sent (hooks + subscriptions)
	writes      int64            // the lock client's writes: one per command sent alone, one per pipeline
	srvCmds     map[string]int64 // commandstats delta without bookkeeping
	cpu         float64          // redis-server CPU seconds from the start until the clients were closed
	clientCPU   float64          // the bench process's CPU seconds while the workers ran (NaN: unknown)
	others      float64          // share of a core other programs used while the workers ran (NaN: unknown)
}

// measureManyKeys runs, for repetition rep, the many-keys setup of every
// many-keys configuration, back to back in an order that rotates from one
// repetition to the next, adding to res.
func (h *harness) measureManyKeys(ctx context.Context, res *results, rep int, p *progress) error {
	keys := mkKeys(h.prefix+"mk:", h.f.mkKeys)
	return rotated(len(res.mkCfgs), rep, func(i int) error {
		cfg := res.mkCfgs[i]
		p.log("rep %d, %s: %s", rep+1, manyKeysSetup, cfg.name())
		sm, err := h.manyKeys(ctx, cfg, keys)
		if err != nil {
			return fmt.Errorf("%s %s: %w", manyKeysSetup, cfg.name(), err)
		}
		res.mk[i] = append(res.mk[i], sm)
		return nil
	})
}

// manyKeys runs cfg in the many-keys setup once on keys, from an empty Redis
// when the harness owns it, on clients of its own that are closed at the
// end.
func (h *harness) manyKeys(ctx context.Context, cfg mkConfig, keys []string) (mkSample, error) {
	if err := h.prepare(ctx); err != nil {
		return mkSample{}, err
	}
	defer h.delMatching(ctx, h.prefix+"mk:")
	c, err := openMKClients(ctx, h.f.redisURL, h.f.mkWorkers, cfg.auto)
	if err != nil {
		return mkSample{}, fmt.Errorf("connect: %w", err)
	}
	defer c.close()
	return h.measureCycles(ctx, c, cfg.impl.make(c.lock()), keys)
}

// measureCycles runs the workers of a many-keys run with im on c's clients.
// The admin client reads DBSIZE and the server's counters just before the
// workers start; DBSIZE right after they stopped and 1 s later (with c still
// open, so that an implementation's clean-up in the background goes on);
// and the counters once more after c is closed. Nothing else talks to the
// server meanwhile.
func (h *harness) measureCycles(ctx context.Context, c *mkClients, im impl, keys []string) (mkSample, error) {
	base, err := h.admin.DBSize(ctx).Result()
	if err != nil {
		return mkSample{}, err
	}
	before, err := h.mark(ctx)
	if err != nil {
		return mkSample{}, err
	}
	cmds, writes := c.sent.counts()
	sm := sampleOf(runCycles(ctx, im, keys, h.f.mkWorkers, h.f.duration, h.f.bound), h.f.duration)
	if err := ctx.Err(); err != nil {
		return mkSample{}, err
	}
	stopped, err := h.keysLeft(ctx, &sm, base)
	if err != nil {
		return mkSample{}, err
	}
	cmdsAfter, writesAfter := c.sent.counts()
	sm.lockCmds, sm.writes = cmdsAfter-cmds, writesAfter-writes
	c.close()
	after, err := h.mark(ctx)
	if err != nil {
		return mkSample{}, err
	}
	sm.account(before, stopped, after)
	return sm, nil
}

// keysLeft reads DBSIZE as soon as the workers stopped, then the server's
// counters, and DBSIZE again 1 s later, into sm's keys left beyond base. It
// returns the counters.
func (h *harness) keysLeft(ctx context.Context, sm *mkSample, base int64) (mark, error) {
	n, err := h.admin.DBSize(ctx).Result()
	if err != nil {
		return mark{}, err
	}
	stopped, err := h.mark(ctx)
	if err != nil {
		return mark{}, err
	}
	if !sleepUntil(ctx, time.Now().Add(time.Second)) {
		return mark{}, ctx.Err()
	}
	later, err := h.admin.DBSize(ctx).Result()
	sm.left, sm.leftLater = n-base, later-base
	return stopped, err
}

// account sets sm's server work from the counters: the CPU from the start
// until the clients were closed (their clean-up after the workers stopped
// included), the bench's own CPU and other programs' share while the
// workers ran, and the commands.
func (sm *mkSample) account(before, stopped, after mark) {
	sm.cpu = after.srv.cpu - before.srv.cpu
	_, sm.others = usage(before, stopped)
	sm.clientCPU = math.NaN()
	if before.cpu.ok && stopped.cpu.ok {
		sm.clientCPU = (stopped.cpu.own - before.cpu.own).Seconds()
	}
	sm.srvCmds = statsDelta(before.srv.calls, after.srv.calls)
	sm.lockCmds += subscriptionCmds(sm.srvCmds)
}

// sampleOf adds up the workers of a many-keys run of duration window.
func sampleOf(cs []cycler, window time.Duration) mkSample {
	sm := mkSample{window: window}
	var latencies []int64
	for _, c := range cs {
		latencies = append(latencies, c.latencies...)
		sm.inWindow += c.inWindow
		sm.notObtained += c.notObtained
		sm.failed += c.failed
		for _, e := range c.errors {
			sm.errors = keepError(sm.errors, e, 5)
		}
	}
	sm.cycles = len(latencies)
	sm.p50 = time.Duration(percentile(latencies, 0.50))
	sm.p99 = time.Duration(percentile(latencies, 0.99))
	return sm
}

// mkClients are the clients of one many-keys run: a plain client, whose
// commands a hook counts, and, for a configuration on an AutoPipeliner, the
// client's AutoPipeliner (its batches run the same hook).
type mkClients struct {
	rdb  *redis.Client
	auto *redis.AutoPipeliner // nil on a plain configuration
	sent sentCounter
}

// openMKClients makes the clients of a many-keys run on the Redis at url,
// with a connection per worker (at most the pool's size) and, with auto,
// the AutoPipeliner's pipeline connection, so that the run leaves out their
// set-up. Close them when done.
func openMKClients(ctx context.Context, url string, workers int, auto bool) (*mkClients, error) {
	rdb, err := newClient(url)
	if err != nil {
		return nil, err
	}
	c := &mkClients{rdb: rdb}
	rdb.AddHook(&c.sent)
	if err := warm(ctx, rdb, workers); err != nil {
		c.close()
		return nil, err
	}
	if !auto {
		return c, nil
	}
	if c.auto, err = rdb.AutoPipeline(); err == nil {
		err = c.auto.Ping(ctx).Err()
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// lock returns the client the lock runs on.
func (c *mkClients) lock() redis.UniversalClient {
	if c.auto != nil {
		return c.auto
	}
	return c.rdb
}

// close closes the AutoPipeliner, if any, then the client (closing an
// AutoPipeliner leaves its client open). It may be called again.
func (c *mkClients) close() {
	if c.auto != nil {
		_ = c.auto.Close()
		c.auto = nil
	}
	if c.rdb != nil {
		_ = c.rdb.Close()
		c.rdb = nil
	}
}
