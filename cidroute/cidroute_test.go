package cidroute

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// The tests here run two quic-go servers on one UDP socket, as the two
// processes of an upgrade do (the socket's descriptor duplicated), in one
// test process.

// listenUDP returns a UDP socket on loopback and a second handle on it (a
// duplicated descriptor, as a new process inherits).
func listenUDP(t *testing.T) (*net.UDPConn, *net.UDPConn) {
	t.Helper()
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := u.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return u, pc.(*net.UDPConn)
}

// server is a quic-go server on a Conn that answers each stream with its
// name and what the stream said.
type server struct {
	tr      *quic.Transport
	started atomic.Int64 // handshakes begun
}

func serve(t *testing.T, c *Conn, cfg *tls.Config, name string) *server {
	t.Helper()
	s := &server{}
	s.tr = &quic.Transport{Conn: c, ConnectionIDGenerator: c.IDs(),
		ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			s.started.Add(1)
			return ctx, nil
		}}
	ln, err := s.tr.Listen(cfg, &quic.Config{HandshakeIdleTimeout: 20 * time.Second, MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); s.tr.Close() })
	go func() {
		for {
			conn, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				for {
					str, err := conn.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go func() {
						b, _ := io.ReadAll(str)
						str.Write(append([]byte(name+":"), b...))
						str.Close()
					}()
				}
			}()
		}
	}()
	return s
}

// ask sends what on a new stream of conn and returns the answer.
func ask(t *testing.T, conn *quic.Conn, what string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(20*time.Second))
	defer cancel()
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	str.SetDeadline(time.Now().Add(20 * time.Second))
	str.Write([]byte(what))
	str.Close()
	b, err := io.ReadAll(str)
	if err != nil {
		t.Fatalf("asking %q: %v", what, err)
	}
	return string(b)
}

func tlsConfigs(t *testing.T) (server, client *tls.Config) {
	ca := edgetest.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, "cid.test")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"t"}},
		&tls.Config{RootCAs: ca.Pool(), ServerName: "cid.test", NextProtos: []string{"t"}}
}

