package scripts

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each script's Go side: the builder of its KEYS and ARGV, next to the
// reader of its reply.

// A Call is one run of a script: the script, its KEYS and ARGV.
type Call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// run runs s on c: with EVALSHA, and once more with EVAL (which loads the
// script) when Redis answers NOSCRIPT. resent reports that go-redis may
// have sent it twice with a copy still to run (see Timing.MayResend). The
// scripts check the type of the lock key before they touch it, so a
// WRONGTYPE error comes from a key the library keeps beside it, which holds
// data it did not write there: it is reported as ErrWrongKind.
func (s Call) run(ctx context.Context, c redis.Scripter, t Timing) (cmd *redis.Cmd, resent bool) {
	start := time.Now()
	cmd = s.script.EvalSha(ctx, c, s.keys, s.args...)
	if isNoScript(cmd.Err()) {
		start = time.Now()
		cmd = s.script.Eval(ctx, c, s.keys, s.args...)
	}
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
		cmd.SetErr(Refuse(fmt.Errorf("%w: a key that the library keeps beside the lock (named {...}:%s:...: see docs/how-it-works.md) holds data it did not write", ErrWrongKind, Layout)))
	}
	return cmd, t.MayResend(time.Since(start))
}

// isNoScript reports whether err is Redis's NOSCRIPT: it does not have the
// script (after a restart, a failover or SCRIPT FLUSH), and ran nothing.
func isNoScript(err error) bool {
	if err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		return false // without errors.As's allocation
	}
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOSCRIPT")
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
func (ks Keyspace) familyKeys(keys []string, token string) []string {
	out := make([]string, 0, 6*len(keys)+1)
	for _, key := range keys {
		out = append(out, ks.Lock(key), ks.Side(key, lineKind), ks.Side(key, placesKind),
			ks.Side(key, gensKind), ks.Side(key, holdersKind), ks.Fence(key))
	}
	if token != "" {
		out = append(out, ks.Side(keys[0], spentKind+":"+token))
	}
	return out
}

// AttemptArgs are the arguments of one acquire.lua run (take.lua's, for a
// plain attempt).
type AttemptArgs struct {
	Keys   []string // the keys to take, all or none: one, or a set's (one slot's)
	Token  string
	Holder string // the holder's description, "" for none
	TTL    time.Duration
	Fenced bool
	Mode   Mode
	Place  time.Duration // how long to keep a place; 0: a single attempt
	Renew  bool          // renew the token's place, do not take one
	Wake   Wakeup        // how a hand-off to the place is announced
	Plain  bool          // a single attempt at a plain lock: take.lua
}

// AttemptResult is the outcome of an acquire.lua (take.lua) run.
type AttemptResult struct {
	Ours     bool
	Fences   []int64       // when ours: one per key
	PTTL     time.Duration // when not ours: blockedFor's (LeaseNoExpiry, LeaseOnlyLine: see line.lua)
	NoPlace  bool          // a renewal found no place, or the token is spent: it must not be used again
	NotPlain bool          // a plain attempt found the key not plain: acquire.lua decides
	Resent   bool          // go-redis may have sent it twice, with a copy still to run (see Timing.MayResend)
	// FreeFirst: a set's first attempt left a key free with its new place
	// first in line, which no release will hand on (the next attempt does).
	FreeFirst bool
}

// Call returns the acquire.lua run of a (take.lua's, for a plain attempt).
func (a AttemptArgs) Call(ks Keyspace) Call {
	if a.Plain {
		return Call{takeScript, ks.plainKeys(a.Keys), []any{a.Token, a.TTL.Milliseconds()}}
	}
	return Call{acquireScript, ks.familyKeys(a.Keys, a.Token), []any{a.Token,
		a.TTL.Milliseconds(), boolArg(a.Fenced), a.Place.Milliseconds(), boolArg(!a.Renew), a.Mode.arg(), a.Wake.pub(), a.Wake.Channel, a.Holder}}
}

// Attempt runs a's script.
func (r *Redis) Attempt(ctx context.Context, a AttemptArgs) (AttemptResult, error) {
	cmd, resent := a.Call(r.Keys).run(ctx, r.Client, r.Timing)
	res, err := ParseAttempt(a, cmd)
	res.Resent = resent
	return res, err
}

