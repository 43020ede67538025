// Package scripts is the bottom layer of redislock: what the library keeps
// in Redis and the Lua scripts that keep it, each with the Go function that
// builds its KEYS and ARGV and reads its reply; the runner of calls to
// Redis (EVALSHA, NOSCRIPT, calls bounded by ctx, background work); the key
// layout; and the errors every layer above returns. It knows nothing of
// locks held in this process: that is the lease layer's.
//
// The scripts are in lua/, each in a file of its own, whose header names
// every KEYS[i], every ARGV[i] and every reply; the parts that several
// scripts share are files of their own too (fence.lua, generation.lua,
// family.lua, line.lua, spend.lua), which a script names on its "-- parts:"
// line.
//
//	operation                    Go builder                      script
//	Obtain of a plain lock       Redis.Take                      take.lua
//	Obtain, TryObtain, the line  Redis.Attempt                   acquire.lua
//	Release of a plain lock      DropArgs                        drop.lua
//	Release, give-backs          Redis.Release                   release.lua
//	Refresh, renewals            RefreshArgs.Call, ParseRefresh  renew.lua
//	TTL, Resume (a take-over)    Redis.PTTL, Redis.Resume        pttl.lua
//	Inspect                      Redis.Inspect                   inspect.lua
//	a quorum's fences            Redis.FenceStep                 fence_step.lua
//	SetFenced                    FencedSet                       fenced_set.lua
//
// A script compares the whole token stored for a holder with the caller's
// before acting, so a holder whose lease expired can never touch the hold
// of the holder that came after it; Redis runs a script atomically, so
// nothing can happen between the comparison and the action.
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
// The data of one lock key K (layout rl1, see layout.go), all in K's Redis
// Cluster slot, the side keys named by Keyspace.Side:
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
//	         Redis ran for that holder (see the lease clock); only holders
//	         whose lease length changed have one. It expires with the
//	         longest lease it was set with.
//	holders  hash token -> the holder's description (WithHolder), for
//	         Inspect; it expires with the holders' last lease, and a
//	         holder's entry goes when its hold ends
//	spent:T  the mark of a spent token T (see spend.lua)
//	fence    the fence counter of K's hash slot (Keyspace.Fence; no expiry)
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
// no more, so a waiter that died holds the key at most until then (see the
// line layer).
package scripts

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The values that Go and the scripts share, in one place: the scripts read
// them by the Lua names of luaConsts, from lua/consts.lua, which
// TestScripts_ConstsFileIsCurrent keeps equal to luaConsts().
//
// The reply codes: each means one thing, in every script that returns it.
const (
	ReplyOK           = 1  // done: the token holds the key now, its lease is set, it was released, the value was written
	ReplyNotOurs      = 0  // the key does not hold the token (free, or another's): nothing changed but a place taken
	ReplySuperseded   = 2  // the token holds the key, but Redis ran a command of a later generation (see the lease clock): nothing changed
	ReplyStaleFence   = 3  // a higher fence was written (SetFenced): nothing changed
	ReplyNotPlain     = -1 // the key is not a plain lock: the full script decides; nothing changed
	replyWrongKind    = -2 // the key holds another kind of lock or data: nothing changed
	replyOtherPermits = -3 // the key is a semaphore of another number of permits: nothing changed
	replyNoFence      = -4 // the fence could not be issued: nothing held
	replyNoPlace      = -5 // the token has no place to renew, or is spent: it must not be used again
)

// Special leases: never a lease left, which is at least 0. The scripts
// report the first two (NO_EXPIRY, ONLY_LINE); the others are Go's.
const (
	LeaseNoExpiry = -1 * time.Millisecond // the holder's key has no expiry: it will not end by itself
	LeaseOnlyLine = -2 * time.Millisecond // no holder is in the way, only the line
	LeaseNotHeld  = -3 * time.Millisecond // the token does not hold the key (TTL)
	LeaseUnknown  = -4 * time.Millisecond // no reply said how long the holder keeps the key (a quorum's attempts)
)

