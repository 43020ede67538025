// Package lease is the layer of redislock that holds locks in this process:
// a Hold is one acquisition's keys, token, fences, lease and life, and its
// methods are the only writers of that life and of the lease's end; the
// keeper renews the leases of held locks and finds them lost.
//
// Below it is package scripts (what is in Redis, and how to run a script);
// above it the line (waiting) and the backends (where a hold lives: one
// deployment, or a quorum of masters), which make holds and release them
// through the Store interface; the root package gives holds to callers as
// Locks.
//
// The life of a hold (State) changes only in this file:
//
//	Held --BeginRelease--> Releasing --Ended--> Released
//	                           |----Ended (Redis failed: may be tried again)--> Held
//	Releasing --Pass--> Released (its successor holds the token)
//	Held --lose--> Lost (then given back in the background)
//
// Every transition out of Held calls endNow first, which is the one writer
// of over: the moment the lock ended for this process. Until is never
// later than that, and nothing that frees a key is sent before it (see the
// clock's invariant in clock.go).
//
// Lock order: the keeper's mu before a hold's mu, never after; no code
// holds two holds' mu at once. The line layer takes its own mu before a
// hold's.
package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// A Request is one acquisition, built once from a public call's options:
// every layer below the public API takes it, and none reads a Locker's
// options.
type Request struct {
	Keys       []string // the keys, in the caller's order: one, or a set's
	Set        bool     // a set's call (ObtainMulti): a set of one key too
	Token      string   // the token to take them with (the parts of a set across Cluster slots share one), or "": a new one
	Mode       scripts.Mode
	TTL        time.Duration // the lease
	Fenced     bool          // issue a fence per key (WithFencing)
	Holder     string        // the holder's description (WithHolder), "" for none
	Replicas   scripts.Replicas
	Try        bool          // a single attempt (TryObtain, WithWait(0))
	Wait       time.Duration // else how long to wait (WithWait): 0 for as long as ctx lasts
	MinBackoff time.Duration
	MaxBackoff time.Duration
}

// Plain reports whether r takes a plain lock (see scripts.go): exclusive,
// without a fence or a description; one key, or a set's.
func (r *Request) Plain() bool {
	return r.Mode.Exclusive() && !r.Fenced && r.Holder == ""
}

// Key is r's first key: the one key, or a set's first (errors name it).
func (r *Request) Key() string { return r.Keys[0] }

// A Store is where holds live, as the lease layer needs it: a deployment
// (one client) or a quorum of masters (see the backend layer).
type Store interface {
	// Renew sets the lease of each of sets, and returns a reply each.
	Renew(ctx context.Context, sets []Set) []Reply
	// Release finishes the release of h, begun by Hold.BeginRelease: it
	// frees h's keys (handing them on to the next in line) and reports the
	// outcome with Hold.Ended. When ctx ends first, the release goes on in
	// the background and finishes by itself.
	Release(ctx context.Context, h *Hold) error
	// GiveBack is Release for a hold that no caller waits for (lost, or
	// taken by an acquisition that failed or gave up), in the background,
	// counted as background work before it returns; the channel is closed
	// once Redis answered.
	GiveBack(h *Hold) <-chan struct{}
	// Batch names what h's renewals share a pipeline with: those of the
	// same node.
	Batch(h *Hold) string
}

// Events are what a hold reports, to the hooks of its Locker.
type Events interface {
	// Lost is called once when h is found lost (see Hold.lose).
	Lost(ctx context.Context, h *Hold, why error)
	// Renewed is called for each renewal of a kept lease, sent at sent.
	Renewed(ctx context.Context, h *Hold, sent time.Time, hedge bool, r Reply)
}

// Env is what the holds of one Locker share.
type Env struct {
	Store      Store
	Events     Events
	Background *scripts.Background
	Safety     time.Duration // see WithSafetyMargin
	// ReleaseBound is how long a release goes on in the background once
	// its caller stopped waiting: long enough for go-redis to send it again
	// after a timeout (see scripts.Timing.RetryWindow), and at least 5 s.
	ReleaseBound time.Duration
	keeper       keeper
}

// State is where a hold is in its life (see the package doc).
type State uint8

const (
	Held      State = iota // its token holds its keys, as far as this process knows
	Releasing              // a release is under way
	Released               // released, or passed on: not held by this process any more
	Lost                   // found lost: given back in the background
)

