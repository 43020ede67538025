package redislock

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, in lua/: each in a file of its own, whose header names
// every KEYS[i], every ARGV[i] and every reply; the parts that several
// scripts share are files of their own too (fence.lua, generation.lua,
// family.lua, line.lua, spend.lua), which a script names on its "-- parts:"
// line. Here is the Go side: loading them (load), running them (run), and,
// next to each, the Go function that builds its KEYS and ARGV and reads its
// reply.
//
//	operation                    Go builder                      script
//	Obtain of a plain lock       plainArgs (take)                take.lua
//	Obtain, TryObtain, the line  attemptArgs.call, runAttempt    acquire.lua
//	Release of a plain lock      plainArgs (drop)                drop.lua
//	Release, give-backs          releaseArgs.call, runRelease    release.lua
//	Refresh, renewals            refreshArgs.call, parseRefresh  renew.lua, renew_shared.lua
//	TTL                          runPTTL                         pttl.lua, pttl_shared.lua
//	Inspect                      runInspect                      inspect.lua
//	a quorum's fences            runFenceStep                    fence_step.lua
//	SetFenced                    runFencedSet                    fenced_set.lua
//
// A script compares the whole token stored for a holder with the caller's
// before acting, so a holder whose lease expired can never touch the hold
// of the holder that came after it; Redis runs a script atomically, so
// nothing can happen between the comparison and the action.
//
// They are go-redis Scripts: run with EVALSHA, and loaded again with EVAL
// when Redis answers NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover), so they never need to be loaded by hand.
//
// The plain lock: an exclusive lock with no fence, no holder description
// and nobody waiting is one string key, the holder's token, whose expiry is
// the lease, and nothing else. Taking it is a SET (take.lua); releasing it
// a compare and delete (drop.lua). These two scripts are its whole life
// when nothing else happens: each checks first that nothing else did (a
// line formed, a token was spent), and hands over to the full scripts when
// it did. The places hash is the one side key they look at: it exists
// while anyone waits in the key's line, and while a token of the key may
// be marked spent (see spend.lua), so one EXISTS tells them the key is
// plain.
//
// The data of one lock key K (layout rl1, see keys.go), all in K's Redis
// Cluster slot, the side keys named by keyspace.side:
//
//	K        the holders: a string, the token of an exclusive holder (a
//	         plain lock, or the writer of a read-write lock), with the lease
//	         as its expiry; or a sorted set of the holders of a shared mode,
//	         each token scored with the end of its lease (ms, Redis clock),
//	         and one member scored 0 that says which mode: "rl1:shared" (the
//	         readers of a read-write lock) or "rl1:permits:<n>" (a
//	         semaphore of n permits). The set expires with its last lease.
//	         This is how the library knows its own data: a string that does
//	         not start with "rl1:", or a key of another type, or a sorted set
//	         without such a member, was not written by it, and is never
//	         changed (see kindOf in family.lua, and ErrWrongKind).
//	line     list of the tokens of the places in line, first in line first
//	places   hash token -> "deadline ttl fenced mode pub channel desc":
//	         until when (ms, Redis clock) the place is kept, the lease (ms),
//	         fencing ("1" or "0") and mode ("x" exclusive, "s" shared, or a
//	         semaphore's number of permits) to hand the key over with, how
//	         to announce the hand-off ("p": PUBLISH, "s": SPUBLISH) and on
//	         which channel, and the holder's description. And the field
//	         "~spent" while a spent token of K may be marked (see spend.lua):
//	         it keeps the plain scripts off the key; and "~fence:T" while a
//	         token T that a hand-off gave a fence holds K: an attempt of T
//	         that crossed the hand-off reads its fence there (no second one).
//	gens     hash token -> the highest generation of the lease commands
//	         Redis ran for that holder (see leaseClock); only holders whose
//	         lease length changed have one. It expires with the longest
//	         lease it was set with.
//	holders  hash token -> the holder's description (WithHolder), for
//	         Inspect; it expires with the holders' last lease, and a
//	         holder's entry goes when its hold ends
//	spent:T  the mark of a spent token T (see spend.lua)
//	fence    the fence counter of K's hash slot (keyspace.fence; no expiry)
//
// Lapsed holders of a sorted set are removed by every script that looks at
// them, so a holder that died frees its share at the end of its own lease.
//
// Invariant: while the line is not empty, its first place cannot take the
// key (it does not fit). Whoever finds that it fits (a release, or an
// attempt after a lease expired) hands the key to it in the same script,
// and to the places after it while they fit too: all readers up to the
// next writer, permits while there are some. So nothing can overtake a place
// in line, and a waiter never sends anything to take a key handed to it.
// A hand-off gives the place's waiter its lease, but not beyond the place's
// deadline: the waiter proved it was alive when it last renewed its place,
// no more, so a waiter that died holds the key at most until then (see
// line.go).

