// Package redisurl makes a go-redis client of any kind from one URL: a
// single node, a Sentinel-managed primary, or a Cluster. The demo and the
// command line take their Redis this way.
//
//	redis://[user:password@]host:port[/db]          one node (rediss:// for TLS)
//	redis+sentinel://host:port[?addr=host:port...]&master_name=NAME[&db=N]
//	                                                 Sentinels; the primary they name
//	redis+cluster://host:port[?addr=host:port...]   a Cluster, from any of its nodes
//
// A redis:// URL with a master_name parameter is read as a Sentinel URL,
// and one with addr parameters as a Cluster URL, as go-redis's
// ParseFailoverURL and ParseClusterURL read them. Query parameters are
// go-redis's (dial_timeout, read_timeout, pool_size, ...).
//
// NewClient rejects what go-redis takes as it comes, to fail on it only
// when dialing, or never: every port, of the host and of each addr
// parameter, must be a number in 1..65535 (the host's may be left out:
// 6379); the database, in the path or a db parameter, 0 or more; the
// numbers of the query parameters in their ranges (pool sizes in
// 0..10000, protocol 2 or 3, max_retries -1 or more, ...). A
// password's '/', '?', '#' and '%' must be escaped (%2F, %3F, %23, %25).
//
// Errors never show a password: they show the URL as [Redact] does.
package redisurl

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// An Error is a URL that NewClient does not take. It shows the URL with
// its password redacted (see Redact), and can be printed as it is.
type Error struct {
	URL string // the URL, redacted
	Err error  // what is wrong with it
}

func (e *Error) Error() string { return fmt.Sprintf("redisurl: %q: %v", e.URL, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// NewClient returns a client of the Redis that raw names (see the package
// doc). It does not contact Redis. Its errors are *Error.
func NewClient(raw string) (redis.UniversalClient, error) {
	kind, u, err := parse(raw)
	if err != nil {
		return nil, &Error{URL: Redact(raw), Err: err}
	}
	c, err := newClient(kind, u)
	if err != nil {
		return nil, &Error{URL: Redact(raw), Err: err}
	}
	return c, nil
}

// newClient makes the client of kind from u, a URL in go-redis's form. A
// panic of go-redis on options it does not check is returned as an error:
// it is the URL's fault, not a bug of the caller's.
func newClient(kind, u string) (c redis.UniversalClient, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("go-redis does not take these options: %v", p)
		}
	}()
	switch kind {
	case "sentinel":
		o, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, err
		}
		if o.MasterName == "" {
			return nil, errors.New("a Sentinel URL needs master_name=")
		}
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, err
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(o), nil
}

// parse returns what kind of deployment raw names ("node", "sentinel" or
// "cluster") and the URL in go-redis's own form. Its errors do not name
// the URL (NewClient does, redacted): a url.Parse error is made from the
// redacted URL.
func parse(raw string) (kind, goredis string, err error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		if _, rerr := url.Parse(Redact(raw)); rerr != nil {
			return "", "", errors.Unwrap(rerr) // url.Error's Err: without the URL
		}
		return "", "", errors.New("invalid password: escape its special characters ('/' as %2F, '?' as %3F, '#' as %23, '%' as %25)")
	case strayAt(u):
		return "", "", errors.New("an '@' after the host: escape '/', '?' and '#' in a user or password (%2F, %3F, %23)")
	case u.Host == "":
		return "", "", errors.New("no host (want e.g. redis://127.0.0.1:6379)")
	}
	if err := checkPort(u.Host, u.Port(), strings.HasSuffix(u.Host, ":")); err != nil {
		return "", "", err
	}
	q := u.Query()
	for _, addr := range q["addr"] {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return "", "", fmt.Errorf("addr=%s: want host:port", addr)
		}
		if err := checkPort(addr, port, true); err != nil {
			return "", "", fmt.Errorf("addr=%w", err)
		}
	}
	if err := checkNumbers(u.Path, q); err != nil {
		return "", "", err
	}
	scheme, tls := u.Scheme, false
	if strings.HasPrefix(scheme, "rediss") {
		scheme, tls = "redis"+strings.TrimPrefix(scheme, "rediss"), true
	}
	switch scheme {
	case "redis+sentinel":
		kind = "sentinel"
	case "redis+cluster":
		kind = "cluster"
	case "redis":
		switch {
		case q.Has("master_name"):
			kind = "sentinel"
		case q.Has("addr"):
			kind = "cluster"
		default:
			kind = "node"
		}
	default:
		return "", "", fmt.Errorf("unknown scheme %q (redis, rediss, redis+sentinel, redis+cluster)", u.Scheme)
	}
	u.Scheme = "redis"
	if tls {
		u.Scheme = "rediss"
	}
	return kind, u.String(), nil
}