// ParseAttempt reads the reply to the acquire.lua (take.lua) run of a.
func ParseAttempt(a AttemptArgs, cmd *redis.Cmd) (AttemptResult, error) {
	res, err := cmd.Slice()
	if err != nil {
		return AttemptResult{}, err
	}
	code, ok := replyInt(res, 0)
	if !ok || len(res) > 2 && code != ReplyOK && (code != ReplyNotOurs || len(res) > 3) {
		return AttemptResult{}, fmt.Errorf("unexpected reply %v", res)
	}
	v, _ := replyInt(res, 1)
	switch code {
	case ReplyOK:
		r := AttemptResult{Ours: true, Fences: make([]int64, len(a.Keys))}
		for i := range a.Keys {
			r.Fences[i], _ = replyInt(res, i+1)
		}
		return r, nil
	case ReplyNotOurs, replyNoPlace:
		return AttemptResult{PTTL: time.Duration(v) * time.Millisecond, NoPlace: code == replyNoPlace, FreeFirst: len(res) == 3}, nil
	case ReplyNotPlain:
		return AttemptResult{NotPlain: true}, nil
	case replyWrongKind:
		return AttemptResult{}, Refuse(wrongKind(fmt.Sprint(res[1]), a.Mode))
	case replyOtherPermits:
		return AttemptResult{}, Refuse(fmt.Errorf("%w: WithPermits(%d): the key is a semaphore of %d permits; every acquisition of a key must name the same number", ErrInvalidOption, a.Mode.Permits, v))
	case replyNoFence:
		return AttemptResult{}, Refuse(fmt.Errorf("%w: %v", ErrFenceNotIssued, res[1]))
	}
	return AttemptResult{}, fmt.Errorf("unexpected reply %v", res)
}

// plainKeys are the KEYS of the plain lock's scripts on keys: per key, the
// lock key and its places hash.
func (ks Keyspace) plainKeys(keys []string) []string {
	out := make([]string, 0, 2*len(keys))
	for _, key := range keys {
		out = append(out, ks.Lock(key), ks.Side(key, placesKind))
	}
	return out
}

// DropArgs returns drop.lua's KEYS and ARGV for the plain lock on keys held
// by token (see Drop: a go-redis Script, run as it is), and ParseDrop reads
// its reply: ReplyOK, ReplyNotOurs with the indexes of the keys not held
// (from 0), or ReplyNotPlain.
func DropArgs(ks Keyspace, keys []string, token string) ([]string, string) {
	return ks.plainKeys(keys), token
}

// ParseDrop reads drop.lua's reply (see DropArgs).
func ParseDrop(cmd *redis.Cmd) (code int64, missing []int, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, nil, err
	}
	code, _ = replyInt(res, 0)
	for i := 1; i < len(res); i++ {
		m, _ := replyInt(res, i)
		missing = append(missing, int(m)-1)
	}
	return code, missing, nil
}

// ReleaseArgs are the arguments of one release.lua run.
type ReleaseArgs struct {
	Keys     []string // one key, or a set's (one slot's)
	Token    string
	Mode     Mode
	Withdraw string        // a place to take out of line too, or ""
	Spend    time.Duration // mark Token spent for that long; 0: no mark
	Wake     string        // the caller's wake channel
	Clean    string        // the side keys Token may have written (see release.lua); "": all of them
}

// ReleaseResult is the outcome of a release.lua run.
type ReleaseResult struct {
	Released bool
	Missing  []int     // the keys (their indexes) it did not hold
	Handoffs int       // places in line that got the key
	Handed   []Handoff // hand-offs to places of the caller's Locker
	Resent   bool      // go-redis may have sent it twice (see Timing.MayResend)
}

// A Handoff is a hand-off of the key to a token (a line's): Fence is its
// fence, 0 for none, -1 when it could not be issued (the place was
// dropped); Lease is the lease it asked for (see the line layer for what it
// got).
type Handoff struct {
	At    int // the index of its key, among a set's
	Token string
	Fence int64
	Lease time.Duration
}

