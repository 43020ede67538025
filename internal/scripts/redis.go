package scripts

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is one Redis deployment as the scripts reach it: a go-redis client
// (of a single node, a Sentinel's primary, or a Cluster), what its options
// say of its timing, the names of the library's keys there, and what its
// latest replies and failures say of the link.
type Redis struct {
	Client  redis.UniversalClient
	Timing  Timing
	Keys    Keyspace
	Sharded bool // a Cluster's client: hand-offs are announced on shard channels

	failure atomic.Pointer[failure] // see LastFailure
	rtts    roundTrips              // of answered attempts (see Silence)
}

// NewRedis returns client's Redis, with the library's keys under ns.
func NewRedis(client redis.UniversalClient, ns string) *Redis {
	_, sharded := client.(*redis.ClusterClient)
	return &Redis{Client: client, Timing: TimingOf(client), Keys: Keyspace{NS: ns}, Sharded: sharded}
}

// ReleaseBound is how long a release goes on in the background once its
// caller stopped waiting: long enough for go-redis to send it again after a
// timeout (see Timing.RetryWindow), and at least WithdrawTimeout.
func (r *Redis) ReleaseBound() time.Duration {
	return max(WithdrawTimeout, r.Timing.RetryWindow()+time.Second)
}

// SpendFor is how long a spent token's mark lasts (see spend.lua): as long
// as a release goes on, and at least 10 s, which covers every copy go-redis
// sends of a command, and of one sent before it.
func (r *Redis) SpendFor() time.Duration { return max(10*time.Second, r.ReleaseBound()) }

// WithdrawTimeout bounds a withdrawal of a token (see the line layer): it
// goes on after the Obtain that gave it up returned, and takes effect when
// Redis answers.
const WithdrawTimeout = 5 * time.Second

// NoteErr asks a ClusterClient to reload its slot map after a command
// failed on the network, or was redirected: go-redis does so by itself
// after MOVED replies to its own routing, not after a master died, nor for
// commands sent to one master's client (WithReplicas), and a failover would
// otherwise go unseen for up to 10 s. (ReloadState only marks the map for a
// reload in the background.) It also keeps the failure for LastFailure.
func (r *Redis) NoteErr(err error) {
	if err == nil || (Refused(err) && !Redirected(err)) || IsCtxErr(err) {
		return
	}
	r.failure.Store(&failure{err: err, at: time.Now()})
	if c, ok := r.Client.(*redis.ClusterClient); ok {
		c.ReloadState(context.Background())
	}
}

// A failure is the latest error a command failed with on the network or in
// go-redis (not a refusal: see NoteErr), and when.
type failure struct {
	err error
	at  time.Time
}

// LastFailure adds to noAnswer, the error of a wait whose attempts Redis did
// not answer, the failure of the latest command that failed within the last
// recentFailure, if any: a wait that ends while its attempt is still in
// flight (go-redis redials) still says why, with go-redis's error in the
// chain (errors.As finds a *net.OpError).
func (r *Redis) LastFailure(noAnswer error) error {
	if f := r.failure.Load(); f != nil && time.Since(f.at) < recentFailure {
		return fmt.Errorf("%w (the latest command failed: %w)", noAnswer, f.err)
	}
	return noAnswer
}

// recentFailure is how recent a failure LastFailure reports is.
const recentFailure = 10 * time.Second

// noAnswer is how long an attempt may go unanswered before a wait that
// ends is put down to Redis (it did not answer) rather than to the holder,
// on a link whose round trips take less than half of it (see Silence): a
// healthy Redis answers in well under a millisecond, and a wrong "Redis
// failed" only makes a caller retry, while a wrong "held by another owner"
// may make it skip work.
const noAnswer = 100 * time.Millisecond

// Silence is how long an attempt may go unanswered before Redis is taken
// to have stopped answering: noAnswer, or twice the link's round trip on a
// slower link, so that a slow but healthy link does not turn contention
// into a Redis failure.
func (r *Redis) Silence() time.Duration {
	return max(noAnswer, 2*r.rtts.typical())
}

// Answered records the round trip d of an answered attempt.
func (r *Redis) Answered(d time.Duration) { r.rtts.add(d) }

// roundTrips are the round trips of the latest two answered attempts.
type roundTrips struct {
	mu         sync.Mutex
	last, prev time.Duration
}

func (rt *roundTrips) add(d time.Duration) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.prev, rt.last = rt.last, d
}

// typical is the smaller of the latest two (the latest while there is only
// one): one slow reply (a retransmission, a pause of this process) does not
// make a Redis that stops answering right after it look like a slow link.
func (rt *roundTrips) typical() time.Duration {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.prev == 0 {
		return rt.last
	}
	return min(rt.prev, rt.last)
}