// The marks of a lock's modes in a script's arguments and replies (see
// Mode.arg and what inspect.lua reports), and of how a hand-off is
// announced (see Wakeup.pub).
const (
	markExclusive  = "x"
	markShared     = "s"
	markForeign    = "?" // a string this layout did not write (Inspect: ModeForeign)
	markSemaphore  = "p" // inspect.lua's name of a semaphore
	markPublish    = "p"
	markSPublish   = "s"
	spentField     = "~spent"  // the places field that is there while a token of the key may be spent
	handedField    = "~fence:" // followed by a token: the fence a hand-off gave it, until its release (see handOff)
	MaxIssuedFence = 1<<53 - 1 // Lua numbers are doubles: exact up to 2^53
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
		{"LAYOUT", Layout}, {"TOKEN_PREFIX", tokenPrefix},
		{"OK", ReplyOK}, {"NOT_OURS", ReplyNotOurs}, {"SUPERSEDED", ReplySuperseded}, {"STALE_FENCE", ReplyStaleFence},
		{"NOT_PLAIN", ReplyNotPlain}, {"WRONG_KIND", replyWrongKind}, {"OTHER_PERMITS", replyOtherPermits},
		{"NO_FENCE", replyNoFence}, {"NO_PLACE", replyNoPlace},
		{"NO_EXPIRY", LeaseNoExpiry.Milliseconds()}, {"ONLY_LINE", LeaseOnlyLine.Milliseconds()},
		{"EXCLUSIVE", markExclusive}, {"SHARED", markShared}, {"FOREIGN", markForeign}, {"SEMAPHORE", markSemaphore},
		{"PUB", markPublish}, {"SPUB", markSPublish}, {"SPENT_FIELD", spentField}, {"HANDED_FIELD", handedField}, {"MAX_FENCE", MaxIssuedFence},
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
	takeScript      = load("take")
	Drop            = load("drop")
	acquireScript   = load("acquire")
	releaseScript   = load("release")
	renewScript     = load("renew")
	pttlScript      = load("pttl")
	inspectScript   = load("inspect")
	fenceStepScript = load("fence_step")
	fencedSetScript = load("fenced_set")
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

// Pipeline runs calls on c in one pipeline (with EVALSHA, then EVAL for
// those answered NOSCRIPT), followed by WAIT for r.N replicas when r.N >
// 0; acked is the fewest replicas WAIT reported (0 when it failed). A call
// that the pipeline never sent gets its error.
func Pipeline(ctx context.Context, c redis.Cmdable, calls []Call, r Replicas) (cmds []*redis.Cmd, acked int64, err error) {
	cmds = make([]*redis.Cmd, len(calls))
	acked = -1
	send := func(idx []int, sha bool) error {
		var wait *redis.Cmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				if sha {
					cmds[i] = calls[i].script.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
				} else {
					cmds[i] = calls[i].script.Eval(ctx, p, calls[i].keys, calls[i].args...)
				}
			}
			if r.N > 0 {
				wait = p.Do(ctx, "WAIT", r.N, r.Timeout.Milliseconds())
			}
			return nil
		})
		if wait != nil {
			if n, werr := wait.Int64(); werr == nil && (acked < 0 || n < acked) {
				acked = n
			} else if werr != nil {
				acked = 0
			}
		}
		return err
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	err = send(all, true)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		err = send(again, false)
	}
	for _, cmd := range cmds {
		if err != nil && cmd.Err() == nil && cmd.Val() == nil {
			cmd.SetErr(err) // never sent (older go-redis leaves it unset when the client is closed)
		}
	}
	return cmds, max(acked, 0), err
}

// Replicas is how many replicas must acknowledge a lock's writes, and how
// long to wait for them (WithReplicas); the zero value asks for none.
type Replicas struct {
	N       int
	Timeout time.Duration
}

// NotReplicated is ErrNotReplicated for a write that acked of r.N
// replicas acknowledged in time; what says what it means for the call.
func NotReplicated(r Replicas, acked int64, what string) error {
	return fmt.Errorf("%w: %d of %d replicas acknowledged within %v; %s", ErrNotReplicated, acked, r.N, r.Timeout, what)
}

// WaitSlack is how much of a client's ReadTimeout read a WAIT must leave:
// Redis answers a WAIT that timed out up to 100 ms late, and go-redis
// would stop reading first.
func WaitSlack(read time.Duration) time.Duration { return max(200*time.Millisecond, read/10) }
