package line

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Wait waits in the line of r's keys until they are handed or passed to
// this call, or ctx ends: the one call an acquisition makes to wait. The
// line decides what to do next (see next); this loop only does it.
// blocked, when not nil, is what an attempt made just before found: the key
// held by another owner. It also returns how many attempts it sent.
func (ls *Lines) Wait(ctx context.Context, r *lease.Request, blocked *scripts.AttemptResult) (_ *lease.Hold, attempts int, _ error) {
	deadline, _ := ctx.Deadline()
	ln, w := ls.enter(r, deadline, blocked)
	for {
		s := ls.next(ln, w)
		switch {
		case s.hold != nil:
			// The hold may have been handed or passed over with another
			// lease or no fence, or without an acknowledged write of ours
			// (see WithReplicas), or with less than half of its lease left
			// (the waiter woke late): the claim renews it then.
			s.hold.Replicas = r.Replicas
			err := s.hold.Claim(ctx, r, s.claim || r.Replicas.N > 0)
			if err == nil {
				return s.hold, attempts, nil
			}
			if !errors.Is(err, lease.ErrLeaseRanOut) {
				return nil, attempts, err
			}
			ln = ls.reenter(ln, w)
			continue
		case s.err != nil:
			ls.quit(ln, w)
			return nil, attempts, scripts.Failed("acquire", r.Key(), s.err)
		case s.sent:
			attempts++
		default:
			_ = scripts.Sleep(ctx, w.wake, s.wait)
		}
		if ctx.Err() != nil {
			blocked, last := ls.quit(ln, w)
			if last != nil {
				return nil, attempts, scripts.WaitFailed(r.Key(), ctx.Err(), last)
			}
			return nil, attempts, NotObtained(r.Keys, ctx.Err(), blocked)
		}
	}
}

// NotObtained is the error of an acquisition that found keys held by
// another owner; cause is the ctx error that ended the wait, or nil;
// blocked is the holder's lease left, as the latest reply said (see
// blockedFor in line.lua, and scripts.LeaseNoExpiry).
func NotObtained(keys []string, cause error, blocked time.Duration) error {
	owner := "another owner"
	if blocked == scripts.LeaseNoExpiry {
		owner = "another owner without an expiry: it will not be released by itself (see Locker.Inspect)"
	}
	if cause == nil {
		return fmt.Errorf("%w: %s is held by %s", scripts.ErrNotObtained, scripts.QuoteKeys(keys), owner)
	}
	return fmt.Errorf("%w: %s is held by %s: %w", scripts.ErrNotObtained, scripts.QuoteKeys(keys), owner, cause)
}

// Withdraw takes token out of the line of keys in Redis (a place a line
// gave up), or releases the keys if token holds them (they were handed to
// that place, or taken by an acquisition that gave up), which hands them
// on. With spend, it also marks the token spent (see spend.lua), for as
// long as go-redis may still send a command of it: a copy of an attempt
// that runs later takes nothing. It tries again until it reaches Redis,
// within scripts.WithdrawTimeout: the attempt may have taken the key, and
// nothing else would give it back before its lease ends.
func (ls *Lines) Withdraw(keys []string, token string, m scripts.Mode, spend bool) {
	ctx, cancel := context.WithTimeout(context.Background(), scripts.WithdrawTimeout)
	defer cancel()
	a := scripts.ReleaseArgs{Keys: keys, Token: token, Mode: m, Wake: ls.Wake(keys[0])}
	if spend {
		a.Spend = ls.r.SpendFor()
	}
	for {
		res, err := ls.r.Release(ctx, a)
		if err == nil || scripts.Refused(err) || errors.Is(err, redis.ErrClosed) || scripts.Sleep(ctx, nil, lease.RenewRetry) != nil {
			ls.Released(keys, Release{}, res, err)
			return
		}
	}
}

// Wake returns the channel on which the Locker hears of hand-offs of key
// to its places.
func (ls *Lines) Wake(key string) string { return ls.r.Keys.Wake(ls.id, key, ls.r.Sharded).Channel }
