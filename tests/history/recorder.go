package history

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seed5e0b76d9/redislock"
)

// ChildEnv names the environment variable that makes the test binary a
// worker process: it holds the worker's ChildConfig as JSON.
const ChildEnv = "REDISLOCK_HISTORY_CHILD"

// A ChildConfig tells a worker process what to do.
type ChildConfig struct {
	Proc     int
	Seed     uint64
	Deploy   DeployConfig
	Resource string    // the address of the resource's Redis
	Keys     []KeySpec // the lock keys; the resource of key k is "res:"+k
	Sets     bool      // the workers also take sets of keys (ObtainMulti...)
	Workers  int       // goroutines
	TTL      time.Duration
	Wait     time.Duration // how long an Obtain or WithLock waits at most
	Margin   time.Duration // WithSafetyMargin
	HoldMax  time.Duration // the longest pause between two operations under a lock
	ThinkMax time.Duration // the longest pause between a release and the next acquisition
}

// A KeySpec is a lock key and the kind of lock it is.
type KeySpec struct {
	Name    string
	Kind    string // KindLock, KindRW or KindSemaphore
	Permits int    // KindSemaphore: n
}

// Kinds of lock keys.
const (
	KindLock      = "lock"      // exclusive acquisitions only
	KindRW        = "rw"        // readers (WithShared) and writers
	KindSemaphore = "semaphore" // permits (WithPermits(n))
)

// resourceOf is the resource the lock on key protects.
func resourceOf(key string) string { return "res:" + key }

// ChildMain runs a worker process with the ChildConfig in $ChildEnv, and
// returns its exit status. Its workers repeat, until standard input is
// closed: pick a key (or, with Sets, now and then a set of keys), acquire
// it (Obtain, TryObtain or WithLock, or their Multi, in the key's mode),
// keep the lease alive, read and write the resource of each key held a
// few times (writers and permits write with SetFenced and the key's
// fence, then read; readers read), release. Every step is recorded as an
// Event on standard output.
func ChildMain() int {
	var cfg ChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(ChildEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "history child: bad config:", err)
		return 2
	}
	out := newEmitter(os.Stdout)
	defer out.close()
	ignore := goleak.IgnoreCurrent() // the emitter's goroutine

	redis.SetLogger(quiet{}) // go-redis logs dial failures while the nemesis works; stderr is for real trouble

	stop, cancel := context.WithCancel(context.Background())
	go func() { // standard input closed (or the parent gone): stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	p := &process{cfg: cfg, out: out, holds: make(map[string]*hold)}
	locker, closeClients, err := cfg.Deploy.Locker(p.options()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "history child:", err)
		return 2
	}
	p.locker = locker
	p.resource = redis.NewClient(&redis.Options{Addr: cfg.Resource})

	probeDone := make(chan struct{})
	go func() { defer close(probeDone); p.probeStalls(stop) }()
	out.emit(Event{Type: EvReady, Proc: cfg.Proc, At: Now()})

	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() { p.work(stop, w) })
	}
	wg.Wait()
	<-probeDone

	var problems []string
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := locker.Shutdown(sctx); err != nil {
		problems = append(problems, "Shutdown: "+err.Error())
	}
	scancel()
	p.watchers.Wait()
	_ = p.resource.Close()
	closeClients()
	if err := goleak.Find(ignore); err != nil {
		problems = append(problems, "leaked goroutines: "+err.Error())
	}
	out.emit(Event{Type: EvExit, Proc: cfg.Proc, At: Now(), Err: strings.Join(problems, "; ")})
	return 0
}

// quiet is a go-redis logger that logs nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// A process is the state of one worker process.
type process struct {
	cfg      ChildConfig
	out      *emitter
	locker   *redislock.Locker
	resource *redis.Client
	watchers sync.WaitGroup // the goroutines that wait on lock contexts

	mu    sync.Mutex
	holds map[string]*hold // by token: the held locks, for the hooks
}