// Release runs release.lua.
func (r *Redis) Release(ctx context.Context, a ReleaseArgs) (ReleaseResult, error) {
	clean := a.Clean
	if clean == "" {
		clean = "ghf"
	}
	s := Call{releaseScript, r.Keys.familyKeys(a.Keys, a.Token),
		[]any{a.Token, a.Mode.arg(), a.Withdraw, a.Spend.Milliseconds(), a.Wake, clean}}
	cmd, resent := s.run(ctx, r.Client, r.Timing)
	out := ReleaseResult{Resent: resent}
	res, err := cmd.Slice()
	if err != nil {
		return out, err
	}
	missing, _ := res[min(2, len(res)-1)].([]any)
	own, _ := res[len(res)-1].([]any)
	held, _ := replyInt(res, 0)
	n, _ := replyInt(res, 1)
	if len(res) != 4 || len(own)%4 != 0 {
		return out, fmt.Errorf("unexpected reply %v", res)
	}
	out.Released, out.Handoffs = held == ReplyOK, int(n)
	for _, i := range missing {
		out.Missing = append(out.Missing, int(i.(int64))-1)
	}
	for i := 0; i < len(own); i += 4 {
		token, _ := own[i+1].(string)
		fence, _ := replyInt(own, i+2)
		lease, _ := replyInt(own, i+3)
		at, _ := replyInt(own, i)
		out.Handed = append(out.Handed, Handoff{At: int(at) - 1, Token: token, Fence: fence, Lease: time.Duration(lease) * time.Millisecond})
	}
	return out, nil
}

// RefreshArgs are the arguments of a refresh: a renewal of Token's lease
// in Mode to TTL, of generation Gen, issuing a fence when Fenced.
type RefreshArgs struct {
	Keys      []string // one key, or a set's (one slot's)
	Token     string
	Mode      Mode
	TTL       time.Duration
	Gen       int64
	Fenced    bool
	Described bool // the holder has a description (WithHolder)
}

// Call returns renew.lua's run of a.
func (a RefreshArgs) Call(ks Keyspace) Call {
	return Call{renewScript, ks.familyKeys(a.Keys, ""), []any{a.Token, a.TTL.Milliseconds(), a.Gen, boolArg(a.Fenced), a.Mode.arg(), boolArg(a.Described)}}
}

// ParseRefresh reads renew.lua's (renew_shared.lua's) reply: its code
// (ReplyOK, ReplySuperseded or ReplyNotOurs) and, for ReplyOK, the fences
// it issued, one per key; for ReplyNotOurs, the first key not held, by its
// place from 1 (0: not known).
func ParseRefresh(cmd *redis.Cmd) (code int64, fences []int64, missing int, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, nil, 0, err
	}
	code, ok := replyInt(res, 0)
	switch {
	case !ok || len(res) < 2:
		return 0, nil, 0, fmt.Errorf("unexpected reply %v", res)
	case code == replyNoFence:
		return 0, nil, 0, Refuse(fmt.Errorf("%w: %v", ErrFenceNotIssued, res[1]))
	case code == ReplyNotOurs:
		i, _ := replyInt(res, 1)
		return code, nil, int(i), nil
	}
	for i := 1; i < len(res); i++ {
		f, _ := replyInt(res, i)
		fences = append(fences, f)
	}
	return code, fences, 0, nil
}

// PTTL runs pttl.lua: the lease left of token at keys in mode m (the
// shortest, for a set's), LeaseNotHeld when token does not hold them all.
func (r *Redis) PTTL(ctx context.Context, keys []string, token string, m Mode) (time.Duration, error) {
	h, err := r.holding(ctx, keys, token, m.arg())
	if err == nil && h.Missing > 0 {
		return LeaseNotHeld, nil
	}
	return h.Left, err
}

// A Holding is how a token holds keys, as pttl.lua found it.
type Holding struct {
	Mode    Mode
	Gen     int64         // the highest generation Redis ran for the token
	Left    time.Duration // the shortest lease left
	Missing int           // the first key not held (from 1); 0 when the token holds them all
}

// Resume runs pttl.lua for the mode token holds keys in: how it holds them.
func (r *Redis) Resume(ctx context.Context, keys []string, token string) (Holding, error) {
	return r.holding(ctx, keys, token, "")
}

