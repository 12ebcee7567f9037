package cidroute

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The relay is a unix datagram socket pair: the old process makes it
// (Offer) and writes its hello on it, naming its tag; the new process
// inherits the other end and writes the old process's datagrams on it,
// one relay datagram each:
//
//	version (1) | address length (4 or 16) | address | port (2) |
//	ancillary data length (1) | ancillary data | the datagram
//
// The ancillary data is the socket's (the ECN bits, the local address the
// datagram came to), so that the old process answers as if it had read
// the datagram itself.

// hello is the first datagram on a relay, from the old process: magic,
// version, tag, connection ID length. A new process that does not know it
// does not relay.
var helloMagic = []byte("lgq\x01")

const (
	relayVersion = 1
	helloLen     = 4 + TagLen + 1
	// maxRelayed is the largest relay datagram: a header, ancillary data as
	// large as quic-go reads, and a datagram as large.
	maxRelayed = 1 + 1 + 16 + 2 + 1 + 255 + 1500
	// relayBuffer is the relay's send buffer the new process asks for (the
	// kernel caps it at net.core.wmem_max): the old process's datagrams
	// beyond it are dropped.
	relayBuffer = 1 << 20
)

// socketPair returns the two ends of a relay, with this process's hello
// (tag) written on it.
func socketPair(tag Tag) (mine *net.UnixConn, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, relayBuffer)
	hello := append(append(append([]byte{}, helloMagic...), tag[:]...), IDLen)
	if _, err := unix.Write(fds[0], hello); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fds[0]), "relay")
	defer f.Close() // FileConn holds a copy
	c, err := net.FileConn(f)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "relay"), nil
}

// forwarder passes the old process's datagrams to it, in the new one.
type forwarder struct {
	conn             *net.UnixConn
	raw              syscall.RawConn
	tag              Tag // the old process's
	buf              []byte
	relayed, dropped *atomic.Uint64
}

// newForwarder reads the hello on an inherited relay, and returns the
// forwarder to the process that wrote it.
func newForwarder(relay *os.File, relayed, dropped *atomic.Uint64) (*forwarder, Tag, error) {
	defer relay.Close()
	c, err := net.FileConn(relay)
	if err != nil {
		return nil, Tag{}, fmt.Errorf("cidroute: relay: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, Tag{}, fmt.Errorf("cidroute: relay: a %T, not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		uc.Close()
		return nil, Tag{}, fmt.Errorf("cidroute: relay: %w", err)
	}
	// The hello was written before this process started: it is there.
	var b [64]byte
	n := -1
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		rerr = err
	}
	if rerr != nil || n != helloLen || !bytes.HasPrefix(b[:n], helloMagic) || b[helloLen-1] != IDLen {
		uc.Close()
		return nil, Tag{}, fmt.Errorf("cidroute: relay: no hello this version knows (%d bytes, %v): packets are not relayed", n, rerr)
	}
	f := &forwarder{conn: uc, raw: raw, tag: Tag(b[len(helloMagic) : len(helloMagic)+TagLen]),
		buf: make([]byte, maxRelayed), relayed: relayed, dropped: dropped}
	return f, f.tag, nil
}

// theirs reports whether the destination connection ID of the QUIC
// packet b carries the old process's tag.
func (f *forwarder) theirs(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	if b[0]&0x80 != 0 {
		// Long header: flags, version (4 bytes), DCID length, DCID.
		return len(b) >= 6+IDLen && b[5] == IDLen && Tag(b[6:6+TagLen]) == f.tag
	}
	// Short header: flags, DCID (of the length this process knows).
	return len(b) >= 1+IDLen && Tag(b[1:1+TagLen]) == f.tag
}