// A Hold is one acquisition: a token's hold of keys in Redis, with its
// lease as this process knows it.
type Hold struct {
	env    *Env
	Keys   []string   // in the caller's order
	Parts  [][]string // Keys by the script run that holds them: one Cluster slot's each (one, but for a set across slots)
	Token  string
	Mode   scripts.Mode
	Since  time.Time // when it was acquired, or passed to it
	Quorum bool      // held on a quorum of masters: its lease allows for drift (see Drift)

	// What the acquisition wrote, for the release to undo; set before the
	// hold is shared.
	Plain     bool             // taken by take.lua: while nothing else happens, drop.lua releases it
	Lined     bool             // got through a line: others likely wait
	Described bool             // a holder description was stored (WithHolder)
	Replicas  scripts.Replicas // that must acknowledge its writes (WithReplicas)
	First     *FirstAttempt    // the first attempt of its token, when a line's (see FirstAttempt)
	Resent    bool             // its acquisition may have a copy still to run (see scripts.Timing.MayResend)

	mu          sync.Mutex
	state       State
	fences      []int64 // one per key
	clock       clock
	over        time.Time     // when the lock ended for this process; zero while held (see endNow)
	why         error         // why it was lost (see lose); wraps ErrLockLost
	handles     int           // live handles of the acquisition (reentrancy: see the root package)
	gaveBack    chan struct{} // closed when the give-back that followed a loss is done
	kept        *keeping      // while KeepAlive renews it
	generations bool          // a command of a generation above 0 was sent: Redis may keep its generation
	unsure      bool          // a release's outcome was unknown: an earlier run may have released it (see Ended)
	part        bool          // a part of a set across slots being acquired: its loss is the set\'s (see MarkPart)
}

// NewHold returns the hold of token on r's keys, with fences, whose lease
// was set to lease by a command sent at sent (r.TTL, or what a hand-off
// gave); renewals set r.TTL.
func (e *Env) NewHold(r *Request, token string, fences []int64, sent time.Time, lease time.Duration) *Hold {
	h := &Hold{env: e, Keys: r.Keys, Parts: [][]string{r.Keys}, Token: token, Mode: r.Mode, Since: sent,
		Described: r.Holder != "", Replicas: r.Replicas, fences: fences, handles: 1,
		clock: clock{until: sent.Add(lease), ttl: r.TTL, genTTL: lease}}
	if h.fences == nil {
		h.fences = make([]int64, len(r.Keys))
	}
	return h
}

// NewQuorumHold is NewHold for a hold on a quorum of masters: its lease
// clock allows for the masters' clocks (see Drift).
func (e *Env) NewQuorumHold(r *Request, token string, sent time.Time) *Hold {
	h := e.NewHold(r, token, nil, sent, r.TTL)
	h.Quorum, h.clock.drift = true, true
	h.clock.until = sent.Add(h.clock.lease(r.TTL))
	return h
}

// Combine makes one hold of parts, the holds of the keys of a set across
// Cluster slots, slot by slot, taken with one token: the parts end
// (Released: the combined hold holds their keys), and its lease clock ends
// with the earliest of theirs, its commands of a generation above any of
// theirs, so that no late command of a part changes a lease after them. It
// returns a part that was lost instead, and combines nothing.
func (e *Env) Combine(r *Request, parts []*Hold) (h *Hold, lost *Hold) {
	h = e.NewHold(r, parts[0].Token, make([]int64, len(r.Keys)), time.Now(), r.TTL)
	h.Parts = nil
	for _, p := range parts {
		p.mu.Lock()
		if p.state != Held {
			p.mu.Unlock()
			return nil, p
		}
		p.state = Released
		if p.clock.until.Before(h.clock.until) {
			h.clock.until = p.clock.until
		}
		h.clock.gen = max(h.clock.gen, p.clock.gen+1)
		h.Resent = h.Resent || p.MayRunLate()
		for i, key := range p.Keys {
			h.fences[slices.Index(r.Keys, key)] = p.fences[i]
		}
		p.mu.Unlock()
		h.Parts = append(h.Parts, p.Keys)
	}
	h.generations = true // (its commands' generation is above 0)
	return h, nil
}

// ResumedHold returns the hold of token on r's keys that another process
// took, as found at sent (see scripts.Holding): in its mode, its lease
// clock ending at sent + the lease left, and its commands of a generation
// above any that Redis ran for the token, so that no late command of the
// process that took it can change the lease after them. It is claimed (with
// r.TTL and fences) before it is returned.
func (e *Env) ResumedHold(r *Request, token string, found scripts.Holding, sent time.Time) *Hold {
	rr := *r
	rr.Mode = found.Mode
	h := e.NewHold(&rr, token, nil, sent, found.Left)
	h.Described, h.generations = true, true // (its holders' descriptions are kept alive, if any)
	h.clock.gen, h.clock.genTTL = found.Gen+resumeGenStep, r.TTL
	return h
}

