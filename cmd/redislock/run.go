package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/cmd/redislock/internal/redisurl"
)

// Timeouts of the calls run makes outside the wait for the lock.
const (
	pingTimeout    = 5 * time.Second        // the first contact with Redis
	inspectTimeout = time.Second            // who holds the keys, for the conflict message
	endTimeout     = 5 * time.Second        // all run does with Redis at its end (see runner.ending)
	leftoverPoll   = 50 * time.Millisecond  // how often stopGroup looks for processes left
	lostHookWait   = 100 * time.Millisecond // how long whyLost waits for the Lost hook
)

// forwarded are the signals run passes on to COMMAND (and that interrupt
// the wait for the lock).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// A runner is one run of the run subcommand.
type runner struct {
	cfg    runConfig
	stderr io.Writer
	rdb    redis.UniversalClient
	locker *redislock.Locker
	sigs   chan os.Signal // the forwarded signals redislock receives
	term   *terminal      // the controlling terminal whose foreground job redislock is, or nil
	lostBy chan string    // why the lock was lost, from the Lost hook

	// end bounds what run does with Redis once it is ending (see ending);
	// nil until then.
	end       context.Context
	endCancel context.CancelFunc
}

// run runs the run subcommand and returns the exit status.
func run(cfg runConfig, stderr io.Writer) int {
	path, err := exec.LookPath(cfg.argv[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		fmt.Fprint(stderr, errorLine(err))
		return startFailed(err)
	}
	rdb, err := redisurl.NewClient(cfg.redisURL)
	if err != nil { // parseRun made one from the same URL
		return usageError(stderr, err)
	}
	defer rdb.Close()

	r := &runner{cfg: cfg, stderr: stderr, rdb: rdb, sigs: make(chan os.Signal, 8), lostBy: make(chan string, 1)}
	for _, s := range forwarded {
		if !signal.Ignored(s) { // nohup: stay immune, and so does COMMAND
			signal.Notify(r.sigs, s)
		}
	}
	defer signal.Stop(r.sigs)
	r.term = openTerminal()
	defer r.term.close()
	r.locker = redislock.New(rdb,
		redislock.WithNamespace(cfg.namespace),
		redislock.WithFencing(),
		redislock.WithHolder(description(cfg, hostname(), os.Getpid())),
		redislock.WithHooks(redislock.Hooks{Lost: func(_ context.Context, e redislock.LostEvent) {
			why := strings.TrimPrefix(strings.TrimPrefix(e.Err.Error(), "redislock: "), "lock lost: ")
			select {
			case r.lostBy <- fmt.Sprintf(" after %v: %s", e.Held.Round(time.Millisecond), why):
			default:
			}
		}}),
	)

	defer r.shutdown()
	lk, code := r.obtain()
	if lk == nil {
		return code
	}
	return r.supervise(lk, path)
}

// ending returns the context of everything run does with Redis once it is
// ending: once COMMAND exited (the release, the Locker's clean-up), or the
// wait for the lock ended without running it (who holds the key, a lock to
// give back, a place in line to give up). Its one deadline, endTimeout
// from the first call, bounds all of it together: calls one after another,
// each with a bound of its own, would add up while Redis does not answer,
// and keep COMMAND's status from its caller that much longer. A lock left
// then ends by itself within -ttl.
func (r *runner) ending() context.Context {
	if r.end == nil {
		r.end, r.endCancel = context.WithTimeout(context.Background(), endTimeout)
	}
	return r.end
}

// shutdown waits, within ending's bound, for the clean-up the Locker does
// in the background (a place in line given up when the wait ended, a
// release still under way), so that nothing of this run is left in Redis
// when it exits: a place left there could be handed the key after the
// exit.
func (r *runner) shutdown() {
	ctx := r.ending()
	defer r.endCancel()
	_ = r.locker.Shutdown(ctx)
}

// An interrupted is the cause of a wait for the lock that a signal ended.
type interrupted struct{ sig os.Signal }

func (i interrupted) Error() string { return "interrupted by " + i.sig.String() }

// obtain checks that Redis answers and obtains the lock. It returns the
// lock, or nil and the exit status.
func (r *runner) obtain() (*redislock.Lock, int) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case s := <-r.sigs:
			cancel(interrupted{s})
		case <-stop:
		}
	}()
	lk, err := r.tryObtain(ctx)
	close(stop)
	<-stopped
	c := r.cfg
	if i, ok := context.Cause(ctx).(interrupted); ok {
		if lk != nil {
			r.release(lk)
		}
		fmt.Fprintf(r.stderr, "redislock: %v (signal %d) while waiting for the lock on %s\n", i.sig, signalNumber(i.sig), lockName(c.keys))
		return nil, exitSignalBase + signalNumber(i.sig)
	}
	switch {
	case isConflict(err, c):
		return nil, r.notObtained(err)
	case err != nil:
		fmt.Fprint(r.stderr, errorLine(err))
		return nil, exitRedis
	}
	return lk, 0
}

