package h1wire

import (
	"io"
	"net/http/httputil"
	"strconv"
)

// AppendChunkSize appends the size line of a chunk of n bytes (RFC 9112
// section 7.1): n in hexadecimal and the line end, no extension.
func AppendChunkSize(b []byte, n int) []byte {
	b = strconv.AppendUint(b, uint64(n), 16)
	return append(b, "\r\n"...)
}

// LastChunk is the chunk that ends a chunked body; the trailer fields
// and the empty line follow it.
const LastChunk = "0\r\n"

// NewChunkedReader returns a reader of the chunked body that r starts
// with: the chunks' data, then io.EOF after the last chunk, with the
// trailer section left unread in r (HeadReader.ReadFields reads it).
// It is net/http's own (httputil.NewChunkedReader), which refuses what
// net/http refuses: a bare LF, a size that is not hexadecimal, an
// extension with a quoted CRLF, excessive overhead.
func NewChunkedReader(r io.Reader) io.Reader { return httputil.NewChunkedReader(r) }