// route passes the old process's datagrams of ms to it and returns how
// many are left for this process, moved to the front of ms; gone when the
// old process closed the relay (the datagram then stays here).
func (f *forwarder) route(ms []ipv4.Message) (kept int, gone bool) {
	for i := range ms {
		m := &ms[i]
		if !gone && f.theirs(m.Buffers[0][:m.N]) {
			switch err := f.send(m); {
			case err == nil:
				f.relayed.Add(1)
				continue
			case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) || err == errUnanswerable:
				f.dropped.Add(1)
				continue
			default:
				gone = true
			}
		}
		if kept != i {
			moveMessage(&ms[kept], m)
		}
		kept++
	}
	return kept, gone
}

// moveMessage copies the datagram of from into to's buffers (quic-go
// keeps each message's buffer where it gave it).
func moveMessage(to, from *ipv4.Message) {
	to.N = copy(to.Buffers[0], from.Buffers[0][:from.N])
	to.NN = copy(to.OOB, from.OOB[:from.NN])
	to.Addr = from.Addr
	to.Flags = from.Flags
}

// errUnanswerable is a datagram without an address the old process could
// answer: dropped.
var errUnanswerable = errors.New("cidroute: no UDP address")

// send writes m on the relay, never waiting: a full relay is EAGAIN.
func (f *forwarder) send(m *ipv4.Message) error {
	ua, ok := m.Addr.(*net.UDPAddr)
	// The address as the socket gave it (an IPv4 client on a dual-stack
	// socket in its IPv6 form), so that quic-go sees no new path.
	if !ok || m.NN > 255 || len(ua.IP) != 4 && len(ua.IP) != 16 {
		return errUnanswerable
	}
	ip := ua.IP
	b := append(f.buf[:0], relayVersion, byte(len(ip)))
	b = append(b, ip...)
	b = binary.BigEndian.AppendUint16(b, uint16(ua.Port))
	b = append(b, byte(m.NN))
	b = append(b, m.OOB[:m.NN]...)
	b = append(b, m.Buffers[0][:m.N]...)
	var serr error
	if err := f.raw.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
		return true
	}); err != nil {
		return err
	}
	return serr
}

func (f *forwarder) close() { f.conn.Close() }

// relayIn reads the datagrams the new process relays, in the old one.
type relayIn struct {
	conn *net.UnixConn
	raw  syscall.RawConn
	buf  []byte
}

func newRelayIn(c *net.UnixConn) *relayIn {
	raw, _ := c.SyscallConn() // a *net.UnixConn made by FileConn has one
	return &relayIn{conn: c, raw: raw, buf: make([]byte, maxRelayed)}
}

// read fills ms with the datagrams relayed, waiting (within the conn's
// read deadline) for the first one. A relay datagram that does not parse
// is dropped.
func (in *relayIn) read(ms []ipv4.Message) (int, error) {
	k := 0
	var rerr error
	err := in.raw.Read(func(fd uintptr) bool {
		for k < len(ms) {
			n, _, err := unix.Recvfrom(int(fd), in.buf, unix.MSG_DONTWAIT)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return k > 0 // none yet: wait
			case err != nil:
				rerr = err
				return true
			}
			if decode(in.buf[:n], &ms[k]) {
				k++
			}
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if k > 0 {
		return k, nil
	}
	return 0, err
}

// decode parses a relay datagram into m; false when it does not parse or
// fit.
func decode(b []byte, m *ipv4.Message) bool {
	if len(b) < 2 || b[0] != relayVersion || (b[1] != 4 && b[1] != 16) {
		return false
	}
	alen := int(b[1])
	if len(b) < 2+alen+2+1 {
		return false
	}
	ip := net.IP(bytes.Clone(b[2 : 2+alen]))
	port := binary.BigEndian.Uint16(b[2+alen:])
	b = b[2+alen+2:]
	oobLen := int(b[0])
	b = b[1:]
	if len(b) < oobLen || oobLen > len(m.OOB) || len(b)-oobLen > len(m.Buffers[0]) {
		return false
	}
	m.NN = copy(m.OOB, b[:oobLen])
	m.N = copy(m.Buffers[0], b[oobLen:])
	m.Addr = &net.UDPAddr{IP: ip, Port: int(port)}
	m.Flags = 0
	return true
}