func dial(t *testing.T, addr net.Addr, cfg *tls.Config) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(20*time.Second))
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr.String(), cfg, &quic.Config{HandshakeIdleTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// offerTo starts the next process's side on u, relayed to by old, as a
// new process starts with the relay the old one offers.
func offerTo(t *testing.T, old *Conn, u *net.UDPConn) *Conn {
	t.Helper()
	relay, err := old.Offer()
	if err != nil {
		t.Fatal(err)
	}
	next, err := New(u, relay)
	relay.Close()
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestHandOver: a connection of the old process keeps being served by it
// after the handover, through the relay, and so does a handshake under way
// at that moment; a new connection is the new process's; once the old
// process is gone, its tag is an unknown connection ID to the new one.
func TestHandOver(t *testing.T) {
	srvCfg, cliCfg := tlsConfigs(t)
	u1, u2 := listenUDP(t)
	old, err := New(u1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	// hello says that the old server read a ClientHello.
	hello := make(chan struct{}, 1)
	oldCfg := srvCfg.Clone()
	oldCfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		select {
		case hello <- struct{}{}:
		default:
		}
		return nil, nil
	}
	olds := serve(t, old, oldCfg, "old")

	kept := dial(t, u1.LocalAddr(), cliCfg)
	if got := ask(t, kept, "a"); got != "old:a" {
		t.Fatalf("before the handover: %q", got)
	}

	// A handshake under way at the handover: the client is behind a path
	// of 40 ms each way, and the handover comes as the old server has read
	// its ClientHello (and answers it).
	<-hello // the first connection's
	proxy := delayProxy(t, u1.LocalAddr().(*net.UDPAddr), 40*time.Millisecond)
	slow := make(chan *quic.Conn, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(20*time.Second))
		defer cancel()
		conn, err := quic.DialAddr(ctx, proxy.String(), cliCfg, &quic.Config{HandshakeIdleTimeout: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		slow <- conn
	}()
	select {
	case <-hello:
	case <-time.After(testkit.Slack(20 * time.Second)):
		t.Fatal("the old server read no ClientHello from the slow client within 20 s")
	}

	next := offerTo(t, old, u2)
	defer next.Close()
	if next.Tag() == old.Tag() || !next.Relaying() {
		t.Fatalf("new tag %x, old %x, relaying %v: want a tag of its own, and relaying", next.Tag(), old.Tag(), next.Relaying())
	}
	if err := old.HandOver(); err != nil {
		t.Fatal(err)
	}
	news := serve(t, next, srvCfg, "new")

	if got := ask(t, kept, "b"); got != "old:b" {
		t.Errorf("the old connection after the handover: %q, want old:b", got)
	}
	if c := <-slow; c != nil {
		if got := ask(t, c, "c"); got != "old:c" {
			t.Errorf("the handshake under way at the handover: %q, want old:c (handshakes old %d new %d)", got, olds.started.Load(), news.started.Load())
		}
		c.CloseWithError(0, "")
	}
	fresh := dial(t, u1.LocalAddr(), cliCfg)
	if got := ask(t, fresh, "d"); got != "new:d" {
		t.Errorf("a new connection: %q, want new:d", got)
	}
	if news.started.Load() == 0 || next.Relayed() == 0 {
		t.Errorf("new handshakes %d, relayed %d: want some of each", news.started.Load(), next.Relayed())
	}

	// The old process is gone: its connection's packets are unknown
	// connection IDs to the new one, which no longer relays.
	olds.tr.Close()
	old.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if str, err := kept.OpenStreamSync(ctx); err == nil {
		str.Write([]byte("e"))
		str.Close()
		str.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if b, err := io.ReadAll(str); err == nil {
			t.Errorf("the old process is gone, yet its connection answered %q", b)
		}
	}
	waitFor(t, "the new process to stop relaying", func() bool { return !next.Relaying() })
	if got := ask(t, fresh, "f"); got != "new:f" {
		t.Errorf("after the old process left: %q, want new:f", got)
	}
}

// TestRelayBounded: an old process that reads nothing makes the relay
// fill; its datagrams beyond are dropped and counted, and the new
// process's own are read all the while. A relayed datagram keeps its
// client's address and its bytes.
func TestRelayBounded(t *testing.T) {
	u1, u2 := listenUDP(t)
	old, err := New(u1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	next := offerTo(t, old, u2)
	defer next.Close()

	client, err := net.DialUDP("udp", nil, u1.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	oldTag := old.Tag()
	short := func(tag Tag, n byte) []byte {
		b := make([]byte, 1200)
		b[0] = 0x40
		copy(b[1:], tag[:])
		b[IDLen+1] = n
		return b
	}
	read := func(c *Conn) []byte {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		ms := messages()
		n, err := c.ReadBatch(ms, 0)
		if err != nil || n == 0 {
			t.Errorf("reading: %d, %v", n, err)
			return nil
		}
		return ms[0].Buffers[0][:ms[0].N]
	}

	// The old process's datagrams, more than the relay holds (about 1 MB at
	// most), then one of the new process's: the new process's read, under
	// way all the while, returns that one alone.
	got := make(chan []byte, 1)
	go func() { got <- read(next) }()
	const theirs = 2000
	for i := range theirs {
		client.Write(short(oldTag, byte(i)))
		if i%20 == 19 {
			// Not faster than the new process reads: the socket's own
			// buffer is not what is measured.
			waitFor(t, "the new process to read", func() bool { return next.Relayed()+next.Dropped() == uint64(i+1) })
		}
	}
	mine := short(next.Tag(), 7)
	client.Write(mine)
	if b := <-got; !bytes.Equal(b, mine) {
		t.Fatalf("the new process read %.8x, want its own datagram", b)
	}
	if r, d := next.Relayed(), next.Dropped(); r+d != theirs || d == 0 || r == 0 {
		t.Errorf("relayed %d, dropped %d: want %d in all, some of each", r, d, theirs)
	} else {
		t.Logf("relayed %d, dropped %d", r, d)
	}

	// What the old process reads once handed over: the first datagram,
	// with the client's address.
	if err := old.HandOver(); err != nil {
		t.Fatal(err)
	}
	old.SetReadDeadline(time.Now().Add(20 * time.Second))
	ms := messages()
	n, err := old.ReadBatch(ms, 0)
	if err != nil || n == 0 {
		t.Fatalf("the old process read %d, %v", n, err)
	}
	if got := ms[0].Buffers[0][:ms[0].N]; !bytes.Equal(got, short(oldTag, 0)) {
		t.Errorf("relayed %x..., want the first datagram", got[:8])
	}
	if a := ms[0].Addr.(*net.UDPAddr); !a.IP.Equal(client.LocalAddr().(*net.UDPAddr).IP) || a.Port != client.LocalAddr().(*net.UDPAddr).Port {
		t.Errorf("relayed from %v, want %v", a, client.LocalAddr())
	}

	// The old process closes its end: the new one keeps its datagrams.
	old.Close()
	again := short(oldTag, 9)
	client.Write(again)
	if got := read(next); !bytes.Equal(got, again) {
		t.Errorf("after the old process left, read %.8x, want the datagram of its tag", got)
	}
	if next.Relaying() {
		t.Error("still relaying to a closed relay")
	}
}

// TestForeignRelay: a relay without this version's hello is not used,
// and the conn serves all the same.
func TestForeignRelay(t *testing.T) {
	_, u2 := listenUDP(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	unix.Write(fds[0], []byte("hello, other version"))
	c, err := New(u2, os.NewFile(uintptr(fds[1]), "relay"))
	if err == nil || c == nil || c.Relaying() {
		t.Fatalf("New: %v, relaying: want an error, a conn, no relaying", err)
	}
	c.Close()
}

func messages() []ipv4.Message {
	ms := make([]ipv4.Message, 8)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, 1452)}
		ms[i].OOB = make([]byte, 128)
	}
	return ms
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// delayProxy forwards one client's datagrams to server and back, each
// after delay, and returns its address.
func delayProxy(t *testing.T, server *net.UDPAddr, delay time.Duration) net.Addr {
	t.Helper()
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp", nil, server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { front.Close(); back.Close() })
	var client atomic.Pointer[net.UDPAddr]
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			client.Store(from)
			b := bytes.Clone(buf[:n])
			time.AfterFunc(delay, func() { back.Write(b) })
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			b := bytes.Clone(buf[:n])
			time.AfterFunc(delay, func() {
				if to := client.Load(); to != nil {
					front.WriteToUDP(b, to)
				}
			})
		}
	}()
	return front.LocalAddr()
}