// options are the Locker's: fenced, with the hooks that record.
func (p *process) options() []redislock.Option {
	return []redislock.Option{
		redislock.WithFencing(),
		redislock.WithSafetyMargin(p.cfg.Margin),
		redislock.WithBackoff(5*time.Millisecond, 100*time.Millisecond),
		redislock.WithHooks(redislock.Hooks{
			Obtain: p.onObtain,
			Renew:  p.onRenew,
			Lost:   p.onLost,
		}),
	}
}

// An attemptKey carries an acquisition attempt in the ctx of its call, so
// that the Obtain hook, which runs before the call returns, can stamp it.
type attemptKey struct{}

type attempt struct {
	hook  atomic.Int64 // when the Obtain hook ran for the acquisition
	token atomic.Pointer[string]
	fence atomic.Int64
	hold  *hold // registered by the hook, for WithLock (whose lock has no handle)
}

// onObtain stamps the attempt of ctx and registers its token, before the
// call returns: the stamp bounds the start of the holder's right from
// below (Redis gave the lock before the hook ran; the holder can act only
// after the call returned).
func (p *process) onObtain(ctx context.Context, e redislock.ObtainEvent) {
	at := Now()
	a, ok := ctx.Value(attemptKey{}).(*attempt)
	if !ok || e.Joined || e.Outcome != redislock.OutcomeAcquired {
		return
	}
	a.hook.Store(at)
	a.token.Store(&e.Token)
	a.fence.Store(e.Fence)
	if a.hold != nil {
		p.register(e.Token, a.hold)
	}
}

// onRenew reads the lease's end after each renewal.
func (p *process) onRenew(_ context.Context, e redislock.RenewEvent) {
	if e.Outcome != redislock.OutcomeRenewed {
		return
	}
	if h := p.held(e.Token); h != nil {
		h.sampleUntil()
	}
}

// onLost records the moment the library reports a loss: it runs on the
// goroutine that cancelled the lock's context, right after. A set across
// Cluster slots is made of parts, and its first part has the set's token:
// the loss of that part alone (its keys are not the set's) comes before
// the set's context ends, and is not the end of the set's right.
func (p *process) onLost(_ context.Context, e redislock.LostEvent) {
	at := Now()
	keys := e.Keys
	if keys == nil {
		keys = []string{e.Key}
	}
	if h := p.held(e.Token); h != nil && slices.Equal(keys, h.keys) {
		h.done(SrcLostHook, at, e.Err)
	}
}

func (p *process) register(token string, h *hold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds[token] = h
}

func (p *process) unregister(token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.holds, token)
}

func (p *process) held(token string) *hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holds[token]
}

// A hold is a lock a worker holds: of one key, or of a set of keys.
type hold struct {
	p      *process
	worker int
	id     int64
	keys   []string // the key, or the set's keys
	fences []int64  // a fence per key of keys
	mode   string

	mu       sync.Mutex
	until    func() time.Time // the lease's end as the Lock reports it; nil when unknown
	maxUntil int64            // the largest Until read
}

// sampleUntil reads the lease's end and keeps the largest reading.
func (h *hold) sampleUntil() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until != nil {
		h.maxUntil = max(h.maxUntil, Mono(h.until()))
	}
	return h.maxUntil
}

// readUntilFrom makes the hold read the lease's end from until.
func (h *hold) readUntilFrom(until func() time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until = until
}

func (h *hold) latestUntil() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxUntil
}

// done records that the lock's context was seen done at at.
func (h *hold) done(src string, at int64, cause error) {
	u := h.latestUntil()
	e := Event{Type: EvDone, Proc: h.p.cfg.Proc, Worker: h.worker, Hold: h.id, At: at, Source: src, Until: u}
	if cause != nil {
		e.Err = cause.Error()
	}
	h.p.out.emit(e)
}

// watch stamps the moment ctx is done, seen by a goroutine that waits for
// nothing else; it returns once ctx is done.
func (h *hold) watch(ctx context.Context) {
	h.p.watchers.Go(func() {
		<-ctx.Done()
		h.done(SrcWatch, Now(), context.Cause(ctx))
	})
}

// poll reports whether ctx is done, recording when it was seen so.
func (h *hold) poll(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	h.done(SrcPoll, Now(), context.Cause(ctx))
	return true
}