// The values that Go and the scripts share, in one place: the scripts read
// them by the Lua names of luaConsts, from lua/consts.lua, which
// TestScripts_ConstsFileIsCurrent keeps equal to luaConsts().
//
// The reply codes: each means one thing, in every script that returns it.
const (
	replyOK           = 1  // done: the token holds the key now, its lease is set, it was released, the value was written
	replyNotOurs      = 0  // the key does not hold the token (free, or another's): nothing changed but a place taken
	replySuperseded   = 2  // the token holds the key, but Redis ran a command of a later generation (see leaseClock): nothing changed
	replyStaleFence   = 3  // a higher fence was written (SetFenced): nothing changed
	replyNotPlain     = -1 // the key is not a plain lock: the full script decides; nothing changed
	replyWrongKind    = -2 // the key holds another kind of lock or data: nothing changed
	replyOtherPermits = -3 // the key is a semaphore of another number of permits: nothing changed
	replyNoFence      = -4 // the fence could not be issued: nothing held
	replyNoPlace      = -5 // the token has no place to renew, or is spent: it must not be used again
)

// Special leases, in ms: never a lease left, which is at least 0. The
// scripts report the first two (NO_EXPIRY, ONLY_LINE); the others are Go's.
const (
	leaseNoExpiry = -1 // the holder's key has no expiry: it will not end by itself
	leaseOnlyLine = -2 // no holder is in the way, only the line
	leaseNotHeld  = -3 // the token does not hold the key (TTL)
	leaseUnknown  = -4 // no reply said how long the holder keeps the key (a quorum's attempts)
)

// fenceAsk is the fence of an announcement to a set's place (see line.lua):
// not a hand-off, but its turn on a key; its waiter tries to take them all.
const fenceAsk = -2

// The marks of a lock's modes in a script's arguments and replies (see
// lockMode.arg and what inspect.lua reports), and of how a hand-off is
// announced (see wakeup.pub).
const (
	markExclusive  = "x"
	markShared     = "s"
	markForeign    = "?" // a string this layout did not write (Inspect: ModeForeign)
	markSemaphore  = "p" // inspect.lua's name of a semaphore
	markSetX       = "X" // a set's exclusive place (see line.lua)
	markSetS       = "S" // a set's shared place
	markPublish    = "p"
	markSPublish   = "s"
	spentField     = "~spent"  // the places field that is there while a token of the key may be spent
	handedField    = "~fence:" // followed by a token: the fence a hand-off gave it, until its release (see handOff)
	maxIssuedFence = 1<<53 - 1 // Lua numbers are doubles: exact up to 2^53
)

