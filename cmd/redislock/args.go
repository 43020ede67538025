package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/redisurl"
)

// Defaults of the flags.
const (
	defaultRedisURL = "redis://127.0.0.1:6379"
	defaultTTL      = 30 * time.Second
	defaultGrace    = 10 * time.Second
	defaultFenceEnv = "REDISLOCK_FENCE"
	defaultTokenEnv = "REDISLOCK_TOKEN"
	keyEnv          = "REDISLOCK_KEY"
)

// errHelp is returned by the parsers for -h: print the usage, exit 0.
var errHelp = flag.ErrHelp

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// runConfig is a valid command line of run.
type runConfig struct {
	key      string
	argv     []string      // COMMAND and its arguments
	ttl      time.Duration // the lease
	wait     time.Duration // how long to wait for the lock; < 0: until interrupted; 0: -n
	conflict int           // exit status when the lock is not obtained (-E)
	grace    time.Duration // from SIGTERM to SIGKILL after a lost lock
	fenceEnv string        // "" for none
	tokenEnv string        // "" for none
	redisURL string
}

// parseRun parses the arguments of run (after "run"). Flags may come before
// and after KEY; "--" ends them and starts COMMAND. It checks everything
// that can be checked without Redis, the URL included.
func parseRun(args []string, getenv func(string) string) (runConfig, error) {
	c := runConfig{wait: -1}
	fs := newFlagSet("run")
	fs.DurationVar(&c.ttl, "ttl", defaultTTL, "")
	fs.DurationVar(&c.wait, "wait", -1, "")
	noWait := fs.Bool("n", false, "")
	fs.IntVar(&c.conflict, "E", exitConflict, "")
	fs.DurationVar(&c.grace, "grace", defaultGrace, "")
	fs.StringVar(&c.fenceEnv, "fence-env", defaultFenceEnv, "")
	fs.StringVar(&c.tokenEnv, "token-env", defaultTokenEnv, "")
	url := fs.String("redis", "", "")

	flags, argv, dashes := cut(args, "--")
	pos, err := parseInterspersed(fs, flags)
	if err != nil {
		return c, err
	}
	waitSet := false
	fs.Visit(func(f *flag.Flag) { waitSet = waitSet || f.Name == "wait" })
	switch {
	case len(pos) == 0:
		return c, errorf("run: no KEY")
	case len(pos) > 1:
		return c, errorf("run: one KEY expected, got %q (the command goes after --)", pos)
	case pos[0] == "":
		return c, errorf("run: empty KEY")
	case !dashes:
		return c, errorf("run: no -- between KEY and the command")
	case len(argv) == 0:
		return c, errorf("run: no command after --")
	case c.ttl < time.Millisecond:
		return c, errorf("run: -ttl %v: must be at least 1ms", c.ttl)
	case waitSet && c.wait < 0:
		return c, errorf("run: -wait %v: must not be negative", c.wait)
	case waitSet && *noWait:
		return c, errorf("run: -n and -wait: give one of them")
	case c.conflict < 0 || c.conflict > 255:
		return c, errorf("run: -E %d: must be in 0..255", c.conflict)
	case c.grace < 0:
		return c, errorf("run: -grace %v: must not be negative", c.grace)
	}
	if *noWait {
		c.wait = 0
	}
	for _, e := range []struct{ flag, name string }{{"fence-env", c.fenceEnv}, {"token-env", c.tokenEnv}} {
		if strings.ContainsAny(e.name, "=\x00") {
			return c, errorf("run: -%s %q: not an environment variable name", e.flag, e.name)
		}
		if e.name == keyEnv {
			return c, errorf("run: -%s %s: %s is the key's", e.flag, e.name, keyEnv)
		}
	}
	if c.fenceEnv != "" && c.fenceEnv == c.tokenEnv {
		return c, errorf("run: -fence-env and -token-env are both %s", c.fenceEnv)
	}
	c.key, c.argv = pos[0], argv
	if c.redisURL, err = redisURL(fs, *url, getenv); err != nil {
		return c, err
	}
	return c, nil
}

// statusConfig is a valid command line of status.
type statusConfig struct {
	key      string
	json     bool
	redisURL string
}

// parseStatus parses the arguments of status (after "status").
func parseStatus(args []string, getenv func(string) string) (statusConfig, error) {
	var c statusConfig
	fs := newFlagSet("status")
	fs.BoolVar(&c.json, "json", false, "")
	url := fs.String("redis", "", "")
	pos, err := parseInterspersed(fs, args)
	switch {
	case err != nil:
		return c, err
	case len(pos) != 1:
		return c, errorf("status: one KEY expected, got %d arguments", len(pos))
	case pos[0] == "":
		return c, errorf("status: empty KEY")
	}
	c.key = pos[0]
	if c.redisURL, err = redisURL(fs, *url, getenv); err != nil {
		return c, err
	}
	return c, nil
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
// nothing yet).
func redisURL(fs *flag.FlagSet, value string, getenv func(string) string) (string, error) {
	url, from := value, "-redis"
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "redis" })
	switch {
	case given && url == "":
		return "", errorf("-redis: empty URL")
	case !given:
		url, from = getenv("REDIS_URL"), "REDIS_URL"
	}
	if url == "" {
		url = defaultRedisURL
	}
	rdb, err := redisurl.NewClient(url)
	if err != nil {
		return "", errorf("%s: %v", from, err)
	}
	_ = rdb.Close()
	return url, nil
}
