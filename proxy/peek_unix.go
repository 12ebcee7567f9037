//go:build unix

package proxy

import "syscall"

// peerClosed reports whether the target closed c (or sent bytes nobody
// asked for) while it sat idle: a peek at the socket that does not wait.
// One system call; false when c gives no access to its socket.
func (c *h1Conn) peerClosed() bool {
	if c.raw == nil {
		return false
	}
	var b [1]byte
	closed := false
	err := c.raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		case err == syscall.EINTR: // not known: take it as open
		default: // end of stream, an error, or unasked-for bytes
			closed = err != nil || n >= 0
		}
		return true
	})
	return closed || err != nil
}
