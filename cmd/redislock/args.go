package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/cmd/redislock/internal/redisurl"
)

// Defaults of the flags.
const (
	defaultRedisURL = "redis://127.0.0.1:6379"
	defaultTTL      = 30 * time.Second
	defaultGrace    = 10 * time.Second
	defaultFenceEnv = "REDISLOCK_FENCE"
	defaultTokenEnv = "REDISLOCK_TOKEN"
	keyEnv          = "REDISLOCK_KEY"
	keysEnv         = "REDISLOCK_KEYS"
)

// fencesEnv is the name of the variable of the fences of every key, beside
// the fence's variable name: REDISLOCK_FENCES beside REDISLOCK_FENCE ("" for
// none).
func fencesEnv(fenceEnv string) string {
	if fenceEnv == "" {
		return ""
	}
	return fenceEnv + "S"
}

// errHelp is returned by the parsers for -h: print the usage, exit 0.
var errHelp = flag.ErrHelp

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// shellPath runs -c's command line, as flock(1) does without $SHELL.
const shellPath = "/bin/sh"

// runConfig is a valid command line of run.
type runConfig struct {
	keys      []string      // KEY...: one key, or a set (ObtainMulti), in the order given
	argv      []string      // COMMAND and its arguments (-c: sh -c and the command line)
	ttl       time.Duration // the lease
	wait      time.Duration // how long to wait for the lock; < 0: until interrupted; 0: -n
	conflict  int           // exit status when the lock is not obtained (-E)
	quiet     bool          // -q: nothing said when the lock is not obtained
	shared    bool          // -s: a reader of a read-write lock
	permits   int           // -permits: one of this many permits of a semaphore; 0 for none
	holder    holder        // what is stored as the holder's description
	grace     time.Duration // from SIGTERM to SIGKILL after a lost lock
	fenceEnv  string        // "" for none
	tokenEnv  string        // "" for none
	redisURL  string
	namespace string // -namespace: the prefix of every key and channel in Redis
}

// A holder says what run stores as the holder's description (see
// description).
type holder struct {
	text    string // -holder's text
	set     bool   // -holder was given: store text as it is
	command bool   // -holder-command: COMMAND with its arguments
}