// resumeGenStep is how far a resumed hold's generation is above the
// highest that ran for its token: the Lock it took the lock from may have
// commands of later generations in flight (a Refresh to another length
// starts one, and may reach Redis after the Resume), which Redis must
// refuse. No process has a million of them in flight; generations stay
// far below 2^53 (Lua's exact integers) after millions of resumes.
const resumeGenStep = 1 << 20

// OnQuorum makes h a quorum's hold, whose lease allows for drift (see
// Drift); only before h is shared.
func (h *Hold) OnQuorum() { h.Quorum, h.clock.drift = true, true }

// MarkPart marks h as a part of a set across Cluster slots that its
// acquisition holds while it waits for the keys of later slots: a loss of
// h is the set's, which the set reports (see Combine), not h.
func (h *Hold) MarkPart() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.part = true
}

// ShortenTo makes h's lease clock end at until, when that is earlier: a
// hand-off gives a place's waiter its lease only up to the place's
// deadline. Only before h is shared.
func (h *Hold) ShortenTo(until time.Time) {
	if until.Before(h.clock.until) {
		h.clock.until = until
	}
}

// State returns where h is in its life.
func (h *Hold) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Fences returns h's fences, one per key (0: none).
func (h *Hold) Fences() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.fences)
}

// Until returns when the lease ends as far as this process can tell: the
// lease clock's end, or the moment the lock ended for this process if that
// is earlier (see clock).
func (h *Hold) Until() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until()
}

// until is Until; h.mu is held.
func (h *Hold) until() time.Time {
	if !h.over.IsZero() && h.over.Before(h.clock.until) {
		return h.over
	}
	return h.clock.until
}

// Lease returns the lease clock's end and the ttl renewals set.
func (h *Hold) Lease() (until time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock.until, h.clock.ttl
}

// endNow records that the lock ends for this process now, unless it ended
// already: it is found lost, or its release begins. It is the one writer of
// over, and every path that ends a lock calls it before it sends anything
// that frees the key, so Until is never later than the key's life. h.mu is
// held.
func (h *Hold) endNow() {
	if h.over.IsZero() {
		h.over = time.Now()
	}
}

// BeginRelease begins h's release: Held to Releasing, Until moved to now,
// and KeepAlive's renewals stopped. It reports false, and changes nothing,
// when h is not Held: released, being released, or lost (see NotHeld).
func (h *Hold) BeginRelease() bool {
	h.mu.Lock()
	if h.state != Held {
		h.mu.Unlock()
		return false
	}
	h.state = Releasing
	h.endNow()
	k := h.kept
	h.mu.Unlock()
	k.stop(context.Canceled)
	return true
}

// Ended records the outcome of h's release (see Store.Release): err when
// Redis failed it (it may or may not have run: h is Held again, and may be
// released again), else the keys it did not find held by h (nil: it
// released them all), and whether go-redis may have sent it twice. It
// returns the release's error: nil, err, or ErrNotHeld saying what was
// found. A release that found every key gone, while an earlier run of it
// may have released them (this run was sent again, or an earlier release of
// h had an unknown outcome), before the lease clock's end (so no lease ran
// out) released h: the keys were deleted, by that earlier run, or by a
// fault this process cannot tell from it (a failover that lost the key,
// FLUSHALL, another client's DEL). Reported as released, since it most
// likely was.
func (h *Hold) Ended(lost []string, resent bool, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if h.state == Releasing {
			h.state = Held
		}
		h.unsure = h.unsure || !scripts.Refused(err)
		if scripts.IsBackground(err) {
			return err
		}
		return scripts.Failed("release", h.Keys[0], err)
	}
	lostBefore := h.state == Lost
	if h.state == Releasing {
		h.state = Released
	}
	h.unsure = h.unsure || resent
	early := !lostBefore && time.Now().Before(h.clock.until)
	if lost == nil || len(lost) == len(h.Keys) && h.unsure && early {
		return nil
	}
	if early && len(h.Keys) == 1 {
		return fmt.Errorf("%w: %s: gone before its lease's end (Redis lost it, or an earlier run of this release, whose reply was lost, released it)", scripts.ErrNotHeld, scripts.QuoteKey(h.Keys[0]))
	}
	return h.notHeld(lost)
}