// tryObtain pings Redis, so that a Redis that cannot be reached fails at
// once instead of making Obtain wait for it, then obtains the lock: on the
// one key (Obtain, which takes permits), or on the set of keys as one
// lock (ObtainMulti).
func (r *runner) tryObtain(ctx context.Context) (*redislock.Lock, error) {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	err := r.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", redisurl.Redact(r.cfg.redisURL), err)
	}
	var opts []redislock.Option
	switch {
	case r.cfg.shared:
		opts = append(opts, redislock.WithShared())
	case r.cfg.permits > 0:
		opts = append(opts, redislock.WithPermits(r.cfg.permits))
	}
	if r.cfg.wait > 0 {
		opts = append(opts, redislock.WithWait(r.cfg.wait))
	}
	switch keys := r.cfg.keys; {
	case len(keys) > 1 && r.cfg.wait == 0:
		return r.locker.TryObtainMulti(ctx, keys, r.cfg.ttl, opts...)
	case len(keys) > 1:
		return r.locker.ObtainMulti(ctx, keys, r.cfg.ttl, opts...)
	case r.cfg.wait == 0:
		return r.locker.TryObtain(ctx, keys[0], r.cfg.ttl, opts...)
	}
	return r.locker.Obtain(ctx, r.cfg.keys[0], r.cfg.ttl, opts...)
}

// isConflict reports whether err, of the acquisition, says that the lock
// was not obtained because the key is held: by other holders
// (ErrNotObtained), in another mode than c asks for or by data of another
// kind (ErrWrongKind: a semaphore's permits for a lock, a lock's holders
// for permits, a Redis hash), or as a semaphore of another number of
// permits (ErrInvalidOption: parseRun checked the options themselves).
// The library fails at once on the last two: run does not wait for them.
func isConflict(err error, c runConfig) bool {
	return errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, redislock.ErrWrongKind) ||
		(c.permits > 0 && errors.Is(err, redislock.ErrInvalidOption))
}

// notObtained reports on stderr that the lock was not obtained (err, see
// isConflict), saying what holds the key (for a set: the key that explains
// it, see culprit) as far as a quick look tells, and returns the conflict
// status (-E). With -q it says nothing, unless the key holds data of
// another kind than a lock: no wait ends that, and run would be skipped
// silently for ever.
func (r *runner) notObtained(err error) int {
	c := r.cfg
	// The wait's clean-up first (see shutdown): a key handed to this run's
	// waiting set, given back in the background, is no holder to name.
	_ = r.locker.Shutdown(r.ending())
	infos, ierr := r.inspect()
	var info redislock.Info
	key := c.keys[0]
	if ierr == nil {
		i := culprit(infos)
		info, key = infos[i], c.keys[i]
	}
	if !c.quiet || (ierr == nil && info.Mode == redislock.ModeOther) {
		why := heldBy(c, err, info, ierr)
		if len(c.keys) > 1 && ierr == nil {
			why = strconv.Quote(key) + ": " + why
		}
		fmt.Fprintf(r.stderr, "redislock: lock on %s not obtained: %s\n", lockName(c.keys), why)
	}
	return c.conflict
}

