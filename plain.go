package redislock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The plain lock: an exclusive lock with no fence, no holder description
// and nobody waiting is one string key, the holder's token, whose expiry is
// the lease, and nothing else. Taking it is a SET; releasing it a compare
// and delete. These scripts are its whole life when nothing else happens:
// each checks first that nothing else did (a line formed, a token was
// spent; see scripts.go), and hands over to the full scripts when it did.
//
// The places key (see scripts.go) is the one side key they look at: it
// exists while anyone waits in the key's line, and while a token of the key
// is spent (see spendLua), so one EXISTS tells them the key is plain.

// takeScript makes one attempt to take a plain lock.
//
//	KEYS[1] the lock key
//	KEYS[2] its places key (see scripts.go)
//	ARGV[1] token
//	ARGV[2] lease (ttl) in ms, >= 1
//	returns {1} when the token holds the key now, with the lease ARGV[2]
//	        from now or longer: it was free and nobody waits, or an earlier
//	        copy of this attempt took it (go-redis sent it again: see
//	        counted), whose lease is only ever lengthened (see leaseClock);
//	        {0, ms} when another holder of this layout has it: ms is its
//	        lease left;
//	        {-1} when the key is not plain (a line, a spent token, holders
//	        of another kind, data this layout did not write): the full
//	        acquireScript decides.
//	        An error reply from a Redis older than 7.0, where SET cannot
//	        take NX and GET together.
var takeScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[2]) == 1 then
	return {-1}
end
local held = redis.pcall("SET", KEYS[1], ARGV[1], "NX", "GET", "PX", ARGV[2])
if type(held) == "table" then
	if string.find(held.err, "WRONGTYPE", 1, true) then
		return {-1}
	end
	return redis.error_reply(held.err)
elseif not held then
	return {1}
elseif held == ARGV[1] then
	local left = redis.call("PTTL", KEYS[1])
	if left >= 0 and left < tonumber(ARGV[2]) then
		redis.call("PEXPIRE", KEYS[1], ARGV[2])
	end
	return {1}
elseif string.sub(held, 1, 4) ~= "rl1:" then
	return {-1}
end
return {0, redis.call("PTTL", KEYS[1])}`)

// dropScript releases a plain lock.
//
//	KEYS[1] the lock key
//	KEYS[2] its places key
//	ARGV[1] token
//	returns 1 when the key held the token and was deleted; 0 when it did
//	        not hold it (nothing changed); -1 when it holds the token but is
//	        not plain (someone waits, or a token is spent): nothing changed,
//	        and the full releaseScript must hand it on.
var dropScript = redis.NewScript(`
if redis.pcall("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
if redis.call("EXISTS", KEYS[2]) == 1 then
	return -1
end
redis.call("DEL", KEYS[1])
return 1`)

// renewScript sets the lease of an exclusive lock if it is still held, and
// issues it a fence when asked.
//
//	KEYS[1] the lock key
//	KEYS[2] its gens key (see leaseClock)
//	KEYS[3] its fence counter, with ARGV[4] = "1"
//	KEYS[#] its holders key, with ARGV[5] = "1" (last)
//	ARGV[1] token
//	ARGV[2] new ttl in ms (>= 1)
//	ARGV[3] the command's generation (see leaseClock)
//	ARGV[4] "1" to issue a new fence, "0" not to
//	ARGV[5] "1" when the holder has a description (WithHolder), "0" if not
//	returns {1, fence} when the key held the token and its lease was set to
//	        ARGV[2] (fence: the new fence, or 0);
//	        {2, 0} when the key holds the token but Redis has run a command
//	        of a later generation for it: nothing changed;
//	        {0, 0} when the key is absent or holds anything else: nothing
//	        changed;
//	        {-4, why} when the fence could not be issued: nothing changed.
var renewScript = redis.NewScript(fenceLua + genLua + `
if redis.pcall("GET", KEYS[1]) ~= ARGV[1] then
	return {0, 0}
end
if not newerGen(KEYS[2], ARGV[1], ARGV[3], ARGV[2]) then
	return {2, 0}
end
local fence, err = 0, nil
if ARGV[4] == "1" then
	fence, err = issueFence(KEYS[3])
	if not fence then
		return {-4, err}
	end
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
if ARGV[5] == "1" then
	redis.call("PEXPIRE", KEYS[#KEYS], ARGV[2])
end
return {1, fence}`)

// pttlScript reports the lease left of an exclusive lock if it is still
// held.
//
//	KEYS[1] the lock key
//	ARGV[1] token
//	returns the key's lease left in ms (>= 0) when it holds the token,
//	        -2 when the key is absent or holds anything else.
var pttlScript = redis.NewScript(`
if redis.pcall("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PTTL", KEYS[1])
end
return -2`)

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
	cmd, n := s.exec(ctx, c)
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
		cmd.SetErr(refusal{fmt.Errorf("%w: a key that the library keeps beside the lock (named {...}:%s:...: see docs/how-it-works.md) holds data it did not write", ErrWrongKind, layout)})
	}
	return cmd, n
}

// exec is run without its reading of WRONGTYPE: for scripts on a user's
// key (SetFenced's).
func (s scriptCall) exec(ctx context.Context, c redis.Scripter) (*redis.Cmd, sends) {
	cmd := s.script.EvalSha(ctx, c, s.keys, s.args...)
	n := s.sends()
	if isNoScript(cmd.Err()) {
		cmd = s.script.Eval(ctx, c, s.keys, s.args...)
		n = s.sends()
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
// acquisition marks its token spent when it gives it up (see spendLua),
// and a release that finds its lock gone knows it may have released it
// itself (see Lock.end) — only when it happened: a plain lock writes no
// mark otherwise.
//
// go-redis's protocol writer calls MarshalBinary once per write; other
// callers (an auto-pipeliner sizing its batch) are not counted, told apart
// by the calling function's package.
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
