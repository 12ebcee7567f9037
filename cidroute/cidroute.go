// Package cidroute lets the two processes of a binary upgrade serve QUIC
// on one UDP socket at once, by connection ID. A QUIC connection is the
// state of the process that made it, and the kernel gives each datagram of
// a shared socket to whichever process reads first; so every connection ID
// a process chooses carries a tag of its own (its first TagLen bytes), and
// once the old process hands over, the new one alone reads the socket: a
// datagram whose destination connection ID carries the old process's tag
// is passed to it over a unix datagram socket pair (the relay), with the
// client's address and the packet's ancillary data, and the old process
// reads its packets from there, writing its answers to the UDP socket as
// before. The old process thus finishes the handshakes it had under way and
// serves its connections until it closes them; everything else, new
// connections first, is the new process's. Once the old process closed its
// end of the relay (it is done, or it exited), its tag is nobody's: the new
// process handles such packets as any of unknown connection IDs.
//
// Conn wraps the UDP socket for quic-go's Transport (as its Conn, and its
// ConnectionIDGenerator through IDs). It stays an OOB-capable conn, so that
// quic-go keeps its fast path: reads in batches (recvmmsg, through
// ReadBatch), writes with GSO and ECN (WriteMsgUDP of the socket itself).
// Routing costs a look at the first bytes of each datagram, and only while
// a relay is open.
//
// The relay is bounded: a datagram the old process has no room for is
// dropped and counted (QUIC's loss recovery sends it again), and the new
// process's reads never wait for it. A client that forges the old tag
// reaches the old process with what it would cost the new one with any
// unknown connection ID.
package cidroute

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"
)

// TagLen is the length of a process's tag, the first bytes of each
// connection ID it chooses; IDLen the length of its connection IDs: the
// tag and 8 random bytes.
const (
	TagLen = 2
	IDLen  = TagLen + 8
)

// Tag is a process's tag.
type Tag [TagLen]byte

// newTag returns a random tag other than avoid.
func newTag(avoid *Tag) (Tag, error) {
	for {
		var t Tag
		if _, err := rand.Read(t[:]); err != nil {
			return t, err
		}
		if avoid == nil || t != *avoid {
			return t, nil
		}
	}
}

// Conn is a UDP socket shared with the other process of an upgrade, if
// any. Make it with New.
type Conn struct {
	*net.UDPConn // writes, the socket's options and addresses: quic-go's fast path
	batch        *ipv4.PacketConn
	tag          Tag

	fwd              atomic.Pointer[forwarder] // in a new process, while the old one takes packets
	relayed, dropped atomic.Uint64             // Relayed, Dropped

	mu       sync.Mutex
	cond     sync.Cond
	in       *relayIn      // once handed over: packets come from here, not the socket
	udpBusy  bool          // a read of the socket is under way
	deadline time.Time     // the read deadline quic-go set
	offered  *net.UnixConn // this process's end of a relay offered to a successor
}

// New wraps udp. relay is the inherited end of the relay the process this
// one replaces offered (Offer), nil when there is none: its packets then
// go there until it is gone. A relay that does not say the old process's
// tag is closed and ignored, with the error saying why; udp is served all
// the same.
func New(udp *net.UDPConn, relay *os.File) (*Conn, error) {
	c := &Conn{UDPConn: udp, batch: ipv4.NewPacketConn(udp)}
	c.cond.L = &c.mu
	var old *Tag
	var relayErr error
	if relay != nil {
		f, t, err := newForwarder(relay, &c.relayed, &c.dropped)
		if err != nil {
			relayErr = err
		} else {
			old = &t
			c.fwd.Store(f)
		}
	}
	tag, err := newTag(old)
	if err != nil {
		return nil, err
	}
	c.tag = tag
	return c, relayErr
}

// Tag returns the tag of this process's connection IDs.
func (c *Conn) Tag() Tag { return c.tag }

// Relaying reports whether packets go to the process this one replaces.
func (c *Conn) Relaying() bool { return c.fwd.Load() != nil }

// Relayed returns how many datagrams were passed to the process this one
// replaces.
func (c *Conn) Relayed() uint64 { return c.relayed.Load() }

