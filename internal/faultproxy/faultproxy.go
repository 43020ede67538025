// Package faultproxy is a small in-process TCP proxy for injecting network
// faults between a client (typically go-redis) and a server (typically Redis)
// in tests.
//
// The proxy forwards bytes in chunks exactly as they are read; it does not
// parse RESP. Faults are therefore chunk-granular, which is precise enough for
// a go-redis client that sends one command and waits for its reply.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

const (
	bufSize     = 32 << 10
	dialTimeout = 5 * time.Second
)

// Proxy forwards every TCP connection accepted on [Proxy.Addr] to a target
// address, with optional fault injection. Its methods are safe for concurrent
// use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close; aborts pending dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started

	mu     sync.Mutex
	cond   *sync.Cond // signalled on Resume, Close and connection close
	paused bool
	closed bool
	conns  map[*conn]struct{}
	drop   *dropFault // armed DropNextReply fault, or nil
}

type dropFault struct {
	match func(request []byte) bool
}

// conn is one proxied client connection and its upstream connection.
type conn struct {
	client, server net.Conn

	// guarded by Proxy.mu
	closed    bool
	dropReply bool // the next server→client chunk is discarded and conn closed
}

// New starts a proxy listening on 127.0.0.1:0 that forwards to target. The
// proxy is closed in t.Cleanup.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*conn]struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	p.spawn(p.acceptLoop)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address clients should connect to ("127.0.0.1:<port>").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropNextReply arms a one-shot fault. The next client→server chunk for which
// match returns true (match sees the raw RESP bytes; nil matches anything) is
// still forwarded, so the server executes the command, but the next
// server→client chunk on that connection is discarded and the connection is
// closed instead. The client thus sees EOF or a reset although the command
// took effect. Arming again replaces a fault that has not fired yet.
//
// match is called from the proxy's goroutines and must not block.
func (p *Proxy) DropNextReply(match func(request []byte) bool) {
	if match == nil {
		match = func([]byte) bool { return true }
	}
	p.mu.Lock()
	p.drop = &dropFault{match: match}
	p.mu.Unlock()
}

// MatchCommand returns a DropNextReply matcher that matches a request whose
// first RESP command is name, compared case-insensitively. Prefer it over
// searching the raw bytes: go-redis sends command names in lower case ("set"),
// and its connection handshake sends "client setinfo", which a plain
// bytes.Contains(req, []byte("SET")) style match would either miss or hit.
func MatchCommand(name string) func(request []byte) bool {
	return func(request []byte) bool {
		cmd, ok := firstCommand(request)
		return ok && bytes.EqualFold(cmd, []byte(name))
	}
}

// firstCommand extracts the command name from a RESP array request
// ("*N\r\n$L\r\nNAME\r\n...").
func firstCommand(req []byte) ([]byte, bool) {
	if len(req) == 0 || req[0] != '*' {
		return nil, false
	}
	i := bytes.Index(req, []byte("\r\n"))
	if i < 0 || i+2 >= len(req) || req[i+2] != '$' {
		return nil, false
	}
	rest := req[i+3:]
	j := bytes.Index(rest, []byte("\r\n"))
	if j < 0 {
		return nil, false
	}
	n, err := strconv.Atoi(string(rest[:j]))
	if err != nil || n < 0 || len(rest) < j+2+n {
		return nil, false
	}
	return rest[j+2 : j+2+n], true
}

// Pause stops forwarding in both directions. Bytes already read are held, not
// dropped, and connections stay open, so clients see a black hole until
// [Proxy.Resume]. New connections are still accepted but are held too.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume ends a [Proxy.Pause] and delivers the held bytes on every
// connection that is still open.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// ResetAll abruptly closes every current connection (with TCP RST where
// possible) on both the client and server side. The proxy keeps accepting
// new connections.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		p.closeConn(c, true)
	}
}

// Close stops the listener, closes all connections and waits until every
// goroutine started by the proxy has exited. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()

	p.cancel()
	_ = p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Transient accept errors (e.g. EMFILE): back off briefly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.spawn(func() { p.handle(cc) })
	}
}

// spawn runs f in a goroutine that Close waits for (sync.WaitGroup.Go,
// which is Go 1.25's: the module builds with Go 1.22).
func (p *Proxy) spawn(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

func (p *Proxy) handle(cc net.Conn) {
	d := net.Dialer{Timeout: dialTimeout}
	sc, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		_ = cc.Close()
		return
	}
	c := &conn{client: cc, server: sc}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = cc.Close()
		_ = sc.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	p.spawn(func() { p.pipe(c, true) })
	p.pipe(c, false)
}

// pipe copies one direction of c until either side fails or c is closed.
func (p *Proxy) pipe(c *conn, toServer bool) {
	src, dst := c.server, c.client
	if toServer {
		src, dst = c.client, c.server
	}
	defer p.closeConn(c, false)
	buf := make([]byte, bufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if !p.waitRunning(c) {
				return
			}
			if toServer {
				p.checkDrop(c, chunk)
			} else if p.takeDropReply(c) {
				return // discard the reply; deferred close resets the client
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitRunning blocks while the proxy is paused. It reports false if the proxy
// or c was closed meanwhile.
func (p *Proxy) waitRunning(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.paused && !p.closed && !c.closed {
		p.cond.Wait()
	}
	return !p.closed && !c.closed
}

// checkDrop fires an armed DropNextReply fault if request matches. It marks
// c before the request is forwarded, so the reply cannot slip through.
func (p *Proxy) checkDrop(c *conn, request []byte) {
	p.mu.Lock()
	f := p.drop
	p.mu.Unlock()
	if f == nil || !f.match(request) { // match runs unlocked: it is user code
		return
	}
	p.mu.Lock()
	if p.drop == f {
		p.drop = nil
		c.dropReply = true
	}
	p.mu.Unlock()
}

func (p *Proxy) takeDropReply(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.dropReply
}

// closeConn closes both sides of c once. With abort, the sockets are reset
// (SO_LINGER 0) instead of closed gracefully.
func (p *Proxy) closeConn(c *conn, abort bool) {
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		return
	}
	c.closed = true
	delete(p.conns, c)
	p.cond.Broadcast() // wake a pipe held by Pause
	p.mu.Unlock()

	if abort {
		for _, nc := range []net.Conn{c.client, c.server} {
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
	}
	_ = c.client.Close()
	_ = c.server.Close()
}