// luaConsts is lua/consts.lua: the shared values as Lua locals.
func luaConsts() string {
	var b strings.Builder
	b.WriteString("-- consts.lua: the values that Go and the scripts share, written by\n" +
		"-- luaConsts in scripts.go (go test -run TestScripts_ConstsFileIsCurrent\n" +
		"-- -update writes it). Every script starts with it.\n\n")
	for _, c := range []struct {
		name  string
		value any
	}{
		{"LAYOUT", layout}, {"TOKEN_PREFIX", tokenPrefix},
		{"OK", replyOK}, {"NOT_OURS", replyNotOurs}, {"SUPERSEDED", replySuperseded}, {"STALE_FENCE", replyStaleFence},
		{"NOT_PLAIN", replyNotPlain}, {"WRONG_KIND", replyWrongKind}, {"OTHER_PERMITS", replyOtherPermits},
		{"NO_FENCE", replyNoFence}, {"NO_PLACE", replyNoPlace},
		{"NO_EXPIRY", leaseNoExpiry}, {"ONLY_LINE", leaseOnlyLine}, {"ASK", fenceAsk},
		{"EXCLUSIVE", markExclusive}, {"SHARED", markShared}, {"SET_EXCLUSIVE", markSetX}, {"SET_SHARED", markSetS}, {"FOREIGN", markForeign}, {"SEMAPHORE", markSemaphore},
		{"PUB", markPublish}, {"SPUB", markSPublish}, {"SPENT_FIELD", spentField}, {"HANDED_FIELD", handedField}, {"MAX_FENCE", maxIssuedFence},
	} {
		v := fmt.Sprint(c.value)
		if s, ok := c.value.(string); ok {
			v = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "local %s = %s\n", c.name, v)
	}
	return b.String()
}

//go:embed lua/*.lua
var luaFiles embed.FS

// The scripts, each the file of its name in lua/ (see load).
var (
	takeScript        = load("take")
	dropScript        = load("drop")
	acquireScript     = load("acquire")
	releaseScript     = load("release")
	renewScript       = load("renew")
	renewSharedScript = load("renew_shared")
	pttlScript        = load("pttl")
	pttlSharedScript  = load("pttl_shared")
	inspectScript     = load("inspect")
	fenceStepScript   = load("fence_step")
	fencedSetScript   = load("fenced_set")
)

// parts finds a script's "-- parts:" line.
var parts = regexp.MustCompile(`(?m)^-- parts: (.*)$`)

// load returns the script of lua/<name>.lua: consts.lua, then the parts its
// header names, in that order, then the script itself. This is the one
// place that joins them.
func load(name string) *redis.Script {
	read := func(name string) string {
		b, err := luaFiles.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic(err) // a file that go:embed did not embed: a build error
		}
		return string(b)
	}
	script := read(name)
	m := parts.FindStringSubmatch(script)
	if m == nil {
		panic("lua/" + name + ".lua has no \"-- parts:\" line")
	}
	src := read("consts")
	for _, p := range strings.Fields(m[1]) {
		if p != "(none)" {
			src += read(p)
		}
	}
	return redis.NewScript(src + script)
}

// A scriptCall is one run of a script: the script, its KEYS and ARGV.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// run runs s on c: with EVALSHA, and once more with EVAL (which loads the
// script) when Redis answers NOSCRIPT. It also returns how often go-redis
// wrote the command that ran to a connection (see counted). The scripts
// check the type of the lock key before they touch it, so a WRONGTYPE
// error comes from a key the library keeps beside it (see keyspace), which
// holds data it did not write there: it is reported as ErrWrongKind.
func (s scriptCall) run(ctx context.Context, c redis.Scripter) (*redis.Cmd, sends) {
	cmd := s.script.EvalSha(ctx, c, s.keys, s.args...)
	n := s.sends()
	if isNoScript(cmd.Err()) {
		cmd = s.script.Eval(ctx, c, s.keys, s.args...)
		n = s.sends()
	}
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
		cmd.SetErr(refusal{fmt.Errorf("%w: a key that the library keeps beside the lock (named {...}:%s:...: see docs/how-it-works.md) holds data it did not write", ErrWrongKind, layout)})
	}
	return cmd, n
}

// sends returns how often go-redis wrote the counted argument of s since
// the last call, and starts counting again; -1 when s has none.
func (s scriptCall) sends() sends {
	if len(s.args) > 0 {
		if c, ok := s.args[0].(*counted); ok {
			return sends(c.writes.Swap(0))
		}
	}
	return -1
}

// sends is how often go-redis wrote a command to a connection (see
// counted), -1 when it was not counted.
type sends int32

// resent reports that go-redis sent the command more than once: an
// earlier copy may have run, or may run later.
func (n sends) resent() bool { return n > 1 }

// unsent reports that go-redis certainly never wrote the command (it gave
// up while waiting for a connection, say): it cannot run. Only once a write
// was ever counted: a go-redis that writes arguments otherwise would count
// none.
func (n sends) unsent() bool { return n == 0 && counting.Load() }