// Dropped returns how many datagrams of the process this one replaces
// were dropped, the relay full.
func (c *Conn) Dropped() uint64 { return c.dropped.Load() }

// IDs returns the connection ID generator of c's process, for quic-go's
// Transport.
func (c *Conn) IDs() quic.ConnectionIDGenerator { return ids{c.tag} }

type ids struct{ tag Tag }

func (g ids) GenerateConnectionID() (quic.ConnectionID, error) {
	var b [IDLen]byte
	copy(b[:], g.tag[:])
	if _, err := rand.Read(b[TagLen:]); err != nil {
		return quic.ConnectionID{}, err
	}
	return quic.ConnectionIDFromBytes(b[:]), nil
}

func (ids) ConnectionIDLen() int { return IDLen }

// ReadBatch reads datagrams for quic-go (which prefers it to reading the
// socket itself): from the socket, less those of the old process, or, once
// this process handed over, from the relay.
func (c *Conn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	for {
		c.mu.Lock()
		if in := c.in; in != nil {
			c.mu.Unlock()
			return in.read(ms)
		}
		c.udpBusy = true
		c.mu.Unlock()
		n, err := c.batch.ReadBatch(ms, flags)
		c.mu.Lock()
		c.udpBusy = false
		handedOver := c.in != nil
		c.cond.Broadcast()
		c.mu.Unlock()
		if err != nil {
			if handedOver && errors.Is(err, os.ErrDeadlineExceeded) {
				continue // HandOver cut the read short: read the relay (whose deadline is quic-go's)
			}
			return n, err
		}
		if f := c.fwd.Load(); f != nil {
			var gone bool
			n, gone = f.route(ms[:n])
			if gone {
				c.fwd.CompareAndSwap(f, nil)
				f.close()
			}
		}
		if n > 0 {
			return n, nil
		}
		// All of them were the old process's: quic-go takes a batch of none
		// as a read of nothing, so read on.
	}
}

// SetReadDeadline sets the deadline of reads from the socket or, once
// handed over, from the relay (quic-go's Transport.Close ends its reads
// with it).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	if c.in != nil {
		c.in.conn.SetReadDeadline(t)
	}
	return c.UDPConn.SetReadDeadline(t)
}

// Offer makes a relay for a successor: it returns the successor's end,
// to pass it as it starts (and close here once passed). This process's end
// waits for HandOver, or Withdraw if the successor does not serve.
func (c *Conn) Offer() (*os.File, error) {
	mine, theirs, err := socketPair(c.tag)
	if err != nil {
		return nil, fmt.Errorf("cidroute: %w", err)
	}
	c.setOffered(mine)
	return theirs, nil
}

// Withdraw closes the relay offered, if any: its successor did not serve.
func (c *Conn) Withdraw() { c.setOffered(nil) }

// setOffered makes u the relay offered, closing the one offered before.
func (c *Conn) setOffered(u *net.UnixConn) {
	c.mu.Lock()
	prev := c.offered
	c.offered = u
	c.mu.Unlock()
	if prev != nil {
		prev.Close()
	}
}

// HandOver makes c read its packets from the relay it offered, not the
// socket, from now on: the successor reads the socket once told so. It
// returns once no read of the socket is under way.
func (c *Conn) HandOver() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offered == nil {
		return errors.New("cidroute: no relay offered to hand over on")
	}
	if c.in != nil {
		return nil
	}
	c.in = newRelayIn(c.offered)
	c.offered = nil
	c.in.conn.SetReadDeadline(c.deadline)
	if c.udpBusy {
		// Cut the read under way short, and wait until it returned.
		c.UDPConn.SetReadDeadline(time.Now())
		for c.udpBusy {
			c.cond.Wait()
		}
		c.UDPConn.SetReadDeadline(c.deadline)
	}
	return nil
}

// Close closes the socket and the relays.
func (c *Conn) Close() error {
	if f := c.fwd.Swap(nil); f != nil {
		f.close()
	}
	c.Withdraw()
	c.mu.Lock()
	if c.in != nil {
		c.in.conn.Close()
	}
	c.mu.Unlock()
	return c.UDPConn.Close()
}
