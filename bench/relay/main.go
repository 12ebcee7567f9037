// Command relay is the benchmarks' floor of Go itself: the least a Go
// program does to pass a GET to an upstream and its answer back, with a
// goroutine per client connection and Go's own netpoller, as the gateway
// has. Each client connection gets an upstream connection of its own;
// request and response heads pass through untouched (no header added,
// removed or parsed beyond finding a head's end and the answer's
// Content-Length). It is no proxy: a request with a body, or an answer
// without a Content-Length, ends the connection. bench/run.sh measures it
// as the target "relay".
//
//	relay -listen 127.0.0.1:8091 -target 127.0.0.1:8081
//
// It prints "relay listening on http://ADDR" once it accepts connections.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/linkgate/linkgate/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) error { return run(ctx, os.Args, os.Stdout) })
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stdout)
	listen := fs.String("listen", "127.0.0.1:8091", "address to listen on")
	target := fs.String("target", "127.0.0.1:8081", "the upstream's host:port")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	fmt.Fprintf(stdout, "relay listening on http://%s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("relay: %w", err)
		}
		go relay(c, *target)
	}
}

var (
	crlfcrlf      = []byte("\r\n\r\n")
	contentLength = []byte("\r\nContent-Length:")
)

// relay passes c's requests to a connection of its own to target, and the
// answers back, one at a time.
func relay(c net.Conn, target string) {
	defer c.Close()
	u, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer u.Close()
	cr, ur := bufio.NewReaderSize(c, 4<<10), bufio.NewReaderSize(u, 4<<10)
	out := make([]byte, 0, 4<<10)
	for {
		head, err := peekHead(cr)
		if err != nil || bodyLength(head) != 0 {
			return
		}
		if _, err := u.Write(head); err != nil {
			return
		}
		cr.Discard(len(head))
		head, err = peekHead(ur)
		if err != nil {
			return
		}
		n := bodyLength(head)
		if n < 0 {
			return
		}
		out = append(out[:0], head...)
		ur.Discard(len(head))
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(ur, out[len(out)-n:]); err != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// peekHead returns the head at the start of r's buffer, through its
// empty line, not consumed.
func peekHead(r *bufio.Reader) ([]byte, error) {
	for {
		buf, _ := r.Peek(r.Buffered())
		if i := bytes.Index(buf, crlfcrlf); i >= 0 {
			return buf[:i+4], nil
		}
		if len(buf) == r.Size() {
			return nil, errors.New("relay: head too large")
		}
		if _, err := r.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// bodyLength returns a head's Content-Length, spelled as Go's and nginx's
// servers and clients spell it: 0 without one, -1 when it is not a number.
func bodyLength(head []byte) int {
	i := bytes.Index(head, contentLength)
	if i < 0 {
		return 0
	}
	v := head[i+len(contentLength):]
	v = v[:bytes.IndexByte(v, '\r')]
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}