// counting says that counted has counted a write: it works with this
// go-redis.
var counting atomic.Bool

// isNoScript reports whether err is Redis's NOSCRIPT: it does not have the
// script (after a restart, a failover or SCRIPT FLUSH), and ran nothing.
func isNoScript(err error) bool {
	if err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		return false // without errors.As's allocation
	}
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
}

// A counted is a script argument (the token) that counts how often go-redis
// wrote it to a connection. More than once means that go-redis sent the
// command again, after a timeout or a broken connection: the first copy may
// have run already, or may run later (a late copy). Knowing it, an
// acquisition marks its token spent when it gives it up (see spend.lua),
// and a release that finds its lock gone knows it may have released it
// itself (see Lock.releasedBy) — only when it happened: a plain lock writes
// no mark otherwise.
//
// go-redis's protocol writer calls MarshalBinary once per write; other
// callers (an auto-pipeliner sizing its batch) are not counted, told apart
// by the calling function's package. That is known to work from go-redis
// v9.0.5 (go.mod's floor) to v9.23.0 (the latest CI runs); a release that
// moves the writer fails TestCounted_CountsGoRedisWrites, which CI runs at
// both ends.
type counted struct {
	s      string
	writes atomic.Int32
}

func (c *counted) MarshalBinary() ([]byte, error) {
	var pc [1]uintptr
	if runtime.Callers(2, pc[:]) == 1 && isWriter(pc[0]) {
		c.writes.Add(1)
		counting.Store(true)
	}
	return []byte(c.s), nil
}

// writers caches, by program counter, whether a caller of
// counted.MarshalBinary is go-redis's protocol writer.
var writers sync.Map

func isWriter(pc uintptr) bool {
	if w, ok := writers.Load(pc); ok {
		return w.(bool)
	}
	f := runtime.FuncForPC(pc)
	w := f != nil && strings.Contains(f.Name(), "/internal/proto.")
	writers.Store(pc, w)
	return w
}

// replyInt returns the integer at res[i].
func replyInt(res []any, i int) (int64, bool) {
	if i >= len(res) {
		return 0, false
	}
	v, ok := res[i].(int64)
	return v, ok
}

// codeAndValue reads a reply {code, value}.
func codeAndValue(cmd *redis.Cmd) (code int64, value any, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, nil, err
	}
	code, ok := replyInt(res, 0)
	if !ok || len(res) != 2 {
		return 0, nil, fmt.Errorf("unexpected reply %v", res)
	}
	return code, res[1], nil
}

// boolArg is a boolean script argument.
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// familyKeys returns the KEYS of the scripts of the line and the family on
// the locks on keys: for each, its Redis key, line, places, gens, holders
// and fence counter; then, when token is not "", the spent mark of token
// (the first key's).
func (ks keyspace) familyKeys(keys []string, token string) []string {
	out := make([]string, 0, 6*len(keys)+1)
	for _, key := range keys {
		rkey := ks.lock(key)
		out = append(out, rkey, ks.side(rkey, key, lineKind), ks.side(rkey, key, placesKind),
			ks.side(rkey, key, gensKind), ks.side(rkey, key, holdersKind), ks.fence(rkey))
	}
	if token != "" {
		out = append(out, ks.side(ks.lock(keys[0]), keys[0], spentKind+":"+token))
	}
	return out
}

// keysOf is key, or set's keys when it is a set's (ObtainMulti: key is
// the first of them).
func keysOf(key string, set []string) []string {
	if set != nil {
		return set
	}
	return []string{key}
}

// attemptArgs are the arguments of one acquire.lua run (take.lua's, for a
// plain attempt).
type attemptArgs struct {
	key, token   string
	set          []string // a set's keys (ObtainMulti; key is the first), nil for one key
	holder       string   // the holder's description, "" for none
	ttl          time.Duration
	fenced       bool
	mode         lockMode
	place        time.Duration // how long to keep a place; 0: a single attempt
	renew        bool          // renew the token's place, do not take one
	wake         wakeup        // how a hand-off to the place is announced
	plain        bool          // a single attempt at a plain lock: take.lua
	places       string        // the lock's places key, for a plain attempt
	firstAttempt *firstAttempt // for a line's first attempt of the token, what is known of it
}

