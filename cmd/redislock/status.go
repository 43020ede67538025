package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/cmd/redislock/internal/redisurl"
)

// statusTimeout bounds all that status does with Redis: a look at each key.
const statusTimeout = 10 * time.Second

// modeFree is the mode status reports for a key nobody holds.
const modeFree = "free"

// statusJSON is what status -json prints.
type statusJSON struct {
	Key     string       `json:"key"`
	Held    bool         `json:"held"`
	Mode    string       `json:"mode"` // exclusive, shared, semaphore, foreign (a string redislock did not write), other (data of another kind), or free
	Holders []holderJSON `json:"holders"`
	Permits int          `json:"permits,omitempty"` // a semaphore's number of permits
	Fence   int64        `json:"fence"`             // the latest fence issued, 0 if none
	Waiting int          `json:"waiting"`           // places in the key's line
}

type holderJSON struct {
	Description string `json:"description"`
	TTLMillis   int64  `json:"ttl_ms"` // the lease left, as Redis sees it
	Token       string `json:"token"`
}

// status runs the status subcommand and returns the exit status: 0 when
// nobody holds any of the keys, 1 when one is held or holds data of another
// kind. It looks at every key before it prints: a Redis that fails on one
// prints nothing on stdout.
func status(cfg statusConfig, stdout, stderr io.Writer) int {
	rdb, err := redisurl.NewClient(cfg.redisURL)
	if err != nil { // parseStatus made one from the same URL
		return usageError(stderr, err)
	}
	defer rdb.Close()
	// A reader that is gone (a broken pipe) is an output that could not be
	// written: exit 74, not a death by SIGPIPE. status starts no process
	// that would inherit the ignored signal.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	locker := redislock.New(rdb, redislock.WithNamespace(cfg.namespace))
	infos := make([]redislock.Info, len(cfg.keys))
	for i, key := range cfg.keys {
		if infos[i], err = locker.Inspect(ctx, key); err != nil {
			fmt.Fprint(stderr, errorLine(err))
			return exitRedis
		}
	}
	var out strings.Builder // takes every write
	for i, info := range infos {
		if cfg.json {
			_ = printJSON(&out, info) // one object a key, one after another
			continue
		}
		if i > 0 {
			out.WriteString("\n") // a blank line between keys
		}
		_ = printStatus(&out, info)
	}
	if _, err = io.WriteString(stdout, out.String()); err != nil {
		fmt.Fprint(stderr, errorLine(err))
		return exitCannotSay
	}
	for _, info := range infos {
		if info.Mode != "" {
			return exitConflict // held, or data of another kind: not free
		}
	}
	return exitFree
}

func toJSON(info redislock.Info) statusJSON {
	s := statusJSON{
		Key: info.Key, Held: len(info.Holders) > 0, Mode: string(info.Mode), Holders: []holderJSON{},
		Permits: info.Permits, Fence: info.Fence, Waiting: info.Waiting,
	}
	if s.Mode == "" {
		s.Mode = modeFree
	}
	for _, h := range info.Holders {
		s.Holders = append(s.Holders, holderJSON{Description: h.Description, TTLMillis: h.TTL.Milliseconds(), Token: h.Token})
	}
	return s
}

func printJSON(w io.Writer, info redislock.Info) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(toJSON(info))
}

// plain returns s as it is when it is plain text, else quoted in Go syntax
// (strconv.Quote). Keys, descriptions and tokens are whatever Redis holds,
// written by anyone: printed raw, a newline, a carriage return or a
// terminal escape in one could forge lines of the output. Plain text is
// non-empty valid UTF-8 of printable runes (strconv.IsPrint: no control or
// format characters, no space but ' '), with no space at either end, that
// does not start with '"' or '(' (so that a quoted text, or "(no
// description)", is never mistaken for a plain one).
func plain(s string) string {
	if s == "" || !utf8.ValidString(s) || s[0] == '"' || s[0] == '(' || s[0] == ' ' || s[len(s)-1] == ' ' {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// printStatus prints info for people, one line a value; text from Redis
// is printed plain (see plain):
//
//	key:      deploy
//	mode:     exclusive
//	holder:   redislock run migrate on web-3 pid 4711
//	  ttl:    27.4s
//	  token:  6Zo9HsF2OOqpxdya-011lA
//	fence:    12
//	waiting:  0
func printStatus(w io.Writer, info redislock.Info) error {
	s := toJSON(info)
	var b strings.Builder
	line := func(label string, value any) { fmt.Fprintf(&b, "%-10s%v\n", label+":", value) }
	line("key", plain(s.Key))
	line("mode", s.Mode)
	if s.Permits > 0 {
		line("permits", s.Permits)
	}
	for _, h := range info.Holders {
		d := "(no description)"
		if h.Description != "" {
			d = plain(h.Description)
		}
		line("holder", d)
		line("  ttl", h.TTL.Round(time.Millisecond))
		line("  token", plain(h.Token))
	}
	line("fence", s.Fence)
	line("waiting", s.Waiting)
	_, err := io.WriteString(w, b.String())
	return err
}
