//go:build !unix

package proxy

// peerClosed cannot look at the socket here: a connection the target
// closed is noticed when a request on it fails.
func (c *h1Conn) peerClosed() bool { return false }