// A wakeup is how a hand-off to a place of a Locker is announced: on which
// channel, sharded (SPUBLISH) or not (PUBLISH).
type wakeup struct {
	channel string
	sharded bool
}

// pub is the wakeup as acquire.lua takes it.
func (w wakeup) pub() string {
	if w.sharded {
		return markSPublish
	}
	return markPublish
}

// attemptResult is the outcome of an acquire.lua (take.lua) run.
type attemptResult struct {
	ours     bool
	fence    int64         // when ours
	fences   []int64       // a set's, when ours: one per key
	pttl     time.Duration // when not ours: blockedFor's (leaseNoExpiry, leaseOnlyLine: see line.lua)
	noPlace  bool          // a renewal found no place, or the token is spent: it must not be used again
	notPlain bool          // a plain attempt found the key not plain: acquire.lua decides
	resent   bool          // go-redis sent the attempt more than once (see counted)
	unsent   bool          // go-redis never sent it: it cannot run
}

// call returns the acquire.lua run of a (take.lua's, for a plain attempt).
func (a attemptArgs) call(ks keyspace) scriptCall {
	rkey := ks.lock(a.key)
	token := &counted{s: a.token}
	if a.plain {
		return scriptCall{takeScript, []string{rkey, a.places}, []any{token, a.ttl.Milliseconds()}}
	}
	return scriptCall{acquireScript, ks.familyKeys(keysOf(a.key, a.set), a.token), []any{token,
		a.ttl.Milliseconds(), boolArg(a.fenced), a.place.Milliseconds(), boolArg(!a.renew), a.mode.arg(), a.wake.pub(), a.wake.channel, a.holder}}
}

// runAttempt runs a's script.
func runAttempt(ctx context.Context, c redis.Scripter, ks keyspace, a attemptArgs) (attemptResult, error) {
	cmd, n := a.call(ks).run(ctx, c)
	res, err := parseAttempt(a, cmd)
	res.resent, res.unsent = n.resent(), n.unsent()
	return res, err
}

// parseAttempt reads the reply to the acquire.lua (take.lua) run of a.
func parseAttempt(a attemptArgs, cmd *redis.Cmd) (attemptResult, error) {
	res, err := cmd.Slice()
	if err != nil {
		return attemptResult{}, err
	}
	code, ok := replyInt(res, 0)
	if !ok || len(res) > 2 && code != replyOK {
		return attemptResult{}, fmt.Errorf("unexpected reply %v", res)
	}
	v, _ := replyInt(res, 1)
	switch code {
	case replyOK:
		r := attemptResult{ours: true, fence: v}
		if a.set != nil {
			for i := range a.set {
				f, _ := replyInt(res, i+1)
				r.fences = append(r.fences, f)
			}
		}
		return r, nil
	case replyNotOurs, replyNoPlace:
		return attemptResult{pttl: time.Duration(v) * time.Millisecond, noPlace: code == replyNoPlace}, nil
	case replyNotPlain:
		return attemptResult{notPlain: true}, nil
	case replyWrongKind:
		return attemptResult{}, refusal{wrongKind(fmt.Sprint(res[1]), a.mode)}
	case replyOtherPermits:
		return attemptResult{}, refusal{fmt.Errorf("%w: WithPermits(%d): the key is a semaphore of %d permits; every acquisition of a key must name the same number", ErrInvalidOption, a.mode.permits, v)}
	case replyNoFence:
		return attemptResult{}, refusal{fmt.Errorf("%w: %v", errFenceNotIssued, res[1])}
	}
	return attemptResult{}, fmt.Errorf("unexpected reply %v", res)
}

// releaseArgs are the arguments of one release.lua run.
type releaseArgs struct {
	key, token string
	set        []string // a set's keys (key is the first), nil for one key
	mode       lockMode
	withdraw   string        // a place to take out of line too, or ""
	spend      time.Duration // mark token spent for that long; 0: no mark
	wake       string        // the caller's wake channel
}

