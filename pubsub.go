package redislock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A subscription is a Locker's pub/sub connection, subscribed to the
// Locker's wake channel, on which hand-offs to its lines are announced. It
// runs while the Locker has lines, and subscriptionLinger longer, so that a
// process that waits for keys again and again keeps one connection.
//
// It is one goroutine, run, started by Locker.subscribe when a line takes a
// place in Redis; it returns, closing stopped in its defer, within
// receivePoll of lines.retire saying it may, or, while go-redis reconnects
// it to a Redis that does not answer, once go-redis gives up (its dial and
// read timeouts). Nothing about it ever waits for Redis in a caller's path:
// subscribing, receiving, redialing (go-redis subscribes again by itself)
// and closing all happen in run.
type subscription struct {
	locker  *Locker
	ps      *redis.PubSub
	armed   atomic.Bool   // the subscription is confirmed: announcements arrive
	stopped chan struct{} // closed when run has returned
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

// subscribe starts the Locker's subscription.
func (l *Locker) subscribe() *subscription {
	s := &subscription{
		locker:  l,
		ps:      l.client.Subscribe(context.Background()), // without a channel: connects in run
		stopped: make(chan struct{}),
	}
	go s.run()
	return s
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

// isArmed reports whether announcements reach the Locker. A nil
// subscription is not armed.
func (s *subscription) isArmed() bool { return s != nil && s.armed.Load() }

func (s *subscription) run() {
	defer close(s.stopped)
	defer func() { _ = s.ps.Close() }()
	ctx := context.Background()
	_ = s.ps.Subscribe(ctx, wakeChannel(s.locker.id)) // on failure, ReceiveTimeout redials
	for !s.locker.lines.retire(s, subscriptionLinger) {
		msg, err := s.ps.ReceiveTimeout(ctx, receivePoll)
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && !s.armed.Swap(true) {
				s.locker.lines.armed(true)
			}
		case *redis.Message:
			s.dispatch(m.Payload)
		}
		switch {
		case errors.Is(err, redis.ErrClosed):
			// The client is closed: no waiter can get anything any more,
			// and each learns it now rather than at its next attempt.
			s.armed.Store(false)
			s.locker.lines.fail(err)
			time.Sleep(retryDelay)
		case err != nil && !isTimeout(err):
			// Lost: announcements go unheard until go-redis has
			// subscribed again. Heads poll meanwhile.
			if s.armed.Swap(false) {
				s.locker.lines.armed(false)
			}
			time.Sleep(retryDelay)
		}
	}
}

// dispatch hands an announcement, "<fence> <lease> <token> <key>" (see
// handoffLua), to the lines.
func (s *subscription) dispatch(payload string) {
	f := strings.SplitN(payload, " ", 4)
	if len(f) != 4 {
		return
	}
	fence, err1 := strconv.ParseInt(f[0], 10, 64)
	lease, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	s.locker.lines.heard(s.locker, f[3], handoff{token: f[2], fence: fence, lease: time.Duration(lease) * time.Millisecond})
}

// isTimeout reports whether err is ReceiveTimeout's timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
