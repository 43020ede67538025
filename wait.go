package redislock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// How Obtain waits for a lock another holder has, without polling:
//
//   - Within a process, the Obtains waiting for a key queue up in FIFO order
//     and only the first contends on Redis. A new Obtain joins the end of the
//     queue without an attempt of its own when the key already has waiters.
//   - Across processes, the first waiter of each process takes a place in the
//     key's queue in Redis (acquireScript). While the queue is not empty, only
//     its first token may take the key, so processes take turns in order.
//   - The release of a key publishes the token whose turn it is
//     (releaseScript). Each Locker listens on one shared pub/sub connection
//     for the keys it waits on; the message wakes exactly that waiter, so one
//     release causes one attempt.
//   - Nothing depends on a message arriving. A waiter subscribes before its
//     next attempt, so a release in between is seen by that attempt; a lease
//     that expires publishes nothing, so every wait is also bounded by the
//     holder's remaining lease (reported by the failed attempt) and by a third
//     of queueLease, after which the waiter attempts again and so renews its
//     place. While the subscription is not confirmed (pub/sub unavailable,
//     its connection lost), waiters poll with jittered backoff instead.

// queueLease is how long a waiting process keeps its place in a key's queue
// in Redis after its latest attempt. A process that died loses its place
// after that long.
const queueLease = 3 * time.Second

// armTimeout bounds how long a waiter waits for its subscription to be
// confirmed before it starts polling.
const armTimeout = time.Second

// waiting is the state of a Locker's waiters. Its zero value is ready.
type waiting struct {
	mu     sync.Mutex
	queues map[string]*queue // by lock key
	sub    *subscription     // shared pub/sub connection; nil while no one waits
}

// A queue holds the waiters of one key in this process, first in line first.
type queue struct {
	waiters []*waiter
	armed   chan struct{} // closed once the subscription to the key's channel is confirmed
}

// A waiter is one Obtain waiting in line.
type waiter struct {
	key   string
	token string
	turn  chan struct{} // closed when the waiter is first in line
	wake  chan struct{} // a release announced its turn, or the subscription changed
}

// busy reports whether Obtains of this process wait for key.
func (w *waiting) busy(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queues[key] != nil
}

// join puts an Obtain for key in line and, for a key nobody in this process
// waited for, subscribes to the key's channel, waiting for that at most until
// ctx ends.
func (w *waiting) join(ctx context.Context, l *Locker, key, token string) *waiter {
	wt := &waiter{key: key, token: token, turn: make(chan struct{}), wake: make(chan struct{}, 1)}
	w.mu.Lock()
	q := w.queues[key]
	if q != nil {
		q.waiters = append(q.waiters, wt)
		w.mu.Unlock()
		return wt
	}
	if w.queues == nil {
		w.queues = make(map[string]*queue)
	}
	q = &queue{waiters: []*waiter{wt}, armed: make(chan struct{})}
	w.queues[key] = q
	close(wt.turn)
	sub := w.sub
	if sub == nil {
		sub = &subscription{ps: l.client.Subscribe(context.Background()), done: make(chan struct{}), stopped: make(chan struct{})}
		w.sub = sub
		go w.receive(sub)
	}
	w.mu.Unlock()
	sub.do(ctx, func(ctx context.Context, ps *redis.PubSub) error { return ps.Subscribe(ctx, wakeChannel(key)) })
	return wt
}

// leave takes wt out of line: the next waiter is first now. The last waiter
// of a key unsubscribes from its channel, and the last waiter of the Locker
// closes the subscription.
func (w *waiting) leave(wt *waiter) {
	w.mu.Lock()
	q := w.queues[wt.key]
	for i, x := range q.waiters {
		if x == wt {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(q.waiters) > 0 {
				close(q.waiters[0].turn)
			}
			break
		}
	}
	var sub *subscription
	last := len(q.waiters) == 0
	if last {
		delete(w.queues, wt.key)
		sub = w.sub
		if len(w.queues) == 0 {
			w.sub = nil
			w.mu.Unlock()
			// In the background: go-redis may hold the connection's lock
			// while it dials, and the Obtain leaving must keep its deadline.
			go sub.close()
			return
		}
	}
	w.mu.Unlock()
	if last {
		sub.do(context.Background(), func(ctx context.Context, ps *redis.PubSub) error { return ps.Unsubscribe(ctx, wakeChannel(wt.key)) })
	}
}

// await waits until wt is first in line and then, for at most armTimeout,
// until the subscription to its key is confirmed.
func (w *waiting) await(ctx context.Context, wt *waiter) error {
	select {
	case <-wt.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.mu.Lock()
	armed := w.queues[wt.key].armed
	w.mu.Unlock()
	t := time.NewTimer(armTimeout)
	defer t.Stop()
	select {
	case <-armed:
	case <-t.C: // no pub/sub: poll
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// armed reports whether releases of wt's key reach wt by pub/sub.
func (w *waiting) armed(wt *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.queues[wt.key].armed:
		return true
	default:
		return false
	}
}

// receive dispatches what the subscription receives until it is closed.
func (w *waiting) receive(sub *subscription) {
	defer close(sub.stopped)
	for {
		msg, err := sub.ps.Receive(context.Background())
		if sub.isClosed() {
			return
		}
		resubscribe := ""
		w.mu.Lock()
		switch m := msg.(type) {
		case *redis.Subscription:
			q := w.queues[strings.TrimPrefix(m.Channel, wakeChannel(""))]
			switch {
			case q == nil:
			case m.Kind == "subscribe":
				select {
				case <-q.armed:
				default:
					close(q.armed)
					q.waiters[0].poke() // a release may have gone unseen
				}
			case m.Kind == "unsubscribe":
				// The key's last waiter left and a new one came before the
				// unsubscribe took effect: subscribe again.
				resubscribe = m.Channel
			}
		case *redis.Message:
			if q := w.queues[strings.TrimPrefix(m.Channel, wakeChannel(""))]; q != nil && q.waiters[0].token == m.Payload {
				q.waiters[0].poke()
			}
		}
		if err != nil {
			// The connection is lost: releases go unseen until go-redis has
			// resubscribed. Waiters poll meanwhile.
			for _, q := range w.queues {
				select {
				case <-q.armed:
					q.armed = make(chan struct{})
				default:
				}
				q.waiters[0].poke()
			}
		}
		w.mu.Unlock()
		if resubscribe != "" {
			sub.do(context.Background(), func(ctx context.Context, ps *redis.PubSub) error { return ps.Subscribe(ctx, resubscribe) })
		}
		if err != nil {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-sub.done:
			}
		}
	}
}

func (wt *waiter) poke() {
	select {
	case wt.wake <- struct{}{}:
	default:
	}
}

// A subscription is a Locker's pub/sub connection.
type subscription struct {
	ps      *redis.PubSub
	done    chan struct{} // closed by close
	stopped chan struct{} // closed when receive has returned
}

func (s *subscription) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// do runs a (un)subscribe command, bounded by ctx and armTimeout: a
// subscription that fails only means waiters poll.
func (s *subscription) do(ctx context.Context, f func(context.Context, *redis.PubSub) error) {
	ctx, cancel := context.WithTimeout(ctx, armTimeout)
	defer cancel()
	_, _ = bounded(ctx, false, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx, s.ps) }, nil)
}

// close closes the connection and waits for receive to return.
func (s *subscription) close() {
	close(s.done)
	_ = s.ps.Close()
	<-s.stopped
}