// checkPort checks the port of the address hostport: a decimal number in
// 1..65535, or none at all when given is false (go-redis then takes 6379).
// go-redis takes any number, and 0 or 99999 would fail only when dialed.
func checkPort(hostport, port string, given bool) error {
	if port == "" && !given {
		return nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("%s: port %q: want a number in 1..65535", hostport, port)
	}
	return nil
}

// A limit is the range of numbers a query parameter takes.
type limit struct {
	name     string
	min, max int
}

// Bounds of the limits.
const (
	// maxConns bounds the sizes of connection pools: the clients a Redis
	// takes by default (maxclients).
	maxConns = 10000
	// maxBuffer bounds buffer sizes, in bytes: the largest string a Redis
	// takes by default (proto-max-bulk-len).
	maxBuffer = 512 << 20
)

// limits are the ranges of go-redis's integer query parameters. go-redis
// takes any integer: a negative pool size makes it panic, a huge one ends
// the process out of memory, and a negative database or protocol is
// silently taken as 0 or 3. -1 means none where go-redis says so
// (max_retries, max_redirects, pipeline_pool_size).
var limits = []limit{
	{"db", 0, math.MaxInt},
	{"protocol", 2, 3},
	{"max_retries", -1, math.MaxInt},
	{"max_redirects", -1, math.MaxInt},
	{"dialer_retries", 0, math.MaxInt},
	{"failing_timeout_seconds", 0, math.MaxInt},
	{"pool_size", 0, maxConns},
	{"min_idle_conns", 0, maxConns},
	{"max_idle_conns", 0, maxConns},
	{"max_active_conns", 0, maxConns},
	{"max_concurrent_dials", 0, maxConns},
	{"pipeline_pool_size", -1, maxConns},
	{"pipeline_read_buffer_size", 0, maxBuffer},
	{"pipeline_write_buffer_size", 0, maxBuffer},
}

// checkNumbers checks the database in path (its one segment) and the
// numbers of the query parameters q against limits. What is not a number
// is left to go-redis, which says so.
func checkNumbers(path string, q url.Values) error {
	if segments := strings.FieldsFunc(path, func(r rune) bool { return r == '/' }); len(segments) == 1 {
		if n, err := strconv.Atoi(segments[0]); err == nil && n < 0 {
			return fmt.Errorf("database %d: want 0 or more", n)
		}
	}
	for _, l := range limits {
		for _, v := range q[l.name] {
			if n, err := strconv.Atoi(v); err == nil && (n < l.min || n > l.max) {
				if l.max == math.MaxInt {
					return fmt.Errorf("%s=%s: want %d or more", l.name, v, l.min)
				}
				return fmt.Errorf("%s=%s: want a number in %d..%d", l.name, v, l.min, l.max)
			}
		}
	}
	return nil
}

// strayAt reports whether u has an '@' where no URL of a Redis has one:
// in the path, the fragment, or a query parameter's name. It comes from a
// password with an unescaped '/', '?' or '#': the password's end was taken
// for the path, query or fragment.
func strayAt(u *url.URL) bool {
	if strings.Contains(u.Path, "@") || strings.Contains(u.Fragment, "@") {
		return true
	}
	for _, p := range strings.Split(u.RawQuery, "&") {
		if name, _, _ := strings.Cut(p, "="); strings.Contains(name, "@") {
			return true
		}
	}
	return false
}

// redacted replaces a password in a message.
const redacted = "xxxxx"

// Redact returns raw with its password replaced by "xxxxx", as
// url.URL.Redacted does, and so are the values of query parameters whose
// name has "password" in it (a Sentinel URL's password=): a text to show
// in messages, which others read (cron mail, CI logs). raw need not be a
// URL that parses: the password is the text between the first ':' of the
// user information and its '@'. When raw does not parse, or has an '@'
// after the host (see strayAt), a password with an unescaped '/', '?' or
// '#' is assumed: the password then runs to the last '@'.
func Redact(raw string) string {
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	authority := rest // up to the last '@' when raw does not parse
	if u, err := url.Parse(raw); err == nil && !strayAt(u) {
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			authority = rest[:end]
		}
	}
	at := strings.LastIndex(authority, "@")
	if at >= 0 {
		if colon := strings.IndexByte(rest[:at], ':'); colon >= 0 {
			rest = rest[:colon+1] + redacted + rest[at:]
		}
	}
	return scheme + redactParams(rest)
}

// redactParams replaces the values of the query parameters of s whose
// name has "password" in it.
func redactParams(s string) string {
	head, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		name, _, hasValue := strings.Cut(p, "=")
		unescaped, err := url.QueryUnescape(name)
		if err != nil {
			unescaped = name
		}
		if hasValue && strings.Contains(strings.ToLower(unescaped), "password") {
			params[i] = name + "=" + redacted
		}
	}
	s = head + "?" + strings.Join(params, "&")
	if hasFragment {
		s += "#" + fragment
	}
	return s
}