// culprit returns the index in infos, a look at each key of a run, of the
// key that best tells why the lock was not obtained: one that holds data
// of another kind, else a value redislock did not write, else a
// semaphore's permits (a set or a lock cannot take them), else the first
// with holders, else the first with others waiting in its line, else the
// first key.
func culprit(infos []redislock.Info) int {
	for _, found := range []func(redislock.Info) bool{
		func(i redislock.Info) bool { return i.Mode == redislock.ModeOther },
		func(i redislock.Info) bool { return i.Mode == redislock.ModeForeign },
		func(i redislock.Info) bool { return i.Mode == redislock.ModeSemaphore },
		func(i redislock.Info) bool { return len(i.Holders) > 0 },
		func(i redislock.Info) bool { return i.Waiting > 0 },
	} {
		if i := slices.IndexFunc(infos, found); i >= 0 {
			return i
		}
	}
	return 0
}

// lockName names the lock on keys in messages: "\"k\"" for one key, the
// set "a", "b" for several.
func lockName(keys []string) string {
	if len(keys) == 1 {
		return strconv.Quote(keys[0])
	}
	quoted := make([]string, len(keys))
	for i, key := range keys {
		quoted[i] = strconv.Quote(key)
	}
	return "the set " + strings.Join(quoted, ", ")
}

// heldBy says what holds the key, as info (or ierr, the error of Inspect)
// tells, when c's acquisition failed with err (see isConflict).
func heldBy(c runConfig, err error, info redislock.Info, ierr error) string {
	switch {
	case ierr == nil && info.Mode == redislock.ModeOther:
		return "the key holds data of another kind than a lock"
	case ierr == nil && info.Mode == redislock.ModeForeign && len(info.Holders) > 0 && info.Holders[0].TTL < 0:
		return "the key holds a value redislock did not write, without an expiry: it will not be released by itself"
	case ierr == nil && info.Mode == redislock.ModeForeign && errors.Is(err, redislock.ErrWrongKind):
		return "the key holds a value redislock did not write (another owner's lock), not a semaphore; run does not wait for it"
	case ierr == nil && info.Mode == redislock.ModeForeign:
		return "the key holds a value redislock did not write (another owner's lock)"
	}
	if errors.Is(err, redislock.ErrNotObtained) { // a wait that ran out, or -n
		switch {
		case ierr != nil:
			return "it is held"
		case len(info.Holders) == 0:
			return fmt.Sprintf("others wait for it (%d in line)", info.Waiting)
		}
		return holders(info)
	}
	semaphore := "a semaphore"
	if info.Permits > 0 {
		semaphore = fmt.Sprintf("a semaphore of %d permits", info.Permits)
	}
	var s string
	switch {
	case ierr != nil || info.Mode == "":
		s = "the key is held in another mode (" + strings.TrimPrefix(err.Error(), "redislock: ") + ")"
	case info.Mode == redislock.ModeSemaphore && c.permits == 0:
		s = "the key holds " + semaphore + ", not a lock"
	case info.Mode == redislock.ModeSemaphore:
		s = fmt.Sprintf("the key holds %s, not %d", semaphore, c.permits)
	default:
		s = "the key holds a lock, not a semaphore"
	}
	if len(info.Holders) > 0 {
		s += ", " + holders(info)
	}
	return s + "; run does not wait for it"
}