// parseRun parses the arguments of run (after "run"). Flags may come before,
// between and after the KEYs; "--" ends them and starts COMMAND. It checks
// everything that can be checked without Redis, the URL included.
func parseRun(args []string, getenv func(string) string) (runConfig, error) {
	c := runConfig{wait: -1}
	fs := newFlagSet("run")
	fs.DurationVar(&c.ttl, "ttl", defaultTTL, "")
	fs.Var(waitValue{&c.wait}, "w", "")
	fs.Var(waitValue{&c.wait}, "wait", "")
	noWait := fs.Bool("n", false, "")
	fs.IntVar(&c.conflict, "E", exitConflict, "")
	fs.BoolVar(&c.quiet, "q", false, "")
	fs.BoolVar(&c.shared, "s", false, "")
	fs.Bool("x", false, "")
	fs.IntVar(&c.permits, "permits", 0, "")
	fs.Func("holder", "", func(s string) error { c.holder.text, c.holder.set = s, true; return nil })
	fs.BoolVar(&c.holder.command, "holder-command", false, "")
	command := fs.String("c", "", "")
	fs.DurationVar(&c.grace, "grace", defaultGrace, "")
	fs.StringVar(&c.fenceEnv, "fence-env", defaultFenceEnv, "")
	fs.StringVar(&c.tokenEnv, "token-env", defaultTokenEnv, "")
	url := fs.String("redis", "", "")
	fs.StringVar(&c.namespace, "namespace", "", "")

	flags, argv, dashes := cut(args, "--")
	pos, err := parseInterspersed(fs, flags)
	if err != nil {
		return c, err
	}
	for _, group := range [][]string{{"n", "w", "wait"}, {"s", "x", "permits"}, {"holder", "holder-command"}} {
		if g := given(fs, group...); len(g) > 1 {
			return c, errorf("run: -%s and -%s: give one of them", g[0], g[1])
		}
	}
	byShell := len(given(fs, "c")) > 0
	if err := checkKeys("run", pos); err != nil {
		return c, err
	}
	for _, key := range pos {
		if strings.Contains(key, "\n") {
			return c, errorf("run: KEY %q: a KEY must not hold a newline (%s lists them one a line)", key, keysEnv)
		}
	}
	switch {
	case byShell && dashes:
		return c, errorf("run: -c and -- COMMAND: give one of them")
	case byShell && *command == "":
		return c, errorf("run: -c: empty command line")
	case !byShell && !dashes:
		return c, errorf("run: no -- between KEY and the command (or -c 'command line')")
	case !byShell && len(argv) == 0:
		return c, errorf("run: no command after --")
	case c.ttl < time.Millisecond:
		return c, errorf("run: -ttl %v: must be at least 1ms", c.ttl)
	case c.wait < 0 && len(given(fs, "w", "wait")) > 0:
		return c, errorf("run: -%s %v: must not be negative", given(fs, "w", "wait")[0], c.wait)
	case c.conflict < 0 || c.conflict > 255:
		return c, errorf("run: -E %d: must be in 0..255", c.conflict)
	case c.permits < 0 || (c.permits == 0 && len(given(fs, "permits")) > 0):
		return c, errorf("run: -permits %d: must be at least 1", c.permits)
	case c.permits > 0 && len(pos) > 1:
		return c, errorf("run: -permits: a semaphore is one KEY, got %d", len(pos))
	case c.grace < 0:
		return c, errorf("run: -grace %v: must not be negative", c.grace)
	case !printableText(c.holder.text):
		return c, errorf("run: -holder %q: must be printable UTF-8 (no control or format characters) of at most %d bytes", c.holder.text, maxHolder)
	}
	if *noWait {
		c.wait = 0
	}
	if byShell {
		argv = []string{shellPath, "-c", *command}
	}
	for _, e := range []struct{ flag, name string }{{"fence-env", c.fenceEnv}, {"token-env", c.tokenEnv}} {
		if strings.ContainsAny(e.name, "=\x00") {
			return c, errorf("run: -%s %q: not an environment variable name", e.flag, e.name)
		}
		switch e.name {
		case keyEnv:
			return c, errorf("run: -%s %s: %s is the key's", e.flag, e.name, keyEnv)
		case keysEnv:
			return c, errorf("run: -%s %s: %s is the keys'", e.flag, e.name, keysEnv)
		}
	}
	switch {
	case c.fenceEnv != "" && c.fenceEnv == c.tokenEnv:
		return c, errorf("run: -fence-env and -token-env are both %s", c.fenceEnv)
	case c.tokenEnv != "" && c.tokenEnv == fencesEnv(c.fenceEnv):
		return c, errorf("run: -token-env %s: the variable of the fences (-fence-env %s)", c.tokenEnv, c.fenceEnv)
	}
	c.keys, c.argv = pos, argv
	c.redisURL, err = where("run", c.namespace, fs, *url, getenv)
	return c, err
}

// libraryKeys is in the name of every key the library keeps beside a lock
// (its data layout, rl1), and in no lock's key: the library refuses such a
// KEY with ErrInvalidKey.
const libraryKeys = "}:rl1:"

// checkKeys returns a usage error of cmd (run, release) when keys are not
// 1 to redislock.MaxKeys distinct, non-empty keys that the library takes
// (none with "}:rl1:" in it: those name the library's own keys beside a
// lock). run also refuses a newline in a KEY, one KEY included:
// REDISLOCK_KEYS lists them one a line.
func checkKeys(cmd string, keys []string) error {
	switch {
	case len(keys) == 0:
		return errorf("%s: no KEY", cmd)
	case len(keys) > redislock.MaxKeys:
		return errorf("%s: %d KEYs: at most %d", cmd, len(keys), redislock.MaxKeys)
	}
	for i, key := range keys {
		switch {
		case key == "":
			return errorf("%s: empty KEY", cmd)
		case slices.Contains(keys[:i], key):
			return errorf("%s: KEY %q given twice", cmd, key)
		case strings.Contains(key, libraryKeys):
			return errorf("%s: KEY %q: keys with %q in them are the library's own", cmd, key, libraryKeys)
		}
	}
	return nil
}

