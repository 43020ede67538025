// Command redislock runs a command under a distributed lock held in Redis,
// as flock(1) does with a lock file and `etcdctl lock` with etcd, shows
// who holds a lock, and releases a lock by its token.
//
//	Usage:
//	  redislock run [flags] KEY... -- COMMAND [ARG...]
//	  redislock run [flags] KEY... -c 'COMMAND LINE'
//	  redislock status [-json] [-namespace PREFIX] [-redis URL] KEY...
//	  redislock release -token TOKEN [-namespace PREFIX] [-redis URL] KEY...
//	  redislock help
//
//	run obtains the lock on KEY, runs COMMAND while it keeps the lock's lease
//	alive, and releases the lock when COMMAND exits. Locks are fair: waiters
//	get KEY in the order they came. COMMAND's environment has the key in
//	REDISLOCK_KEY, the lock's fencing token (a number larger than that of
//	every earlier holder of KEY) in REDISLOCK_FENCE and the lock's token in
//	REDISLOCK_TOKEN. SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed on to
//	COMMAND; redislock exits when COMMAND does. If the lock is lost while
//	COMMAND runs, COMMAND gets SIGTERM, then SIGKILL after -grace.
//
//	Several KEYs (at most 64) are one lock: run holds all of them or none,
//	and waits in each KEY's line in its turn, without deadlock. COMMAND's
//	environment then has REDISLOCK_KEY and REDISLOCK_FENCE for the first KEY,
//	and every KEY and its fence, one a line in the order given, in
//	REDISLOCK_KEYS and REDISLOCK_FENCES (set for one KEY too).
//
//	  -c 'COMMAND LINE'  run COMMAND LINE with /bin/sh -c (instead of -- COMMAND)
//	  -n                 do not wait: fail at once if a KEY is held (as -w 0)
//	  -w SECONDS         wait at most this long for the lock, fractions allowed,
//	                     or a duration: 1m30s (default: until interrupted)
//	  -wait DURATION     the same as -w
//	  -E CODE            exit status when the lock is not obtained (1)
//	  -q                 quiet: say nothing when the lock is not obtained
//	                     because KEY is held (other messages remain)
//	  -s                 shared: hold KEY together with other -s runs, as the
//	                     readers of a read-write lock; a run without -s holds
//	                     it alone
//	  -x                 exclusive: hold KEY alone (the default)
//	  -permits N         hold one of N permits of a semaphore on KEY (one KEY):
//	                     at most N runs at once, all with -permits N
//	  -ttl DURATION      the lock's lease, renewed every third of it while
//	                     COMMAND runs: how long KEY stays locked after redislock
//	                     dies (30s)
//	  -grace DURATION    after the lock is lost, time from SIGTERM to SIGKILL
//	                     (10s)
//	  -holder TEXT       the holder's description, which status shows and every
//	                     client of the Redis can read (default: "redislock run
//	                     PROGRAM on HOST pid PID", PROGRAM being COMMAND's file
//	                     name, without its arguments; "" for none)
//	  -holder-command    describe the holder with COMMAND and its arguments
//	                     instead of PROGRAM: not if they hold secrets
//	  -fence-env NAME    environment variables for the fence and the fences,
//	                     NAME and NAMEs (REDISLOCK_FENCE and REDISLOCK_FENCES;
//	                     "" for none: inherited ones of those names are removed)
//	  -token-env NAME    environment variable for the token (REDISLOCK_TOKEN;
//	                     "" for none: an inherited REDISLOCK_TOKEN is removed)
//	  -redis URL         the Redis (default $REDIS_URL, else
//	                     redis://127.0.0.1:6379; not empty)
//	  -namespace PREFIX  put KEY, and the keys and channels the lock uses
//	                     beside it, under PREFIX in Redis (for a Redis user
//	                     limited to PREFIX); the runs and status of a KEY
//	                     give the same PREFIX
//
//	status prints who holds each KEY (mode, holders with their lease left and
//	token), its latest fence and how many wait; -json prints it as JSON, one
//	object a KEY.
//
//	release releases the lock that TOKEN holds on KEY (a token that status
//	shows, or that run gave its COMMAND in REDISLOCK_TOKEN): for a lock whose
//	holder is stuck or gone, or a job finished on another host; a set's KEYs
//	are given together, in any order. As any release, it hands KEY to the
//	next in line; a run that held the lock loses it (its COMMAND gets
//	SIGTERM), and its fences are refused from then on.
//
//	Redis URLs:
//	  redis://[user:password@]host:port[/db]             one node (rediss:// for TLS)
//	  redis+sentinel://host:port?master_name=NAME[&addr=host:port...]
//	                                                      the primary of Sentinels
//	  redis+cluster://host:port[?addr=host:port...]       a Cluster
//
//	Exit status:
//	  0-255  run: COMMAND's status, 128+N if a signal N killed it
//	  0      status: nobody holds any KEY; release: the lock was released
//	  1      the lock is held: run -n, or -w ran out (-E sets another);
//	         status: a KEY is held, or holds data of another kind;
//	         release: TOKEN does not hold a KEY (nothing changed)
//	  2      usage error (bad flag, duration or URL, no KEY, a KEY twice,
//	         no -- or COMMAND, no -token or not a token); nothing was sent
//	         to Redis
//	  69     Redis failed (unreachable, refused a command)
//	  74     status: the output could not be written
//	  75     run: the lock was lost while COMMAND ran
//	  126    run: COMMAND could not be started
//	  127    run: COMMAND was not found
//	  128+N  run: signal N interrupted the wait for the lock; release: signal
//	         N interrupted the release
//
// # Command line
//
// Flags may come before, between or after the KEYs; "--" ends them, and
// what follows is COMMAND. Each KEY and each flag is given once: one given
// twice is a usage error (status 2), not "the last one wins", and so are
// flags that say different things (-n, -w and -wait; -s, -x and -permits;
// -holder and -holder-command; -c and "-- COMMAND"). Everything on the command line,
// the Redis URL included, is checked before Redis is contacted: a usage
// error sends nothing to Redis, and is one line on standard error that
// says what is wrong and to run 'redislock help' for the usage.
//
// The flags of flock(1) that fit a lock in Redis mean what they mean to
// flock: -n, -w SECONDS (fractions allowed; 0 is -n), -E CODE, -s, -x and
// -c 'COMMAND LINE'. flock runs -c's command line with $SHELL; redislock
// always with /bin/sh, the shell that cron and scripts write for. -wait,
// redislock's own, is flock's long name of -w, and takes seconds as -w
// does, or a duration with its unit.
//
// -q makes a lock that is not obtained because KEY is held (status 1 or
// -E's) silent, as flock is: a cron job skipped by -n -q -E 0 writes
// nothing, and cron mails nothing. Every other message remains: a KEY that
// holds data of another kind than a lock (no wait ends that), usage errors,
// a Redis that failed, a signal that ended the wait, a lost lock, a
// release that did not complete.
//
// # Sets of keys
//
// Several KEYs are one lock, as redislock.Locker.ObtainMulti takes them:
// run starts COMMAND holding every KEY, or exits holding none. It waits
// with one place in the line of each KEY, and takes them all when it is
// first in every line; so runs on sets that overlap, and runs on single
// keys, never deadlock and are served in their turn. -n, -w, -E, -q, -s
// (a reader of every KEY), -ttl, -grace, the holder's description and the
// fences apply to the set; losing any KEY is losing the lock (status 75).
// A set is 1 to 64 distinct KEYs without a newline in them, and not a
// semaphore: -permits takes one KEY. The message of a lock not obtained
// names a KEY that is held, and what holds it.
//
// COMMAND's environment has REDISLOCK_KEYS, every KEY one a line in the
// order given, and REDISLOCK_FENCES, each KEY's fence one a line in the
// same order (each larger than that of every earlier holder of that KEY):
// after `set -- $REDISLOCK_FENCES`, $1 is the first KEY's fence, $2 the
// second's. REDISLOCK_KEY and REDISLOCK_FENCE are the first KEY's, as with
// one KEY; a run on one KEY sets the lists too, with that KEY and its
// fence, so that a COMMAND written for sets works with one KEY. -fence-env
// NAME names the fences NAMEs. On a Redis Cluster, give the KEYs a hash
// tag ({cart:42}:apple) to take them with one command: KEYs of several
// hash slots are taken slot by slot, and those of the earlier slots are
// held while run waits for the later ones.
//
// status with several KEYs prints each in turn, a blank line between them
// (with -json, one JSON object a KEY, one after another, as jq reads
// them), and exits 0 when none of them is held.
//
// # The holder's description
//
// run stores a description of itself beside the lock, which status shows
// and every client of the Redis can read: by default "redislock run
// PROGRAM on HOST pid PID", where PROGRAM is the file name of COMMAND (sh
// for -c), without its arguments, which may hold secrets, and PID is
// redislock's. -holder TEXT stores TEXT instead (printable UTF-8 of at
// most 200 bytes; "" stores none), -holder-command COMMAND with its
// arguments (cut to 200 bytes; characters that are not printable become
// '?').
//
// # Redis URLs
//
// Ports must be in 1..65535, the database 0 or more, and the numbers of
// go-redis's query parameters in range (pool_size and the other pool sizes
// in 0..10000, protocol 2 or 3, ...): go-redis takes a database of -1 as
// 0, and panics on a negative pool_size. A password's '/', '?', '#' and
// '%' must be escaped (%2F, %3F, %23, %25). A password is never printed:
// every message shows the URL with "xxxxx" for it (and for a password=
// parameter), as url.URL.Redacted does.
//
// # Signals and process groups
//
// Outside an interactive terminal (cron, systemd, a script, a container),
// COMMAND leads a process group of its own, and the signals redislock passes
// on, and the SIGTERM and SIGKILL of a lost lock, go to that whole group: a
// shell script's children stop with it. When redislock is the foreground job
// of a terminal, COMMAND stays in redislock's process group so that it can
// read the terminal; the terminal then sends Ctrl-C (SIGINT) and Ctrl-\
// (SIGQUIT) to COMMAND itself, and redislock does not pass them on a second
// time; other signals go to COMMAND's process alone. On Linux, COMMAND gets
// SIGTERM if redislock dies (SIGKILL, the OOM killer): its lease then lasts
// at most -ttl longer.
//
// SIGHUP and SIGINT that redislock was started with ignored (nohup, a
// background job of a script) stay ignored, by redislock and COMMAND.
// SIGQUIT and SIGTERM do not: Go's runtime takes them over whatever
// redislock inherited, so it cannot tell that they were ignored; it passes
// them on, and COMMAND starts with their default action. While COMMAND runs,
// redislock does not exit on a signal: it passes it on and waits for
// COMMAND, then releases the lock. Processes that COMMAND leaves running
// when it exits are not waited for: the lock is released when COMMAND exits
// (after a lost lock, they get the rest of -grace, then SIGKILL).
//
// # Status
//
// status prints one value a line. A key, holder description or token that
// is not plain printable text (a newline, a control or escape character,
// invalid UTF-8, a space at either end, a leading '"' or '(') is printed
// quoted, in Go syntax: descriptions come from Redis, where anyone may
// write them, and must not forge lines. -json escapes them as JSON does
// (invalid UTF-8 becomes U+FFFD). status exits 0 when nobody holds KEY
// (mode free), 1 when it is held (mode exclusive, shared or semaphore) or
// holds data of another kind (mode other), as a script can test: `if
// redislock status KEY >/dev/null; then` is "if KEY is free". With several
// KEYs, it exits 0 when all of them are free.
//
// # Release
//
// release -token TOKEN KEY... releases a lock that another process holds,
// given its token: an operator clearing a stuck lock, or a job started on
// one host and finished on another. TOKEN is a holder's token as status
// prints it (text or -json, copied as it is), or as run gave its COMMAND in
// REDISLOCK_TOKEN; KEY is the lock's key, or every KEY of a set, in any
// order (one KEY of a set releases that KEY alone). It holds the lock
// again with redislock.Locker.Resume, which checks that TOKEN holds every
// KEY, in whatever mode (a lock, a reader, a permit of a semaphore), and
// issues new fences, then releases it as any release does: the next in
// line gets KEY at once. The holder it is taken from finds its lock lost:
// a run gets a refused renewal within a third of its -ttl, sends SIGTERM
// to COMMAND and exits 75; the writes it fences with its fences are
// refused. release prints nothing when it released the lock and exits 0;
// it exits 1, changing nothing, when TOKEN does not hold a KEY (the
// message names it: a free KEY, another holder's, data of another kind).
// A string that is no token of redislock (another owner's lock, mode
// foreign in status) is a usage error, found before Redis is contacted.
// The resume takes at most 5 s (a signal ends it at once: status 128+N),
// the release 5 s more; a resume whose outcome is unknown (a signal, a
// Redis that did not answer) or a release that did not complete leaves a
// lease of at most 10 s, which then ends by itself.
//
// # Exit statuses
//
// Status 1 (or -E's) also comes at once, whatever -w, when a KEY is held in
// another mode than run asks for (a semaphore's permits, for a lock or a
// reader; a lock's holders or a string redislock did not write, for
// -permits), as a semaphore of another
// number of permits, or holds data of another kind than a lock (Redis's
// WRONGTYPE): the key is in use, and run does not wait for it; the message
// on standard error says what holds it. Writers and readers of one key
// (run without and with -s) wait for each other.
//
// A status that redislock reports for itself (1, 69, 75, 126, 127) may also
// be COMMAND's own; the message redislock prints on standard error tells
// them apart. Status 75 (EX_TEMPFAIL) means the work may have overlapped
// with the next holder's: it is also reported when COMMAND exited on its own
// but the release found that a KEY was no longer this lock's. Everything
// redislock does with Redis after COMMAND exited (the release and the
// clean-up behind it) takes at most 5 s in all. A release that fails or
// does not complete in that time (Redis down, or not answering) is
// reported on standard error and leaves COMMAND's status; the lease then
// ends by itself within -ttl.
package main
