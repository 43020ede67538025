// Command redislock runs a command under a distributed lock held in Redis,
// as flock(1) does with a lock file and `etcdctl lock` with etcd, and shows
// who holds a lock.
//
//	Usage:
//	  redislock run [flags] KEY -- COMMAND [ARG...]
//	  redislock status [-json] [-redis URL] KEY
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
//	  -ttl DURATION    the lock's lease, renewed every third of it while COMMAND
//	                   runs: how long KEY stays locked after redislock dies (30s)
//	  -wait DURATION   wait at most this long for the lock (default: until
//	                   interrupted)
//	  -n               do not wait: fail at once if KEY is held (as -wait 0)
//	  -E CODE          exit status when the lock is not obtained (1)
//	  -grace DURATION  after the lock is lost, time from SIGTERM to SIGKILL (10s)
//	  -fence-env NAME  environment variable for the fence (REDISLOCK_FENCE;
//	                   "" for none: an inherited REDISLOCK_FENCE is removed)
//	  -token-env NAME  environment variable for the token (REDISLOCK_TOKEN;
//	                   "" for none: an inherited REDISLOCK_TOKEN is removed)
//	  -redis URL       the Redis (default $REDIS_URL, else redis://127.0.0.1:6379;
//	                   not empty)
//
//	status prints who holds KEY (mode, holders with their lease left and
//	token), its latest fence and how many wait; -json prints it as JSON.
//
//	Redis URLs:
//	  redis://[user:password@]host:port[/db]             one node (rediss:// for TLS)
//	  redis+sentinel://host:port?master_name=NAME[&addr=host:port...]
//	                                                      the primary of Sentinels
//	  redis+cluster://host:port[?addr=host:port...]       a Cluster
//
//	Exit status:
//	  0-255  run: COMMAND's status, 128+N if a signal N killed it
//	  1      the lock is held: run -n, or -wait ran out (-E sets another)
//	  2      usage error (bad flag, duration or URL, no KEY, no -- or
//	         COMMAND); nothing was sent to Redis
//	  69     Redis failed (unreachable, refused a command)
//	  74     status: the output could not be written
//	  75     run: the lock was lost while COMMAND ran
//	  126    run: COMMAND could not be started
//	  127    run: COMMAND was not found
//	  128+N  run: signal N interrupted the wait for the lock
//
// # Command line
//
// Flags may come before or after KEY; "--" ends them, and what follows is
// COMMAND. KEY and each flag are given once: a flag given twice is a usage
// error (status 2), not "the last one wins". Everything on the command
// line, the Redis URL included (its ports in 1..65535), is checked before
// Redis is contacted: a usage error sends nothing to Redis.
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
// (invalid UTF-8 becomes U+FFFD).
//
// # Exit statuses
//
// Status 1 (or -E's) also comes at once, whatever -wait, when KEY holds a
// semaphore of this library (WithPermits) or data of another kind than a
// lock (Redis's WRONGTYPE): the key is in use, and run does not wait for
// it; the message on standard error says what holds it. The readers of a
// read-write lock (WithShared) hold KEY as any holder does: run waits for
// them.
//
// A status that redislock reports for itself (1, 69, 75, 126, 127) may also
// be COMMAND's own; the message redislock prints on standard error tells
// them apart. Status 75 (EX_TEMPFAIL) means the work may have overlapped
// with the next holder's: it is also reported when COMMAND exited on its own
// but the release found that KEY was no longer this lock's. Everything
// redislock does with Redis after COMMAND exited (the release and the
// clean-up behind it) takes at most 5 s in all. A release that fails or
// does not complete in that time (Redis down, or not answering) is
// reported on standard error and leaves COMMAND's status; the lease then
// ends by itself within -ttl.
package main