// A worker is one goroutine of a process.
type worker struct {
	p    *process
	n    int
	rng  *rand.Rand
	hold int64 // the latest attempt's number
}

// work acquires, uses and releases locks until stop.
func (p *process) work(stop context.Context, n int) {
	w := &worker{p: p, n: n, rng: rand.New(rand.NewPCG(p.cfg.Seed, uint64(p.cfg.Proc*1000+n)))}
	for stop.Err() == nil {
		if p.cfg.Sets && w.rng.IntN(10) < 3 {
			keys, mode, opts := w.set()
			switch r := w.rng.IntN(10); {
			case r == 0:
				w.obtain(stop, keys, mode, CallTryMulti, opts)
			case r <= 3:
				w.withLockMulti(stop, keys, mode, opts)
			default:
				w.obtain(stop, keys, mode, CallObtainMulti, opts)
			}
		} else {
			ks := p.cfg.Keys[w.rng.IntN(len(p.cfg.Keys))]
			mode, opts := w.mode(ks)
			switch r := w.rng.IntN(10); {
			case r == 0:
				w.obtain(stop, []string{ks.Name}, mode, CallTry, opts)
			case r <= 3 && ks.Kind != KindSemaphore: // permits cannot be joined, so their Until could not be read
				w.withLock(stop, ks.Name, mode, opts)
			default:
				w.obtain(stop, []string{ks.Name}, mode, CallObtain, opts)
			}
		}
		w.sleep(stop, w.rng.Int64N(int64(p.cfg.ThinkMax)+1))
	}
}

// mode picks the mode of the next acquisition of ks.
func (w *worker) mode(ks KeySpec) (string, []redislock.Option) {
	switch ks.Kind {
	case KindRW:
		if w.rng.IntN(10) < 6 {
			return ModeReader, []redislock.Option{redislock.WithShared()}
		}
		return ModeWriter, nil
	case KindSemaphore:
		return ModePermit, []redislock.Option{redislock.WithPermits(ks.Permits)}
	}
	return ModeExclusive, nil
}

// set picks the keys and mode of the next set (semaphores are no part of
// sets): 4 times in 10 a reader set of the read-write keys, else an
// exclusive set of 2 or 3 of the lock and read-write keys (the writer of
// each read-write key in it); the keys in a random order, which Keys and
// Fences keep.
func (w *worker) set() ([]string, string, []redislock.Option) {
	var rw, all []string
	for _, ks := range w.p.cfg.Keys {
		switch ks.Kind {
		case KindRW:
			rw = append(rw, ks.Name)
			all = append(all, ks.Name)
		case KindLock:
			all = append(all, ks.Name)
		}
	}
	if len(rw) >= 2 && w.rng.IntN(10) < 4 {
		w.rng.Shuffle(len(rw), func(i, j int) { rw[i], rw[j] = rw[j], rw[i] })
		return rw[:min(len(rw), 2+w.rng.IntN(2))], ModeReader, []redislock.Option{redislock.WithShared()}
	}
	w.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(len(all), 2+w.rng.IntN(2))], ModeExclusive, nil
}

func (w *worker) sleep(stop context.Context, ns int64) {
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-stop.Done():
	case <-t.C:
	}
}

// attempt starts the record of an acquisition attempt of keys: one key,
// or a set (a Call*Multi).
func (w *worker) attempt(keys []string, mode, call string) Event {
	w.hold++
	ev := Event{Type: EvAcquire, Proc: w.p.cfg.Proc, Worker: w.n, Hold: w.hold, Key: keys[0], Mode: mode, Call: call}
	if call == CallObtainMulti || call == CallTryMulti || call == CallWithLockMulti {
		ev.Keys = keys
	}
	return ev
}

// outcome classifies an acquisition's error.
func outcome(stop context.Context, err error) string {
	switch {
	case err == nil:
		return OutOK
	case errors.Is(err, redislock.ErrNotObtained):
		return OutNotObtained
	case stop.Err() != nil && errors.Is(err, context.Canceled):
		return OutCanceled
	}
	return OutError
}

