package line

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A subscription is a Locker's pub/sub connection, subscribed to one of the
// Locker's wake channels, on which hand-offs to its lines are announced
// (see scripts.Keyspace.Wake): the Locker's one channel, or on a Cluster,
// the shard channel of one hash slot it waits in (SSUBSCRIBE, on the master
// that serves the slot: no other shard sees the messages). It runs while
// the Locker has lines on the channel, and subscriptionLinger longer, so
// that a process that waits for keys again and again keeps its connection.
//
// It is one goroutine, run, started by Lines.subscribe when a line takes a
// place in Redis; it returns, closing stopped in its defer, within
// receivePoll of Lines.retire saying it may, or, while go-redis reconnects
// it to a Redis that does not answer, once go-redis gives up (its dial and
// read timeouts). Nothing about it ever waits for Redis in a caller's path:
// subscribing, receiving, redialing (go-redis subscribes again by itself)
// and closing all happen in run.
type subscription struct {
	ls      *Lines
	wake    scripts.Wakeup
	armed   atomic.Bool   // the subscription is confirmed: announcements arrive
	stopped chan struct{} // closed when run has returned
	idle    time.Time     // since when no line uses it; under lines.mu
}

// receivePoll is how long run waits for a message before it looks whether
// to retire; retryDelay is how long it waits after the connection failed,
// before go-redis redials; subscriptionLinger is how long it stays after the
// Locker's last line ended.
const (
	receivePoll        = 100 * time.Millisecond
	retryDelay         = 50 * time.Millisecond
	subscriptionLinger = 250 * time.Millisecond
)

// subscribe starts a subscription to w's channel unless one runs. ls.mu is
// held.
func (ls *Lines) subscribe(w scripts.Wakeup) {
	if ls.subs[w.Channel] != nil {
		return
	}
	s := &subscription{ls: ls, wake: w, stopped: make(chan struct{})}
	ls.subs[w.Channel] = s
	ls.started = append(slices.DeleteFunc(ls.started, (*subscription).ended), s)
	go s.run()
}

// ended reports whether run has returned.
func (s *subscription) ended() bool {
	select {
	case <-s.stopped:
		return true
	default:
		return false
	}
}

func (s *subscription) run() {
	defer close(s.stopped)
	ctx := context.Background()
	subscribe := s.ls.r.Client.Subscribe
	if s.wake.Sharded {
		subscribe = s.ls.r.Client.SSubscribe
	}
	ps := subscribe(ctx, s.wake.Channel) // on failure, ReceiveTimeout redials
	defer func() { _ = ps.Close() }()
	for !s.ls.retire(s, subscriptionLinger) {
		msg, err := ps.ReceiveTimeout(ctx, receivePoll)
		switch m := msg.(type) {
		case *redis.Subscription:
			if (m.Kind == "subscribe" || m.Kind == "ssubscribe") && !s.armed.Swap(true) {
				s.ls.armed(s, true)
			}
		case *redis.Message:
			s.dispatch(m.Payload)
		}
		switch {
		case errors.Is(err, redis.ErrClosed):
			// The client is closed: no waiter can get anything any more,
			// and each learns it now rather than at its next attempt.
			s.armed.Store(false)
			s.ls.fail(err)
			time.Sleep(retryDelay)
		case err != nil && !isTimeout(err):
			// Lost: announcements go unheard until go-redis has
			// subscribed again. Heads poll meanwhile.
			if s.armed.Swap(false) {
				s.ls.armed(s, false)
			}
			time.Sleep(retryDelay)
		}
	}
}

// dispatch hands an announcement, "<fence> <lease> <token> <Redis key>"
// (see handOff in line.lua), to the lines.
func (s *subscription) dispatch(payload string) {
	f := strings.SplitN(payload, " ", 4)
	if len(f) != 4 {
		return
	}
	fence, err1 := strconv.ParseInt(f[0], 10, 64)
	lease, err2 := strconv.ParseInt(f[1], 10, 64)
	key, ok := strings.CutPrefix(f[3], s.ls.r.Keys.NS)
	if err1 != nil || err2 != nil || !ok {
		return
	}
	s.ls.mu.Lock()
	defer s.ls.mu.Unlock()
	s.ls.handedTo(key, scripts.Handoff{Token: f[2], Fence: fence, Lease: time.Duration(lease) * time.Millisecond})
}

// isTimeout reports whether err is ReceiveTimeout's timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// armed is called by the subscription s when it is confirmed (on) or lost
// (off). Heads of lines on its channel poll while it is lost, and ask
// Redis once it is back, since a hand-off may have gone unheard.
func (ls *Lines) armed(s *subscription, on bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, ln := range ls.lines {
		if ln.wake.Channel == s.wake.Channel {
			ln.check = ln.check || on && ln.place != noPlace
			if len(ln.waiters) > 0 {
				ln.waiters[0].poke()
			}
		}
	}
}

// fail ends the wait of every waiter of the Locker with err: the client is
// closed, and no attempt can be sent any more.
func (ls *Lines) fail(err error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, ln := range ls.lines {
		for _, w := range ln.waiters {
			w.fail(err)
		}
	}
}

// retire reports whether the subscription s may stop: no line on its
// channel has had a waiter for linger. It is then no longer the
// subscription of its channel.
func (ls *Lines) retire(s *subscription, linger time.Duration) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, ln := range ls.lines {
		if ln.wake.Channel == s.wake.Channel && (len(ln.waiters) > 0 || ln.own) {
			s.idle = time.Time{}
			return false
		}
	}
	if s.idle.IsZero() {
		s.idle = time.Now()
	}
	if time.Since(s.idle) < linger && !ls.shuttingDown {
		return false
	}
	if ls.subs[s.wake.Channel] == s {
		delete(ls.subs, s.wake.Channel)
	}
	return true
}

// Shutdown waits until the Locker's subscriptions have ended, or ctx ends.
// One that is idle retires at once, without lingering.
func (ls *Lines) Shutdown(ctx context.Context) error {
	ls.mu.Lock()
	ls.shuttingDown = true
	subs := slices.Clone(ls.started)
	ls.mu.Unlock()
	for _, s := range subs {
		select {
		case <-s.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