// Pass ends h, whose release has begun, with a pass to another waiter of
// its Locker, whose ttl is ttl, when the rest of h's lease fits it (between
// ttl/2 and ttl) and no command that sets the lease is in flight (it could
// leave a lease shorter than the one passed on): h is Released, and its
// successor, returned, holds the same token with a lease clock of its own,
// whose commands start a generation of their own, so that no late command
// of h can change the lease after them. nil when h cannot be passed (its
// release has not begun, it was lost, or the lease does not fit).
func (h *Hold) Pass(ttl time.Duration) *Hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The lease clock's end, which the successor inherits: Until of h
	// itself ended when its release began.
	left := time.Until(h.clock.until)
	if h.state != Releasing || h.why != nil || h.clock.busy() || left < ttl/2 || left > ttl {
		return nil
	}
	h.state = Released
	return &Hold{env: h.env, Keys: h.Keys, Parts: h.Parts, Token: h.Token, Mode: h.Mode, Since: time.Now(),
		Plain: h.Plain, Lined: h.Lined, Described: h.Described, First: h.First, Resent: h.Resent, Replicas: h.Replicas,
		fences: make([]int64, len(h.Keys)), handles: 1, generations: h.generations,
		clock: clock{until: h.clock.until, ttl: ttl, gen: h.clock.gen + 1, genTTL: ttl}}
}

// Passable reports whether h is Held, and its lease has not run out.
func (h *Hold) Passable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == Held && time.Now().Before(h.until())
}

// MayRunLate reports whether a copy of a command that could take h's keys
// for its token may still run: its release must then mark the token spent
// (see spend.lua).
func (h *Hold) MayRunLate() bool { return h.Resent || h.First.MayRun() }

// Clean names the side keys h's token may have written, for its release to
// clean (see release.lua): "g" generations, "h" a description, "f" the
// fence of a hand-off (a hold got through a line); "-" none.
func (h *Hold) Clean() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := ""
	if h.generations {
		s += "g"
	}
	if h.Described {
		s += "h"
	}
	if h.Lined {
		s += "f"
	}
	if s == "" {
		return "-"
	}
	return s
}

// Droppable reports whether drop.lua may release h: a plain lock not got
// through a line, no generation stored for it, and no copy of its
// acquisition that may still run (which must be marked spent).
func (h *Hold) Droppable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Plain && !h.Lined && !h.generations && !h.MayRunLate()
}

// lose ends h for a loss: the one function that decides that a lock is
// lost, found gone or taken (by a renewal, Refresh, TTL: why says so), or
// with its lease run out and no renewal answered (the keeper's timer). Under
// h.mu it moves Until to now (endNow) and, unless a release of h has begun
// (the key is then gone by its doing: no loss), makes h Lost, counts the
// give-back as background work, and only then ends the kept contexts with
// ErrLockLost, reports the loss (Events.Lost, with ctx, the context of the
// call that found it), and gives h's keys back in the background, so that
// a lock whose renewals Redis ran but did not confirm in time is free for
// others as soon as Redis answers, not a lease later. A Release after it
// returns ErrNotHeld at once; a Shutdown after that Release waits for the
// give-back.
func (h *Hold) lose(ctx context.Context, why error) {
	h.mu.Lock()
	h.endNow()
	if h.state != Held {
		h.mu.Unlock()
		return
	}
	h.state, h.why = Lost, why
	k := h.kept
	gaveBack := make(chan struct{})
	h.gaveBack = gaveBack
	h.env.Background.Begin() // until the give-back counts itself
	h.mu.Unlock()
	k.stop(scripts.ErrLockLost)
	if !h.part {
		h.env.Events.Lost(ctx, h, why)
	}
	done := h.env.Store.GiveBack(h)
	h.env.Background.End()
	go func() {
		<-done
		close(gaveBack)
	}()
}

// WaitGiveBack waits until the give-back that followed h's loss is done, or
// ctx ends: a Release of a lost lock returns once the keys it still held
// are free.
func (h *Hold) WaitGiveBack(ctx context.Context) {
	h.mu.Lock()
	done := h.gaveBack
	h.mu.Unlock()
	if done != nil {
		scripts.Await(ctx, done, h.env.ReleaseBound)
	}
}

// Gone is why h is lost when a command found a key gone or another's: its
// i-th key (from 1), or one of them when i is 0.
func (h *Hold) Gone(i int) error {
	what := scripts.QuoteKeys(h.Keys)
	if i >= 1 && i <= len(h.Keys) {
		what = scripts.QuoteKey(h.Keys[i-1])
	}
	return fmt.Errorf("%w: %s was gone or held by another owner", scripts.ErrLockLost, what)
}

