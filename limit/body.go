package limit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// requestBody is the beginning of a request's body as the limiter reads
// it: at most max bytes, read once by whichever reader asks first, and put
// back so that the upstream receives the body byte for byte whatever its
// size. It is used by one request's goroutine only.
type requestBody struct {
	r    *http.Request
	max  int64
	done bool
	buf  []byte
	err  *unreadable
}

// bytes returns the body, nil when there is none, or why it cannot be had:
// it is larger than max (413; not read at all when its Content-Length says
// so), it arrived too slowly (408: server.body_timeout or read_timeout
// passed, see proxy.BodyDeadline), or it could not be read (400: a
// malformed chunk, a client that hung up). In those three cases the rest
// of the body is unread and the connection cannot carry another request:
// the answer closes it (unreadable.close), so that the server does not
// drain the body, under a fresh deadline, before answering.
func (b *requestBody) bytes() ([]byte, *unreadable) {
	if b.done {
		return b.buf, b.err
	}
	b.done = true
	r := b.r
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, nil
	}
	if r.ContentLength > b.max {
		b.err = b.tooLarge()
		return nil, b.err
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, b.max+1))
	r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), c: r.Body}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.err = &unreadable{status: http.StatusRequestTimeout, reason: "the body arrived too slowly", close: true, broken: true}
	case err != nil:
		b.err = &unreadable{status: http.StatusBadRequest, reason: "the body could not be read", close: true, broken: true}
	case int64(len(buf)) > b.max:
		b.err = b.tooLarge()
	default:
		b.buf = buf
	}
	return b.buf, b.err
}

func (b *requestBody) tooLarge() *unreadable {
	return &unreadable{status: http.StatusRequestEntityTooLarge, close: true,
		reason: fmt.Sprintf("the body is larger than identity.max_body_bytes (%d), the most the gateway reads to find the email", b.max)}
}