// inspect is a quick look at the keys, one after another, all within
// inspectTimeout, once the wait for the lock ended (within ending's
// bound). It stops at the first error.
func (r *runner) inspect() ([]redislock.Info, error) {
	ctx, cancel := context.WithTimeout(r.ending(), inspectTimeout)
	defer cancel()
	infos := make([]redislock.Info, len(r.cfg.keys))
	for i, key := range r.cfg.keys {
		var err error
		if infos[i], err = r.locker.Inspect(ctx, key); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

// holders describes info's holders: "held by D (lease L left)", the first
// of them, and how many more.
func holders(info redislock.Info) string {
	h := info.Holders[0]
	d := "a holder without a description"
	if h.Description != "" {
		d = plain(h.Description)
	}
	s := fmt.Sprintf("held by %s (lease %v left)", d, h.TTL.Round(time.Millisecond))
	if n := len(info.Holders) - 1; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	if info.Mode == redislock.ModeShared {
		s += ", readers of a read-write lock"
	}
	return s
}

// commandEnv is COMMAND's environment: redislock's (environ), with the
// first key and every key, the first key's fence and every key's fences
// (fences, in the order of c.keys), and the token, under their names. The
// lists hold one key or fence a line. A variable of a default name that a
// name "" turns off is removed (an outer redislock's), so that COMMAND
// never takes another lock's fence or token for this one's.
func commandEnv(environ []string, c runConfig, fences []int64, token string) []string {
	env := slices.DeleteFunc(environ, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return (c.fenceEnv == "" && (name == defaultFenceEnv || name == fencesEnv(defaultFenceEnv))) ||
			(c.tokenEnv == "" && name == defaultTokenEnv)
	})
	env = append(env, keyEnv+"="+c.keys[0], keysEnv+"="+strings.Join(c.keys, "\n"))
	if c.fenceEnv != "" {
		each := make([]string, len(fences))
		for i, f := range fences {
			each[i] = strconv.FormatInt(f, 10)
		}
		env = append(env, c.fenceEnv+"="+each[0], fencesEnv(c.fenceEnv)+"="+strings.Join(each, "\n"))
	}
	if c.tokenEnv != "" {
		env = append(env, c.tokenEnv+"="+token)
	}
	return env
}

// supervise keeps the lock while COMMAND (found at path) runs, and returns
// the exit status. It releases the lock.
func (r *runner) supervise(lk *redislock.Lock, path string) int {
	c := r.cfg
	kept := lk.KeepAlive(context.Background())
	env := commandEnv(os.Environ(), c, lk.Fences(), lk.Token())
	ownGroup := r.term == nil
	cmd := &exec.Cmd{
		Path: path, Args: c.argv, Env: env,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: procAttr(ownGroup),
	}
	// The death signal (procAttr) is sent when the thread that started
	// COMMAND ends: keep this goroutine on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if sig, ok := r.pending(); ok {
		r.release(lk)
		fmt.Fprintf(r.stderr, "redislock: %v (signal %d) before the command started\n", sig, signalNumber(sig))
		return exitSignalBase + signalNumber(sig)
	}
	if err := cmd.Start(); err != nil {
		r.release(lk)
		fmt.Fprint(r.stderr, errorLine(err))
		return startFailed(err)
	}
	j := job{p: cmd.Process, group: ownGroup, stderr: r.stderr}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its error is in ProcessState
		close(exited)
	}()

	lost := false
	var killAt time.Time
	var kill <-chan time.Time
	keptDone := kept.Done()
	for waiting := true; waiting; {
		select {
		case s := <-r.sigs:
			if r.term != nil && r.term.sentByTerminal(s) {
				continue // the terminal sent it to COMMAND too
			}
			j.signal(s)
		case <-keptDone:
			keptDone, lost = nil, true
			j.signal(syscall.SIGTERM)
			killAt = time.Now().Add(c.grace)
			kill = time.After(c.grace)
			fmt.Fprintf(r.stderr, "redislock: lock on %s lost%s; sent SIGTERM to the command, SIGKILL in %v\n", lockName(c.keys), r.whyLost(), c.grace)
		case <-kill:
			kill = nil
			j.signal(syscall.SIGKILL)
		case <-exited:
			waiting = false
		}
	}
	code := exitStatus(cmd.ProcessState)
	termSent := lost
	if !lost && kept.Err() != nil { // Err reads the lease clock
		lost = true
		fmt.Fprintf(r.stderr, "redislock: lock on %s lost as the command exited (status %d)\n", lockName(c.keys), code)
	}
	err := r.release(lk)
	if errors.Is(err, redislock.ErrNotHeld) && !lost {
		lost = true
		fmt.Fprintf(r.stderr, "redislock: lock on %s was lost before the command exited (status %d): %s\n", lockName(c.keys), code, noLongerOurs(c.keys, err))
	}
	if !lost {
		return code
	}
	j.stopGroup(termSent, killAt, c.grace)
	return exitLost
}

// noLongerOurs says that the release of the lock on keys found it lost
// (err, ErrNotHeld): for a set, which of its keys, as err says.
func noLongerOurs(keys []string, err error) string {
	if len(keys) == 1 {
		return "the key was no longer ours at the release"
	}
	return "at the release, " + strings.TrimPrefix(err.Error(), "redislock: ")
}

// whyLost says when and why the lock was lost, if the Lost hook says so
// soon, else "".
func (r *runner) whyLost() string {
	select {
	case why := <-r.lostBy:
		return why
	case <-time.After(lostHookWait):
		return ""
	}
}

