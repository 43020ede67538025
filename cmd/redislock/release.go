package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/cmd/redislock/internal/redisurl"
)

// Bounds of release. A release is two calls: Resume makes the lock this
// process's (checking that the token holds every KEY), then Release gives
// it up, handing the key to the next in line.
const (
	// resumeTimeout bounds the resume, the first contact with Redis, as
	// run's pingTimeout does.
	resumeTimeout = 5 * time.Second
	// resumeTTL is the lease the resume gives the lock, a moment before
	// the release: longer than all that may come after the resume
	// (endTimeout), and short, since the lock ends by itself within it when
	// the release does not complete (Redis went away in between).
	resumeTTL = 2 * endTimeout
)

// release runs the release subcommand and returns the exit status: 0 when
// it released the lock on the keys that cfg.token held, exitNotHeld when
// the token does not hold one of them (nothing changed), exitRedis when
// Redis failed, 128+N when signal N ended the resume. Once the lock is
// resumed, signals wait for the release, bounded by endTimeout: at most
// resumeTimeout+endTimeout in all.
func release(cfg releaseConfig, stderr io.Writer) int {
	rdb, err := redisurl.NewClient(cfg.redisURL)
	if err != nil { // parseRelease made one from the same URL
		return usageError(stderr, err)
	}
	defer rdb.Close()
	sigs := make(chan os.Signal, 1)
	for _, s := range forwarded {
		if !signal.Ignored(s) { // nohup: stay immune
			signal.Notify(sigs, s)
		}
	}
	defer signal.Stop(sigs)

	locker := redislock.New(rdb, redislock.WithNamespace(cfg.namespace))
	lk, err := resume(locker, cfg, sigs)
	if lk == nil {
		return resumeFailed(cfg, err, stderr)
	}
	// One bound from here for all that is left with Redis: the release and
	// the clean-up behind it.
	end, cancel := context.WithTimeout(context.Background(), endTimeout)
	defer cancel()
	err = lk.Release(end)
	_ = locker.Shutdown(end)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, redislock.ErrNotHeld):
		fmt.Fprintf(stderr, "redislock: lock on %s not released: %s\n", lockName(cfg.keys), noLongerOurs(cfg.keys, err))
		return exitNotHeld
	case end.Err() != nil:
		fmt.Fprintf(stderr, "redislock: the release of the lock on %s did not complete within %v: Redis did not answer (the lease ends by itself within %v)\n",
			lockName(cfg.keys), endTimeout, resumeTTL)
	default:
		fmt.Fprintf(stderr, "redislock: the release of the lock on %s did not complete: %s (the lease ends by itself within %v)\n",
			lockName(cfg.keys), strings.TrimPrefix(err.Error(), "redislock: "), resumeTTL)
	}
	return exitRedis
}

// resume makes the lock on cfg's keys that cfg.token holds this process's
// (Locker.Resume). It returns when Resume does, or, at once, when a signal
// comes on sigs (the error is then an interrupted) or resumeTimeout passes
// (context.DeadlineExceeded). Resume runs in a goroutine of its own, that
// release does not wait for then: it ends with ctx, and a resume that
// Redis ran after all ends within resumeTTL.
func resume(locker *redislock.Locker, cfg releaseConfig, sigs <-chan os.Signal) (*redislock.Lock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resumeTimeout)
	defer cancel()
	type resumed struct {
		lk  *redislock.Lock
		err error
	}
	done := make(chan resumed, 1)
	go func() {
		lk, err := locker.Resume(ctx, cfg.keys, cfg.token, resumeTTL)
		done <- resumed{lk, err}
	}()
	var cause error
	select {
	case r := <-done:
		return r.lk, r.err
	case s := <-sigs:
		cause = interrupted{s}
	case <-ctx.Done():
		cause = ctx.Err()
	}
	select {
	case r := <-done:
		if r.lk != nil { // resumed as the wait ended: release it
			return r.lk, nil
		}
	default:
	}
	return nil, cause
}

// resumeFailed reports err, the error of resume, and returns the exit
// status.
func resumeFailed(cfg releaseConfig, err error, stderr io.Writer) int {
	const unknown = "not released (if Redis ran the resume, the lock is no longer its holder's, and ends by itself within %v)"
	var i interrupted
	switch {
	case errors.As(err, &i):
		fmt.Fprintf(stderr, "redislock: %v (signal %d) while releasing the lock on %s: "+unknown+"\n",
			i.sig, signalNumber(i.sig), lockName(cfg.keys), resumeTTL)
		return exitSignalBase + signalNumber(i.sig)
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "redislock: redis %s did not answer within %v: lock on %s "+unknown+"\n",
			redisurl.Redact(cfg.redisURL), resumeTimeout, lockName(cfg.keys), resumeTTL)
		return exitRedis
	case errors.Is(err, redislock.ErrNotHeld):
		why := strings.TrimPrefix(err.Error(), redislock.ErrNotHeld.Error()+": ") // names the key
		fmt.Fprintf(stderr, "redislock: lock on %s not released: %s\n", lockName(cfg.keys), why)
		return exitNotHeld
	}
	if uerr := resumeUsage(err, cfg.token); uerr != nil { // parseRelease checked them
		return usageError(stderr, uerr)
	}
	fmt.Fprintf(stderr, "redislock: redis %s: %s\n", redisurl.Redact(cfg.redisURL), strings.TrimPrefix(err.Error(), "redislock: "))
	return exitRedis
}
