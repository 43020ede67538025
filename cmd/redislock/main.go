package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

func main() {
	redis.SetLogger(quiet{}) // its failures reach us as errors, which we report
	os.Exit(cli(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// quiet is a go-redis logger that logs nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// errorLine is the line redislock prints for err on stderr.
func errorLine(err error) string {
	return "redislock: " + strings.TrimPrefix(err.Error(), "redislock: ") + "\n"
}

// Exit statuses of redislock itself (see the package doc). run otherwise
// exits with COMMAND's status.
const (
	exitFree       = 0   // status: nobody holds any KEY
	exitConflict   = 1   // the lock is held (run's default of -E, as flock(1); status: a KEY is not free)
	exitNotHeld    = 1   // release: the token does not hold a KEY; nothing changed
	exitUsage      = 2   // bad command line; nothing was sent to Redis
	exitRedis      = 69  // EX_UNAVAILABLE: Redis failed
	exitCannotSay  = 74  // EX_IOERR: status could not write its output
	exitLost       = 75  // EX_TEMPFAIL: the lock was lost while COMMAND ran
	exitCannotRun  = 126 // COMMAND found but could not be started, as shells
	exitNotFound   = 127 // COMMAND not found, as shells
	exitSignalBase = 128 // + N: killed (COMMAND) or interrupted (the wait) by signal N
)

const usage = `Usage:
  redislock run [flags] KEY... -- COMMAND [ARG...]
  redislock run [flags] KEY... -c 'COMMAND LINE'
  redislock status [-json] [-namespace PREFIX] [-redis URL] KEY...
  redislock release -token TOKEN [-namespace PREFIX] [-redis URL] KEY...
  redislock help

run obtains the lock on KEY, runs COMMAND while it keeps the lock's lease
alive, and releases the lock when COMMAND exits. Locks are fair: waiters
get KEY in the order they came. COMMAND's environment has the key in
REDISLOCK_KEY, the lock's fencing token (a number larger than that of
every earlier holder of KEY) in REDISLOCK_FENCE and the lock's token in
REDISLOCK_TOKEN. SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to
COMMAND; redislock exits when COMMAND does. If the lock is lost while
COMMAND runs, COMMAND gets SIGTERM, then SIGKILL after -grace.

Several KEYs (at most 64) are one lock: run holds all of them or none,
and waits in each KEY's line in its turn, without deadlock. COMMAND's
environment then has REDISLOCK_KEY and REDISLOCK_FENCE for the first KEY,
and every KEY and its fence, one a line in the order given, in
REDISLOCK_KEYS and REDISLOCK_FENCES (set for one KEY too).

  -c 'COMMAND LINE'  run COMMAND LINE with /bin/sh -c (instead of -- COMMAND)
  -n                 do not wait: fail at once if a KEY is held (as -w 0)
  -w SECONDS         wait at most this long for the lock, fractions allowed,
                     or a duration: 1m30s (default: until interrupted)
  -wait DURATION     the same as -w
  -E CODE            exit status when the lock is not obtained (1)
  -q                 quiet: say nothing when the lock is not obtained
                     because KEY is held (other messages remain)
  -s                 shared: hold KEY together with other -s runs, as the
                     readers of a read-write lock; a run without -s holds
                     it alone
  -x                 exclusive: hold KEY alone (the default)
  -permits N         hold one of N permits of a semaphore on KEY (one KEY):
                     at most N runs at once, all with -permits N
  -ttl DURATION      the lock's lease, renewed every third of it while
                     COMMAND runs: how long KEY stays locked after redislock
                     dies (30s)
  -grace DURATION    after the lock is lost, time from SIGTERM to SIGKILL
                     (10s)
  -holder TEXT       the holder's description, which status shows and every
                     client of the Redis can read (default: "redislock run
                     PROGRAM on HOST pid PID", PROGRAM being COMMAND's file
                     name, without its arguments; "" for none)
  -holder-command    describe the holder with COMMAND and its arguments
                     instead of PROGRAM: not if they hold secrets
  -fence-env NAME    environment variables for the fence and the fences,
                     NAME and NAMEs (REDISLOCK_FENCE and REDISLOCK_FENCES;
                     "" for none: inherited ones of those names are removed)
  -token-env NAME    environment variable for the token (REDISLOCK_TOKEN;
                     "" for none: an inherited REDISLOCK_TOKEN is removed)
  -redis URL         the Redis (default $REDIS_URL, else
                     redis://127.0.0.1:6379; not empty)
  -namespace PREFIX  put KEY, and the keys and channels the lock uses
                     beside it, under PREFIX in Redis (for a Redis user
                     limited to PREFIX); the runs and status of a KEY
                     give the same PREFIX

status prints who holds each KEY (mode, holders with their lease left and
token), its latest fence and how many wait; -json prints it as JSON, one
object a KEY.

release releases the lock that TOKEN holds on KEY (a token that status
shows, or that run gave its COMMAND in REDISLOCK_TOKEN): for a lock whose
holder is stuck or gone, or a job finished on another host; a set's KEYs
are given together, in any order. As any release, it hands KEY to the
next in line; a run that held the lock loses it (its COMMAND gets
SIGTERM), and its fences are refused from then on.

Redis URLs:
  redis://[user:password@]host:port[/db]             one node (rediss:// for TLS)
  redis+sentinel://host:port?master_name=NAME[&addr=host:port...]
                                                      the primary of Sentinels
  redis+cluster://host:port[?addr=host:port...]       a Cluster

Exit status:
  0-255  run: COMMAND's status, 128+N if a signal N killed it
  0      status: nobody holds any KEY; release: the lock was released
  1      the lock is held: run -n, or -w ran out (-E sets another);
         status: a KEY is held, or holds data of another kind;
         release: TOKEN does not hold a KEY (nothing changed)
  2      usage error (bad flag, duration or URL, no KEY, a KEY twice,
         no -- or COMMAND, no -token or not a token); nothing was sent
         to Redis
  69     Redis failed (unreachable, refused a command)
  74     status: the output could not be written
  75     run: the lock was lost while COMMAND ran
  126    run: COMMAND could not be started
  127    run: COMMAND was not found
  128+N  run: signal N interrupted the wait for the lock; release: signal
         N interrupted the release
`

// cli runs redislock with the command-line arguments args (without the
// program name) and returns its exit status. getenv reads the environment.
func cli(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, errorf("no subcommand"))
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "run":
		cfg, err := parseRun(args[1:], getenv)
		if err != nil {
			return parseFailed(err, stdout, stderr)
		}
		return run(cfg, stderr)
	case "status":
		cfg, err := parseStatus(args[1:], getenv)
		if err != nil {
			return parseFailed(err, stdout, stderr)
		}
		return status(cfg, stdout, stderr)
	case "release":
		cfg, err := parseRelease(args[1:], getenv)
		if err != nil {
			return parseFailed(err, stdout, stderr)
		}
		return release(cfg, stderr)
	}
	return usageError(stderr, errorf("unknown subcommand %q", args[0]))
}

// parseFailed reports err, an error of a subcommand's parser: usage on
// stdout for -h, else the error on stderr (see usageError).
func parseFailed(err error, stdout, stderr io.Writer) int {
	if err == errHelp {
		fmt.Fprint(stdout, usage)
		return 0
	}
	return usageError(stderr, err)
}

// usageError reports a bad command line, err, on one line of stderr that
// says where the usage is, and returns the usage status.
func usageError(stderr io.Writer, err error) int {
	fmt.Fprint(stderr, errorLine(fmt.Errorf("%w; run 'redislock help' for usage", err)))
	return exitUsage
}