// A waitValue is the value of -w and -wait: a number of seconds, fractions
// allowed (flock's -w), or a duration with its unit (1m30s).
type waitValue struct{ d *time.Duration }

func (v waitValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v waitValue) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		*v.d = d
		return nil
	}
	seconds, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return errors.New("want seconds (2.5) or a duration (1m30s)")
	case math.IsNaN(seconds) || math.Abs(seconds) > math.MaxInt64/float64(time.Second):
		return errors.New("not a number of seconds that a duration holds")
	}
	*v.d = time.Duration(seconds * float64(time.Second))
	return nil
}

// given returns those of fs's flags named names that the command line
// set, in the order of names.
func given(fs *flag.FlagSet, names ...string) []string {
	var set []string
	for _, name := range names {
		fs.Visit(func(f *flag.Flag) {
			if f.Name == name {
				set = append(set, name)
			}
		})
	}
	return set
}

// statusConfig is a valid command line of status.
type statusConfig struct {
	keys      []string
	json      bool
	redisURL  string
	namespace string // as run's
}

// parseStatus parses the arguments of status (after "status").
func parseStatus(args []string, getenv func(string) string) (statusConfig, error) {
	var c statusConfig
	fs := newFlagSet("status")
	fs.BoolVar(&c.json, "json", false, "")
	url := fs.String("redis", "", "")
	fs.StringVar(&c.namespace, "namespace", "", "")
	pos, err := parseInterspersed(fs, args)
	switch {
	case err != nil:
		return c, err
	case len(pos) == 0:
		return c, errorf("status: no KEY")
	case slices.Contains(pos, ""):
		return c, errorf("status: empty KEY")
	}
	for _, key := range pos {
		if strings.Contains(key, libraryKeys) {
			return c, errorf("status: KEY %q: keys with %q in them are the library's own", key, libraryKeys)
		}
	}
	c.keys = pos
	c.redisURL, err = where("status", c.namespace, fs, *url, getenv)
	return c, err
}

// releaseConfig is a valid command line of release.
type releaseConfig struct {
	keys      []string // KEY...: one key, or a set's keys
	token     string   // -token: the token that holds them
	redisURL  string
	namespace string // as run's
}

// parseRelease parses the arguments of release (after "release"). It
// checks everything that can be checked without Redis: the KEYs as run's
// (a newline aside: release sets no variable of them), the token as the
// library does (see checkResume), the URL.
func parseRelease(args []string, getenv func(string) string) (releaseConfig, error) {
	var c releaseConfig
	fs := newFlagSet("release")
	fs.StringVar(&c.token, "token", "", "")
	url := fs.String("redis", "", "")
	fs.StringVar(&c.namespace, "namespace", "", "")
	pos, err := parseInterspersed(fs, args)
	switch {
	case err != nil:
		return c, err
	case len(given(fs, "token")) == 0:
		return c, errorf("release: no -token TOKEN (the token of the lock, as status shows it)")
	case c.token == "":
		return c, errorf("release: -token: empty TOKEN")
	}
	if err = checkKeys("release", pos); err != nil {
		return c, err
	}
	if err = checkResume(pos, c.token); err != nil {
		return c, err
	}
	c.keys = pos
	c.redisURL, err = where("release", c.namespace, fs, *url, getenv)
	return c, err
}

// checkResume returns a usage error when Locker.Resume would refuse keys
// and token as input: a token the library does not issue (Lock.Token: what
// status shows, and run puts in REDISLOCK_TOKEN), such as the string of
// another owner's lock (mode foreign), or a key it does not take (checkKeys
// applies its rules already). The library checks them: Resume checks its
// input before anything else, and with a context already ended sends
// nothing; its client here is one that goes nowhere.
func checkResume(keys []string, token string) error {
	rdb := redis.NewClient(&redis.Options{})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := redislock.New(rdb).Resume(ctx, keys, token, resumeTTL)
	return resumeUsage(err, token)
}

