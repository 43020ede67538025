package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// isSET matches a SET of key by raw bytes. go-redis sends "set" in lower case.
func isSET(key string) func([]byte) bool {
	return func(req []byte) bool {
		return bytes.Contains(bytes.ToUpper(req), []byte("$3\r\nSET\r\n")) && bytes.Contains(req, []byte(key))
	}
}

func TestMatchCommand(t *testing.T) {
	set := MatchCommand("SET")
	for _, tc := range []struct {
		req  string
		want bool
	}{
		{"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n", true},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", true},
		{"*4\r\n$6\r\nclient\r\n$7\r\nsetinfo\r\n$8\r\nLIB-NAME\r\n$1\r\nx\r\n", false},
		{"*2\r\n$3\r\nget\r\n$3\r\nset\r\n", false},
		{"*2\r\n$5\r\nsetex\r\n", false},
		{"*1\r\n$3\r\nse", false}, // truncated
		{"PING\r\n", false},
		{"", false},
	} {
		if got := set([]byte(tc.req)); got != tc.want {
			t.Errorf("MatchCommand(SET)(%q) = %v, want %v", tc.req, got, tc.want)
		}
	}
}

func TestDropNextReplyMatchCommand(t *testing.T) {
	srv := redistest.Start(t)
	p := New(t, srv.Addr())
	// A fresh client: the handshake (hello, client setinfo) must not trigger it.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	p.DropNextReply(MatchCommand("set"))
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err == nil {
		t.Fatal("SET succeeded although its reply was dropped")
	}
	if got := srv.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k = %v, want v", got)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after dropped reply: %v", err)
	}
}

func TestDropNextReplyCommandTakesEffect(t *testing.T) {
	srv := redistest.Start(t)
	p := New(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // connection handshake done first
		t.Fatal(err)
	}

	p.DropNextReply(isSET("lost-reply"))
	// A non-matching command is unaffected and does not consume the fault.
	if err := c.Set(ctx, "other", "x", 0).Err(); err != nil {
		t.Fatalf("non-matching SET: %v", err)
	}
	err := c.Set(ctx, "lost-reply", "v", 0).Err()
	if err == nil {
		t.Fatal("SET succeeded although its reply was dropped")
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		var op *net.OpError
		if !errors.As(err, &op) {
			t.Fatalf("SET error = %v (%T), want a connection error", err, err)
		}
	}
	if got := srv.Do(t, "GET", "lost-reply"); got != "v" {
		t.Fatalf("server has lost-reply = %v, want v: the command must have executed", got)
	}

	// One-shot: the same command now works through the proxy.
	if err := c.Set(ctx, "lost-reply", "v2", 0).Err(); err != nil {
		t.Fatalf("second SET: %v", err)
	}
	if got, err := c.Get(ctx, "lost-reply").Result(); err != nil || got != "v2" {
		t.Fatalf("GET = %q, %v", got, err)
	}
}

func TestPauseResume(t *testing.T) {
	srv := redistest.Start(t)
	p := New(t, srv.Addr())
	c := redis.NewClient(&redis.Options{
		Addr:        p.Addr(),
		MaxRetries:  -1,
		ReadTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	p.Pause()
	start := time.Now()
	err := c.Set(ctx, "held", "v", 0).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("SET while paused = %v, want timeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	if got := srv.Do(t, "GET", "held"); got != nil {
		t.Fatalf("held = %v while paused: request must not be forwarded", got)
	}

	p.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	// The held request was not dropped: it reaches the server after Resume.
	deadline := time.Now().Add(2 * time.Second)
	for srv.Do(t, "GET", "held") != "v" {
		if time.Now().After(deadline) {
			t.Fatal("held SET never reached the server after Resume")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startEcho runs a TCP echo server until the test ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		t.Fatalf("echo = %q, want %q", buf, msg)
	}
	return nil
}

func TestResetAll(t *testing.T) {
	p := New(t, startEcho(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(t, c, "hello"); err != nil {
		t.Fatal(err)
	}
	p.ResetAll()
	if err := roundTrip(t, c, "again"); err == nil {
		t.Fatal("connection survived ResetAll")
	}
	// New connections still work.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(t, c2, "new"); err != nil {
		t.Fatalf("new connection after ResetAll: %v", err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	echo := startEcho(t)
	before := runtime.NumGoroutine()

	var clients []net.Conn
	t.Run("inner", func(t *testing.T) {
		p := New(t, echo)
		for range 3 {
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
			if err := roundTrip(t, c, "ping"); err != nil {
				t.Fatal(err)
			}
		}
		// Leave one connection with bytes held by Pause, and one armed fault.
		p.DropNextReply(nil)
		p.Pause()
		if _, err := io.WriteString(clients[0], "held"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // let the proxy read and hold them
		// Cleanup closes p while paused and while clients are still open.
	})
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()

	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before, %d after Close\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
	// The proxy's side of client connections is closed.
	_ = clients[1].SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := clients[1].Read(make([]byte, 1)); err == nil {
		t.Fatal("client connection still open after Close")
	}
}