// obtain is one Obtain or TryObtain of keys[0] (or ObtainMulti or
// TryObtainMulti of the set keys), and if it acquired, the use and release
// of the lock under KeepAlive.
func (w *worker) obtain(stop context.Context, keys []string, mode, call string, opts []redislock.Option) {
	ev := w.attempt(keys, mode, call)
	a := &attempt{}
	ctx, cancel := context.WithTimeout(context.WithValue(stop, attemptKey{}, a), w.p.cfg.Wait)
	var lk *redislock.Lock
	var err error
	ev.Invoke = Now()
	switch call {
	case CallTry:
		lk, err = w.p.locker.TryObtain(ctx, keys[0], w.p.cfg.TTL, opts...)
	case CallObtainMulti:
		lk, err = w.p.locker.ObtainMulti(ctx, keys, w.p.cfg.TTL, opts...)
	case CallTryMulti:
		lk, err = w.p.locker.TryObtainMulti(ctx, keys, w.p.cfg.TTL, opts...)
	default:
		lk, err = w.p.locker.Obtain(ctx, keys[0], w.p.cfg.TTL, opts...)
	}
	ev.Return = Now()
	cancel()
	ev.Outcome = outcome(stop, err)
	if err != nil {
		ev.Err = err.Error()
		w.p.out.emit(ev)
		return
	}
	h := &hold{p: w.p, worker: w.n, id: ev.Hold, keys: keys, fences: lk.Fences(), mode: mode, until: lk.Until}
	if got := lk.Keys(); !slices.Equal(got, keys) || len(h.fences) != len(keys) { // a problem of the run (stderr)
		fmt.Fprintf(os.Stderr, "history child: %s %v: Keys %v, Fences %v\n", call, keys, got, h.fences)
		h.fences = make([]int64, len(keys))
	}
	ev.At, ev.Token, ev.Fence, ev.Until = a.hook.Load(), lk.Token(), lk.Fence(), h.sampleUntil()
	if ev.Keys != nil {
		ev.Fences = h.fences
	}
	w.p.register(lk.Token(), h)
	defer w.p.unregister(lk.Token())
	w.p.out.emit(ev)

	kctx := lk.KeepAlive(context.Background())
	h.watch(kctx)
	w.use(stop, kctx, h)

	rel := Event{Type: EvRelease, Proc: w.p.cfg.Proc, Worker: w.n, Hold: ev.Hold}
	h.poll(kctx)
	rel.Until = h.sampleUntil()
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
	rel.Invoke = Now()
	err = lk.Release(rctx)
	rel.Return = Now()
	rcancel()
	rel.Outcome = releaseOutcome(err)
	if err != nil {
		rel.Err = err.Error()
	}
	w.p.out.emit(rel)
}

func releaseOutcome(err error) string {
	switch {
	case err == nil:
		return OutOK
	case errors.Is(err, redislock.ErrNotHeld):
		return OutNotHeld
	}
	return OutError
}

// withLock is one WithLock of key. fn joins the lock with a TryObtain on
// its ctx (no round trip: the handle shares the acquisition) to read the
// lease's end, uses the lock, and returns.
func (w *worker) withLock(stop context.Context, key, mode string, opts []redislock.Option) {
	ev := w.attempt([]string{key}, mode, CallWithLock)
	h := &hold{p: w.p, worker: w.n, id: ev.Hold, keys: []string{key}, mode: mode}
	a := &attempt{hold: h}
	ctx, cancel := context.WithTimeout(context.WithValue(stop, attemptKey{}, a), w.p.cfg.Wait)
	defer cancel()
	rel := Event{Type: EvRelease, Proc: w.p.cfg.Proc, Worker: w.n, Hold: ev.Hold}
	called := false
	ev.Invoke = Now()
	err := w.p.locker.WithLock(ctx, key, func(fctx context.Context) error {
		ev.Return, called = Now(), true
		ev.At, ev.Fence, ev.Outcome = a.hook.Load(), a.fence.Load(), OutOK
		h.fences = []int64{ev.Fence}
		if tok := a.token.Load(); tok != nil {
			ev.Token = *tok
		}
		// The joined handle reads the acquisition's Until. The hold
		// registered itself by its token in the Obtain hook.
		if j, jerr := w.p.locker.TryObtain(fctx, key, w.p.cfg.TTL, opts...); jerr == nil {
			h.readUntilFrom(j.Until)
			defer func() { _ = j.Release(context.Background()) }() // ends the joined hold only
		}
		ev.Until = h.sampleUntil()
		w.p.out.emit(ev)
		h.watch(fctx)
		w.use(stop, fctx, h)
		h.poll(fctx)
		rel.Until = h.sampleUntil()
		rel.Invoke = Now()
		return nil
	}, append(opts, redislock.WithTTL(w.p.cfg.TTL))...)
	w.endWithLock(stop, ev, rel, a, called, err)
}