// pending returns a forwarded signal received and not yet handled.
func (r *runner) pending() (os.Signal, bool) {
	select {
	case s := <-r.sigs:
		return s, true
	default:
		return nil, false
	}
}

// release releases lk within ending's bound, reporting a failure other
// than ErrNotHeld, and returns its error.
func (r *runner) release(lk *redislock.Lock) error {
	ctx := r.ending()
	err := lk.Release(ctx)
	switch {
	case err == nil || errors.Is(err, redislock.ErrNotHeld):
	case ctx.Err() != nil:
		// The library goes on in the background; redislock does not.
		fmt.Fprintf(r.stderr, "redislock: the release of the lock on %s did not complete within %v: Redis did not answer (the lease ends by itself within %v)\n",
			lockName(r.cfg.keys), endTimeout, r.cfg.ttl)
	default:
		fmt.Fprintf(r.stderr, "redislock: the release of the lock on %s did not complete: %s (the lease ends by itself within %v)\n",
			lockName(r.cfg.keys), strings.TrimPrefix(err.Error(), "redislock: "), r.cfg.ttl)
	}
	return err
}

// A job is COMMAND's process, and its process group when it leads one.
type job struct {
	p      *os.Process
	group  bool
	stderr io.Writer
}

// signal sends s to COMMAND: to its process group when it leads one.
func (j job) signal(s os.Signal) {
	if err := signalJob(j.p, j.group, s); err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(j.stderr, "redislock: send %v to the command: %v\n", s, err)
	}
}

// stopGroup ends, after a lost lock and once COMMAND has exited, what is
// left of its process group: processes it started and left running. Those
// that got SIGTERM already (termSent) have until killAt to exit; otherwise
// they get SIGTERM now and -grace. Then they get SIGKILL.
func (j job) stopGroup(termSent bool, killAt time.Time, grace time.Duration) {
	if !j.group || !groupAlive(j.p.Pid) {
		return
	}
	if !termSent {
		_ = signalJob(j.p, true, syscall.SIGTERM)
		killAt = time.Now().Add(grace)
	}
	for groupAlive(j.p.Pid) && time.Now().Before(killAt) {
		time.Sleep(leftoverPoll)
	}
	if groupAlive(j.p.Pid) {
		_ = signalJob(j.p, true, syscall.SIGKILL)
	}
}

// startFailed returns the exit status for a COMMAND that could not be
// started: 127 when it was not found, 126 otherwise, as shells do.
func startFailed(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// maxHolder is the longest holder description the library takes, in bytes.
const maxHolder = 200

// description is the holder description run stores with its lock, for
// Locker.Inspect (status): -holder's text as it is; else "redislock run
// PROGRAM on HOST pid PID", where PROGRAM is the file name of COMMAND,
// without its arguments (they may hold secrets, and whatever is stored
// every client of the Redis can read), or with -holder-command COMMAND and
// its arguments, cut to fit maxHolder bytes.
func description(c runConfig, host string, pid int) string {
	switch {
	case c.holder.set:
		return c.holder.text
	case c.holder.command:
		return holderDescription(strings.Join(c.argv, " "), host, pid)
	}
	return holderDescription(filepath.Base(c.argv[0]), host, pid)
}

// holderDescription is "redislock run COMMAND on HOST pid PID", its text
// made printable (see printable) and the command cut to fit maxHolder
// bytes.
func holderDescription(command, host string, pid int) string {
	tail := fmt.Sprintf(" on %s pid %d", printable(host), pid)
	const head = "redislock run "
	command = printable(command)
	if room := maxHolder - len(head) - len(tail); len(command) > room {
		command = truncate(command, max(room-3, 0)) + "..."
	}
	return truncate(head+command+tail, maxHolder)
}

// printableText reports whether s is a holder description that the
// library takes (WithHolder): valid UTF-8 of printable runes, at most
// maxHolder bytes.
func printableText(s string) bool {
	return len(s) <= maxHolder && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

// printable replaces what is not printable text in s (invalid UTF-8,
// control and format characters, spaces but ' ') with '?', as
// redislock.WithHolder requires.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// truncate cuts s, valid UTF-8, to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown host"
	}
	return strings.ToValidUTF8(h, "?")
}