// releaseResult is the outcome of a release.lua run.
type releaseResult struct {
	released bool
	missing  []int     // the keys (their indexes) it did not hold
	handoffs int       // places in line that got the key
	handed   []handoff // hand-offs to places of the caller's Locker
	resent   bool      // go-redis sent the release more than once (see counted)
}

// handoff is a hand-off of the key to a token (a line's): fence is its
// fence, 0 for none, -1 when it could not be issued (the place was dropped);
// lease is the lease it asked for (see line.go for what it got).
type handoff struct {
	at    int // the index of its key, among a set's
	token string
	fence int64
	lease time.Duration
}

// runRelease runs release.lua.
func runRelease(ctx context.Context, c redis.Scripter, ks keyspace, a releaseArgs) (releaseResult, error) {
	s := scriptCall{releaseScript, ks.familyKeys(keysOf(a.key, a.set), a.token),
		[]any{&counted{s: a.token}, a.mode.arg(), a.withdraw, a.spend.Milliseconds(), a.wake}}
	cmd, sent := s.run(ctx, c)
	r := releaseResult{resent: sent.resent()}
	res, err := cmd.Slice()
	if err != nil {
		return r, err
	}
	missing, _ := res[min(2, len(res)-1)].([]any)
	own, _ := res[len(res)-1].([]any)
	held, _ := replyInt(res, 0)
	n, _ := replyInt(res, 1)
	if len(res) != 4 || len(own)%4 != 0 {
		return r, fmt.Errorf("unexpected reply %v", res)
	}
	r.released, r.handoffs = held == replyOK, int(n)
	for _, i := range missing {
		r.missing = append(r.missing, int(i.(int64))-1)
	}
	for i := 0; i < len(own); i += 4 {
		token, _ := own[i+1].(string)
		fence, _ := replyInt(own, i+2)
		lease, _ := replyInt(own, i+3)
		at, _ := replyInt(own, i)
		r.handed = append(r.handed, handoff{at: int(at) - 1, token: token, fence: fence, lease: time.Duration(lease) * time.Millisecond})
	}
	return r, nil
}

// refreshArgs are the arguments of a refresh: a renewal of token's lease
// in mode to ttl, of generation gen, issuing a fence when fenced.
type refreshArgs struct {
	key, token string
	set        []string // a set's keys (key is the first), nil for one key
	mode       lockMode
	ttl        time.Duration
	gen        int64
	fenced     bool
	described  bool // the holder has a description (WithHolder)
}

// call returns the script run of a: renew.lua for an exclusive holder,
// renew_shared.lua for others.
func (a refreshArgs) call(ks keyspace) scriptCall {
	keys := keysOf(a.key, a.set)
	if !a.mode.exclusive() {
		return scriptCall{renewSharedScript, ks.familyKeys(keys, ""),
			[]any{a.token, a.ttl.Milliseconds(), a.gen, boolArg(a.fenced), a.mode.arg()}}
	}
	var rkeys []string
	for _, key := range keys {
		rkey := ks.lock(key)
		rkeys = append(rkeys, rkey, ks.side(rkey, key, gensKind))
		if a.fenced {
			rkeys = append(rkeys, ks.fence(rkey))
		}
		if a.described {
			rkeys = append(rkeys, ks.side(rkey, key, holdersKind))
		}
	}
	return scriptCall{renewScript, rkeys, []any{a.token, a.ttl.Milliseconds(), a.gen, boolArg(a.fenced), boolArg(a.described)}}
}

// parseRefresh reads renew.lua's (renew_shared.lua's) reply: its code
// (replyOK, replySuperseded or replyNotOurs) and the fences it issued, one
// per key.
func parseRefresh(cmd *redis.Cmd) (code int64, fences []int64, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, nil, err
	}
	code, ok := replyInt(res, 0)
	switch {
	case !ok || len(res) < 2:
		return 0, nil, fmt.Errorf("unexpected reply %v", res)
	case code == replyNoFence:
		return 0, nil, refusal{fmt.Errorf("%w: %v", errFenceNotIssued, res[1])}
	}
	for i := 1; i < len(res); i++ {
		f, _ := replyInt(res, i)
		fences = append(fences, f)
	}
	return code, fences, nil
}