// withLockMulti is one WithLockMulti of the set keys. fn reads the lock
// from its ctx (FromContext: no round trip) for the lease's end and the
// fences, uses the lock, and returns.
func (w *worker) withLockMulti(stop context.Context, keys []string, mode string, opts []redislock.Option) {
	ev := w.attempt(keys, mode, CallWithLockMulti)
	h := &hold{p: w.p, worker: w.n, id: ev.Hold, keys: keys, mode: mode}
	a := &attempt{hold: h}
	ctx, cancel := context.WithTimeout(context.WithValue(stop, attemptKey{}, a), w.p.cfg.Wait)
	defer cancel()
	rel := Event{Type: EvRelease, Proc: w.p.cfg.Proc, Worker: w.n, Hold: ev.Hold}
	called := false
	ev.Invoke = Now()
	err := w.p.locker.WithLockMulti(ctx, keys, func(fctx context.Context) error {
		ev.Return, called = Now(), true
		ev.At, ev.Outcome = a.hook.Load(), OutOK
		if tok := a.token.Load(); tok != nil {
			ev.Token = *tok
		}
		// A lock that FromContext does not give as the set is a problem
		// of the run (stderr).
		h.fences = make([]int64, len(keys))
		if lk := redislock.FromContext(fctx); lk == nil {
			fmt.Fprintf(os.Stderr, "history child: WithLockMulti %v: FromContext gave no lock\n", keys)
		} else {
			h.readUntilFrom(lk.Until)
			if got := lk.Keys(); !slices.Equal(got, keys) || len(lk.Fences()) != len(keys) {
				fmt.Fprintf(os.Stderr, "history child: WithLockMulti %v: FromContext gave Keys %v, Fences %v\n", keys, got, lk.Fences())
			} else {
				h.fences = lk.Fences()
			}
		}
		ev.Fence, ev.Fences = h.fences[0], h.fences
		ev.Until = h.sampleUntil()
		w.p.out.emit(ev)
		h.watch(fctx)
		w.use(stop, fctx, h)
		h.poll(fctx)
		rel.Until = h.sampleUntil()
		rel.Invoke = Now()
		return nil
	}, append(opts, redislock.WithTTL(w.p.cfg.TTL))...)
	w.endWithLock(stop, ev, rel, a, called, err)
}

// endWithLock records the end of a WithLock or WithLockMulti: its failure
// to acquire (fn was not called), or the release.
func (w *worker) endWithLock(stop context.Context, ev, rel Event, a *attempt, called bool, err error) {
	if tok := a.token.Load(); tok != nil {
		defer w.p.unregister(*tok)
	}
	if !called {
		ev.Return = Now()
		ev.Outcome = outcome(stop, err)
		if err != nil {
			ev.Err = err.Error()
		}
		w.p.out.emit(ev)
		return
	}
	rel.Return = Now()
	rel.Outcome = releaseOutcome(err)
	if errors.Is(err, redislock.ErrLockLost) {
		rel.Outcome = OutNotHeld
	}
	if err != nil {
		rel.Err = err.Error()
	}
	w.p.out.emit(rel)
}

