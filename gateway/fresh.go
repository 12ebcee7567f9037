package gateway

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// freshConns counts the HTTP/1 connections the gateway accepted and has
// not answered yet, so that a graceful stop (SIGTERM, or a binary
// upgrade's old process) closes none unanswered. Go's HTTP/1 server, and
// h1serve as it, serves no request it reads once Shutdown began (it
// cannot know it will finish it), and closes the connection instead: a
// client retries such a request on a connection it had used before (RFC
// 9112 section 9.3.1), but a new connection's first request fails. So Serve
// stops accepting first, waits until every connection accepted has been
// answered once (or closed: a client that sends nothing is cut by
// read_header_timeout), and only then shuts its servers down. HTTP/2
// needs none of it: its GOAWAY tells the client which streams were not
// served. The zero value is ready to use and safe for concurrent use.
type freshConns struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

// listener wraps l: the connections it accepts are tracked.
func (f *freshConns) listener(l net.Listener) net.Listener { return freshListener{l, f} }

// track counts c until its first write (the first answer's bytes) or its
// close.
func (f *freshConns) track(c net.Conn) net.Conn {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return &freshConn{Conn: c, f: f}
}

func (f *freshConns) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n--; f.n == 0 {
		for _, w := range f.waiters {
			close(w)
		}
		f.waiters = nil
	}
}

// wait returns once no tracked connection waits for its first answer, or
// ctx's error when it is done first.
func (f *freshConns) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	f.waiters = append(f.waiters, w)
	f.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type freshListener struct {
	net.Listener
	f *freshConns
}

func (l freshListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.f.track(c), nil
}

// freshConn is a connection counted by a freshConns until its first write
// or its close.
type freshConn struct {
	net.Conn
	f        *freshConns
	answered atomic.Bool
}

func (c *freshConn) Write(b []byte) (int, error) {
	if !c.answered.Load() && c.answered.CompareAndSwap(false, true) {
		c.f.done()
	}
	return c.Conn.Write(b)
}

func (c *freshConn) Close() error {
	if !c.answered.Load() && c.answered.CompareAndSwap(false, true) {
		c.f.done()
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection (net/http does after a 400).
func (c *freshConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