// runPTTL runs pttl.lua (pttl_shared.lua): the lease left of token at
// Redis keys rkeys (the shortest, for a set's), leaseNotHeld when token
// does not hold them all.
func runPTTL(ctx context.Context, c redis.Scripter, rkeys []string, token string, m lockMode) (time.Duration, error) {
	s := scriptCall{pttlScript, rkeys, []any{token}}
	if !m.exclusive() {
		s.script = pttlSharedScript
	}
	cmd, _ := s.run(ctx, c)
	code, v, err := codeAndValue(cmd)
	if err != nil {
		return 0, err
	}
	if code != replyOK {
		return leaseNotHeld * time.Millisecond, nil
	}
	ms, _ := v.(int64)
	return time.Duration(ms) * time.Millisecond, nil
}

// runInspect runs inspect.lua.
func runInspect(ctx context.Context, c redis.Scripter, ks keyspace, key string) (Info, error) {
	cmd, _ := scriptCall{inspectScript, ks.familyKeys([]string{key}, ""), nil}.run(ctx, c)
	res, err := cmd.Slice()
	if err != nil {
		return Info{}, err
	}
	if len(res) < 4 || len(res)%3 != 1 {
		return Info{}, fmt.Errorf("unexpected reply %v", res)
	}
	what, _ := res[0].(string)
	permits, _ := replyInt(res, 1)
	fence, _ := res[2].(string)
	waiting, _ := replyInt(res, 3)
	info := Info{Key: key, Mode: infoMode(what), Permits: int(permits), Waiting: int(waiting)}
	info.Fence, _ = strconv.ParseInt(fence, 10, 64)
	for i := 4; i < len(res); i += 3 {
		token, _ := res[i].(string)
		ms, _ := replyInt(res, i+1)
		desc, _ := res[i+2].(string)
		info.Holders = append(info.Holders, Holder{Token: token, Description: desc, TTL: time.Duration(ms) * time.Millisecond})
	}
	return info, nil
}

// infoMode is the Mode of what inspect.lua found.
func infoMode(what string) Mode {
	switch what {
	case "":
		return ModeFree
	case markExclusive:
		return ModeExclusive
	case markShared:
		return ModeShared
	case markSemaphore:
		return ModeSemaphore
	case markForeign:
		return ModeForeign
	}
	return ModeOther
}

// runFenceStep runs fence_step.lua on the fence counter of the lock on
// key: to is 0 to increment it, or the value to raise it to.
func runFenceStep(ctx context.Context, c redis.Scripter, ks keyspace, key string, to int64) (int64, error) {
	cmd, _ := scriptCall{fenceStepScript, []string{ks.fence(ks.lock(key))}, []any{to}}.run(ctx, c)
	code, v, err := codeAndValue(cmd)
	switch {
	case err != nil:
		return 0, err
	case code != replyOK:
		return 0, refusal{fmt.Errorf("%w: %v", errFenceNotIssued, v)}
	}
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected reply %v", v)
}

// errFenceNotIssued is the error of an acquisition whose fence could not be
// issued: the fence counter holds something else than an integer, or is at
// its maximum. Nothing is held.
var errFenceNotIssued = errors.New("the fence could not be issued")

// runFencedSet runs fenced_set.lua: ok reports whether the value was
// written; seen is the resource's fence before the call. A key that holds
// something else is ErrWrongKind.
func runFencedSet(ctx context.Context, c redis.Scripter, key, value string, fence int64) (ok bool, seen int64, err error) {
	cmd, _ := scriptCall{fencedSetScript, []string{key}, []any{value, fence}}.run(ctx, c)
	code, v, err := codeAndValue(cmd)
	switch {
	case err != nil:
		return false, 0, err
	case code == replyWrongKind:
		what := "a Redis " + fmt.Sprint(v)
		if v == "hash" {
			what = "a hash of other fields, or whose fence is not a non-negative integer"
		}
		return false, 0, refusal{fmt.Errorf("%w: it holds %s, not a resource SetFenced writes (a hash with the fields value and fence); nothing was written", ErrWrongKind, what)}
	}
	seen, _ = v.(int64)
	return code == replyOK, seen, nil
}