// use reads and writes the resource of each key held a few times (a set
// writes each key's with that key's fence), pausing between operations,
// until stop or until the lock's ctx is seen done (checked before each
// operation). Now and then it holds the lock longer than its ttl, so that
// renewals keep it. One holder in four trusts its fence instead: it does
// not check ctx, and goes on writing after its lock was lost (a holder
// paused just before a write does the same); SetFenced must refuse such a
// write once a newer holder has written.
func (w *worker) use(stop, ctx context.Context, h *hold) {
	ops := 1 + w.rng.IntN(3)
	long := w.rng.IntN(20) == 0
	trusting := w.rng.IntN(4) == 0
	for i := range ops {
		if stop.Err() != nil || (!trusting && h.poll(ctx)) {
			return
		}
		h.sampleUntil()
		for k, key := range h.keys {
			if h.mode != ModeReader {
				w.write(h, key, h.fences[k], i)
			}
			w.read(h, key)
		}
		pause := w.rng.Int64N(int64(w.p.cfg.HoldMax) + 1)
		if long && i == 0 {
			pause = int64(w.p.cfg.TTL) * (5 + w.rng.Int64N(11)) / 10 // 0.5 to 1.5 ttl
		}
		w.sleep(stop, pause)
	}
}

// write writes to key's resource a value no other write writes, with
// SetFenced.
func (w *worker) write(h *hold, key string, fence int64, i int) {
	ev := Event{Type: EvWrite, Proc: w.p.cfg.Proc, Worker: w.n, Hold: h.id, Key: resourceOf(key), Fence: fence,
		Value: fmt.Sprintf("%d.%d.%d.%d", w.p.cfg.Proc, w.n, h.id, i)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ev.Invoke = Now()
	err := redislock.SetFenced(ctx, w.p.resource, ev.Key, ev.Value, fence)
	ev.Return = Now()
	switch {
	case err == nil:
		ev.Outcome = OutOK
	case errors.Is(err, redislock.ErrFenceRejected):
		ev.Outcome = OutRejected
	default:
		ev.Outcome, ev.Err = OutError, err.Error()
	}
	w.p.out.emit(ev)
}

// read reads key's resource's value and fence with a plain HMGET.
func (w *worker) read(h *hold, key string) {
	ev := Event{Type: EvRead, Proc: w.p.cfg.Proc, Worker: w.n, Hold: h.id, Key: resourceOf(key)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ev.Invoke = Now()
	vals, err := w.p.resource.HMGet(ctx, ev.Key, "value", "fence").Result()
	ev.Return = Now()
	if err != nil {
		ev.Outcome, ev.Err = OutError, err.Error()
		w.p.out.emit(ev)
		return
	}
	ev.Outcome = OutOK
	if s, ok := vals[0].(string); ok {
		ev.Value = s
	}
	if s, ok := vals[1].(string); ok {
		if ev.Fence, err = strconv.ParseInt(s, 10, 64); err != nil {
			ev.Outcome, ev.Err = OutError, "fence "+s+": "+err.Error()
		}
	}
	w.p.out.emit(ev)
}

// probeStalls records each time the process ran nothing for longer than
// stallThreshold (it was stopped with SIGSTOP, or not scheduled): a
// goroutine sleeps 1 ms at a time and reports when it woke much later.
// A lost-lock timer due in such a stall fires late; the library's
// guarantee holds only while timers fire within the safety margin.
func (p *process) probeStalls(stop context.Context) {
	const tick = time.Millisecond
	for stop.Err() == nil {
		before := Now()
		time.Sleep(tick)
		after := Now()
		if late := after - before - int64(tick); late > int64(stallThreshold) {
			p.out.emit(Event{Type: EvStall, Proc: p.cfg.Proc, Invoke: before + int64(tick), At: after})
		}
	}
}

// stallThreshold is the shortest stall probeStalls reports.
const stallThreshold = 20 * time.Millisecond

// An emitter writes events as JSON lines, flushing every few milliseconds
// and at close.
type emitter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	enc  *json.Encoder
	stop chan struct{}
	done chan struct{}
}

func newEmitter(w io.Writer) *emitter {
	bw := bufio.NewWriterSize(w, 64<<10)
	e := &emitter{w: bw, enc: json.NewEncoder(bw), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-e.stop:
				return
			case <-t.C:
				e.mu.Lock()
				_ = e.w.Flush()
				e.mu.Unlock()
			}
		}
	}()
	return e
}

func (e *emitter) emit(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(ev)
}

func (e *emitter) close() {
	close(e.stop)
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.w.Flush()
}