// holding runs pttl.lua for token at keys in mode (a script argument; ""
// for the one it holds them in).
func (r *Redis) holding(ctx context.Context, keys []string, token, mode string) (Holding, error) {
	cmd, _ := Call{pttlScript, r.Keys.familyKeys(keys, ""), []any{token, mode}}.run(ctx, r.Client, r.Timing)
	res, err := cmd.Slice()
	if err != nil {
		return Holding{}, err
	}
	code, _ := replyInt(res, 0)
	if code != ReplyOK || len(res) != 4 {
		i, _ := replyInt(res, 1)
		return Holding{Missing: max(int(i), 1)}, nil
	}
	var h Holding
	switch m, _ := res[2].(string); m {
	case markExclusive:
	case markShared:
		h.Mode.Shared = true
	default:
		h.Mode.Permits, _ = strconv.Atoi(m)
	}
	ms, _ := replyInt(res, 1)
	h.Left = time.Duration(ms) * time.Millisecond
	h.Gen, _ = replyInt(res, 3)
	return h, nil
}

// Info is what inspect.lua found at a key (see the root package's Info).
type Info struct {
	Mode    string // "" free, or a mark: markExclusive, markShared, markSemaphore, markForeign; else another kind
	Permits int
	Fence   int64
	Waiting int
	Holders []Holder
}

// Holder is one holder that inspect.lua found.
type Holder struct {
	Token       string
	Description string
	TTL         time.Duration
}

// The modes of Info, as Inspect names them.
const (
	InfoExclusive = markExclusive
	InfoShared    = markShared
	InfoSemaphore = markSemaphore
	InfoForeign   = markForeign
)

// Inspect runs inspect.lua.
func (r *Redis) Inspect(ctx context.Context, key string) (Info, error) {
	cmd, _ := Call{inspectScript, r.Keys.familyKeys([]string{key}, ""), nil}.run(ctx, r.Client, r.Timing)
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
	info := Info{Mode: what, Permits: int(permits), Waiting: int(waiting)}
	info.Fence, _ = strconv.ParseInt(fence, 10, 64)
	for i := 4; i < len(res); i += 3 {
		token, _ := res[i].(string)
		ms, _ := replyInt(res, i+1)
		desc, _ := res[i+2].(string)
		info.Holders = append(info.Holders, Holder{Token: token, Description: desc, TTL: time.Duration(ms) * time.Millisecond})
	}
	return info, nil
}

// FenceStep runs fence_step.lua on the fence counter of the lock on key:
// to is 0 to increment it, or the value to raise it to.
func (r *Redis) FenceStep(ctx context.Context, key string, to int64) (int64, error) {
	cmd, _ := Call{fenceStepScript, []string{r.Keys.Fence(key)}, []any{to}}.run(ctx, r.Client, r.Timing)
	code, v, err := codeAndValue(cmd)
	switch {
	case err != nil:
		return 0, err
	case code != ReplyOK:
		return 0, Refuse(fmt.Errorf("%w: %v", ErrFenceNotIssued, v))
	}
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected reply %v", v)
}

// FencedSet runs fenced_set.lua: ok reports whether the value was written;
// seen is the resource's fence before the call. A key that holds something
// else is ErrWrongKind.
func FencedSet(ctx context.Context, c redis.Scripter, key, value string, fence int64) (ok bool, seen int64, err error) {
	cmd, _ := Call{fencedSetScript, []string{key}, []any{value, fence}}.run(ctx, c, Timing{})
	code, v, err := codeAndValue(cmd)
	switch {
	case err != nil:
		return false, 0, err
	case code == replyWrongKind:
		what := "a Redis " + fmt.Sprint(v)
		if v == "hash" {
			what = "a hash of other fields, or whose fence is not a non-negative integer"
		}
		return false, 0, Refuse(fmt.Errorf("%w: it holds %s, not a resource SetFenced writes (a hash with the fields value and fence); nothing was written", ErrWrongKind, what))
	}
	seen, _ = v.(int64)
	return code == ReplyOK, seen, nil
}

// Other reports whether the key holds data of another kind than the
// library's locks (a hash, data of another layout...): not nothing, not a
// lock of any mode, not another owner's string.
func (i Info) Other() bool {
	switch i.Mode {
	case "", markExclusive, markShared, markSemaphore, markForeign:
		return false
	}
	return true
}