// resumeUsage returns the usage error of release for err, an error of
// Resume, when the input was bad (the token, a key), else nil.
func resumeUsage(err error, token string) error {
	switch {
	case errors.Is(err, redislock.ErrInvalidOption):
		return errorf("release: -token %q: not a token of redislock (a lock's token, as status shows it)", token)
	case errors.Is(err, redislock.ErrInvalidKey):
		return errorf("release: %s", strings.TrimPrefix(err.Error(), "redislock: "))
	}
	return nil
}

// newFlagSet returns a flag set that reports errors to its caller only
// (cli prints them with the usage).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseInterspersed parses args with fs, letting flags and positional
// arguments come in any order, and returns the positional ones. Each flag
// may be given once: a second one is an error, not the one that wins (a
// command line put together from pieces, "-wait 1m" in one and "-wait 10m"
// in another, would otherwise do what one piece says, silently).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var twice string // the first flag given twice
	fs.VisitAll(func(f *flag.Flag) { f.Value = &onceValue{Value: f.Value, name: f.Name, twice: &twice} })
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			switch {
			case errors.Is(err, flag.ErrHelp):
				return nil, errHelp
			case twice != "":
				return nil, errorf("%s: -%s given twice", fs.Name(), twice)
			}
			return nil, errorf("%s: %v", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// A onceValue is a flag's value that may be set once: a second Set fails,
// and names the flag in *twice.
type onceValue struct {
	flag.Value
	name  string
	set   bool
	twice *string
}

var errTwice = errors.New("given twice")

func (v *onceValue) Set(s string) error {
	if v.set {
		if *v.twice == "" {
			*v.twice = v.name
		}
		return errTwice
	}
	v.set = true
	return v.Value.Set(s)
}

// IsBoolFlag tells the flag package that a bool flag (-n, -json) takes no
// value.
func (v *onceValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// cut splits args around the first sep; found reports whether there was one.
func cut(args []string, sep string) (before, after []string, found bool) {
	i := slices.Index(args, sep)
	if i < 0 {
		return args, nil, false
	}
	return args[:i], args[i+1:], true
}

// redisURL returns the Redis URL to use: the -redis flag of fs (whose
// value is value), else $REDIS_URL, else the default. A -redis that is given
// must not be empty. It checks that the URL makes a client (which contacts
// nothing yet); its errors show the URL with the password redacted.
func redisURL(fs *flag.FlagSet, value string, getenv func(string) string) (string, error) {
	url, from := value, "-redis"
	set := len(given(fs, "redis")) > 0
	switch {
	case set && url == "":
		return "", errorf("%s: -redis: empty URL", fs.Name())
	case !set:
		url, from = getenv("REDIS_URL"), "REDIS_URL"
	}
	if url == "" {
		url = defaultRedisURL
	}
	rdb, err := redisurl.NewClient(url)
	if err != nil {
		var bad *redisurl.Error
		if errors.As(err, &bad) { // the URL redacted, said once
			err = fmt.Errorf("%q: %w", bad.URL, bad.Err)
		}
		return "", errorf("%s: %s %v", fs.Name(), from, err)
	}
	_ = rdb.Close()
	return url, nil
}

// where checks the namespace and finds the Redis URL of cmd's command line
// (see checkNamespace and redisURL).
func where(cmd, namespace string, fs *flag.FlagSet, url string, getenv func(string) string) (string, error) {
	if err := checkNamespace(cmd, namespace); err != nil {
		return "", err
	}
	return redisURL(fs, url, getenv)
}

// checkNamespace returns a usage error when -namespace's prefix is not one
// that redislock.WithNamespace takes. The library checks it: a Locker
// without a client reports an invalid option before its missing client,
// and sends nothing.
func checkNamespace(cmd, prefix string) error {
	_, err := redislock.New(nil, redislock.WithNamespace(prefix)).Inspect(context.Background(), "k")
	if errors.Is(err, redislock.ErrInvalidOption) {
		return errorf("%s: -namespace %q: must be printable UTF-8 without spaces, of at most 200 bytes", cmd, prefix)
	}
	return nil
}