// Lose is lose for a command that found key i of h gone (see Gone), and
// returns the error of that call: ErrNotHeld, saying so.
func (h *Hold) Lose(ctx context.Context, i int) error {
	h.lose(ctx, h.Gone(i))
	return h.NotHeld()
}

// GiveBack releases h in the background, for an acquisition that failed
// or gave up after it took it, and returns a channel closed once that is
// done (at once when h was not Held: nothing to give back).
func (h *Hold) GiveBack() <-chan struct{} {
	h.env.Background.Begin() // before the release is begun: a Shutdown after a Release that finds it begun waits for it
	defer h.env.Background.End()
	if !h.BeginRelease() {
		done := make(chan struct{})
		close(done)
		return done
	}
	return h.env.Store.GiveBack(h)
}

// lapse records that h, which its acquisition has not returned yet, is not
// held: its lease ended before the acquisition could renew it. Nobody held
// it, so nobody is told; the acquisition gives it back (on a quorum, the
// masters of a minority may hold it still).
func (h *Hold) lapse() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endNow()
	if h.why == nil {
		h.why = fmt.Errorf("%w: %s: the lease ran out before the acquisition returned", scripts.ErrLockLost, scripts.QuoteKeys(h.Keys))
	}
}

// NotHeld is the error of an operation on h that found it not held, or
// that h's state refused: ErrNotHeld, with why it was found lost.
func (h *Hold) NotHeld() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notHeld(nil)
}

// notHeld is NotHeld, naming lost, the keys a release did not find held
// (nil: not known). h.mu is held.
func (h *Hold) notHeld(lost []string) error {
	switch {
	case h.why != nil:
		return fmt.Errorf("%w: %s", scripts.ErrNotHeld, strings.TrimPrefix(h.why.Error(), scripts.ErrLockLost.Error()+": "))
	case lost == nil:
	case len(h.Keys) > 1:
		return fmt.Errorf("%w: %s: not held by this lock any more (the set's other keys were released)", scripts.ErrNotHeld, scripts.QuoteAll(lost))
	case h.unsure:
		return fmt.Errorf("%w: %s: an earlier run of this release may have released it (its reply was lost) before the lease ran out, or the lease ran out first", scripts.ErrNotHeld, scripts.QuoteKey(h.Keys[0]))
	}
	return scripts.ErrNotHeld
}

// Join takes another handle of h for a call whose ctx carries it (see the
// root package's reentrancy), and reports whether it did: h is Held and its
// lease has not run out. lost reports that it was found lost or its lease
// ran out: the call fails (ErrLockLost), it does not wait for itself.
func (h *Hold) Join(take bool) (joined, lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	live := h.state == Held && h.handles > 0
	lost = h.state == Lost || live && !time.Now().Before(h.until())
	if take && live && !lost {
		h.handles++
	}
	return live && !lost, lost
}

// Leave ends a handle of h, and reports whether it was the last: h must
// then be released.
func (h *Hold) Leave() (last bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handles--
	return h.handles == 0
}

// Rejoin undoes Leave after a release that failed, so that the handle may
// release again.
func (h *Hold) Rejoin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handles++
}

// A FirstAttempt is what is known of the first attempt of a line's token:
// the one that may take a free key or a place. While it may still run, the
// token's withdrawal must not run before it, and the hold the token becomes
// must be marked spent when it is released (see spend.lua). The token's
// later attempts (renewals) may run late without harm: they take no free
// key and no place (see acquire.lua). The line and the hold share it.
type FirstAttempt struct {
	Out    atomic.Bool // sent, and not returned
	unsure atomic.Bool // it returned, but may run later: its outcome was unknown, or go-redis may have sent it twice
}

// Returned records the attempt's outcome, (res, err); f may be nil (the
// attempt was not a first one).
func (f *FirstAttempt) Returned(res scripts.AttemptResult, err error) {
	if f != nil {
		f.unsure.Store(err != nil && !scripts.Refused(err) || res.Resent)
		f.Out.Store(false)
	}
}

// MayRun reports whether the attempt may still run; f may be nil (a token
// with no such attempt).
func (f *FirstAttempt) MayRun() bool { return f != nil && (f.Out.Load() || f.unsure.Load()) }

// MayHaveReleased reports whether a release of h whose run found h's keys
// gone, and that go-redis may have sent twice, had released them itself by
// an earlier run (see Ended): before the lease clock's end, and h was not
// found lost before.
func (h *Hold) MayHaveReleased() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsure = true
	return h.state != Lost && h.why == nil && time.Now().Before(h.clock.until)
}
