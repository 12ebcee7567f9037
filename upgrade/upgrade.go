// Package upgrade replaces a running gateway by a new process of the
// binary at its path without refusing a connection, as nginx does on USR2
// and Cloudflare's tableflip does for Go servers: the running process
// starts the new one with its listening sockets (TCP, and the UDP socket of
// HTTP/3) as inherited file descriptors, named in an environment variable
// (EnvVar); the new process binds them instead of new ones, compiles its
// config, starts serving and says it is ready over a pipe, or says why it
// failed; only then does the old one stop accepting, finish what it has in
// flight and exit. The sockets never close in between, so the kernel
// queues every connection that arrives meanwhile for whichever process
// accepts it.
//
// Two things are shared by the processes for a moment and handed over in
// order, over a second pipe from the old process to the new: the UDP
// socket, which two QUIC servers cannot both read (a packet read by the
// process that does not hold its connection is lost to it), is read by the
// new process only once the old one says it reads it no more
// (PacketsReleased; the gateway's old process says so as it hands over,
// and has its packets passed on by the new one from then on, package
// cidroute, over a relay handed over with the sockets, Inherit); and the
// folders that one process at a time may hold (the embedded analytics
// store's, the journal's) are opened by the new process only once the old
// one has closed them and the pipe with them (PredecessorDone), which the
// kernel also does when the old process dies.
//
// Written here rather than taken from tableflip, whose design it follows:
// tableflip allows one Upgrader per process (the gateway's in-process tests
// start many), starts os.Args[0] rather than the executable's path, keys
// sockets by address rather than by the config field that names them, and
// has no way for the new process to say why it failed.
//
// It also speaks systemd's readiness protocol (sd_notify): a process says
// READY=1 with its MAINPID once it serves, so that systemd follows the new
// process after an upgrade (NotifyAccess=all), and STOPPING=1 when it stops.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// EnvVar is the environment variable that tells a process started by Start
// which file descriptors it inherited: "ready=3,gone=4,server.listen=5,...".
// ready is the pipe to say it is ready (or why it failed); gone is the pipe
// on which the old process says it released its UDP sockets and, by
// closing it, that it is done; every other name is a socket's.
const EnvVar = "LINKGATE_UPGRADE_FDS"

// NotifyEnvVar is systemd's: the datagram socket that readiness is said
// on. Empty or unset: not run by systemd with Type=notify.
const NotifyEnvVar = "NOTIFY_SOCKET"

// Command is what Start runs: the binary at its path (os.Executable, so
// that a new release put there is what runs), with the process's own
// arguments and environment.
type Command struct {
	Path string
	Args []string // os.Args: Args[0] is the program's name
	Env  []string // without EnvVar, which Start sets
	// Stdout and Stderr are the new process's, the old one's by default, so
	// that its log lines go where the old one's went.
	Stdout, Stderr *os.File
}

// Process is this process's side of upgrades: what it inherited from the
// process it replaces, if any, and how it starts its own successor.
// Create it with New, once per process that serves. It is safe for
// concurrent use.
type Process struct {
	cmd    Command
	notify string // NOTIFY_SOCKET
	pid    int

	mu        sync.Mutex
	files     map[string]*os.File // inherited sockets not bound yet, by name
	readyPipe *os.File            // to the predecessor; nil once said, or without one
	starting  bool                // Start runs

	inherited    bool
	takesPackets bool          // TakesPackets was called
	released     chan struct{} // closed once the predecessor reads its UDP sockets no more
	done         chan struct{} // closed once the predecessor is done (or at once without one)
}

// New returns the Process for this process: getenv(EnvVar) names what it
// inherited, getenv(NotifyEnvVar) where systemd listens. It fails when
// EnvVar is set but does not name a ready and a gone pipe and sockets on
// valid descriptors: the process must then not start, and its caller
// should say why on standard error (the old process keeps serving when it
// exits).
func New(cmd Command, getenv func(string) string) (*Process, error) {
	p := &Process{cmd: cmd, notify: getenv(NotifyEnvVar), pid: os.Getpid(),
		files: map[string]*os.File{}, released: make(chan struct{}), done: make(chan struct{})}
	spec := getenv(EnvVar)
	if spec == "" {
		close(p.released)
		close(p.done)
		return p, nil
	}
	fds, err := parseFDs(spec)
	if err != nil {
		return nil, err
	}
	p.inherited = true
	for name, fd := range fds {
		// Inherited descriptors are not close-on-exec: a successor of this
		// process must get only those Start gives it.
		syscall.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), name)
		switch name {
		case "ready":
			p.readyPipe = f
		case "gone":
			go p.watch(f)
		default:
			p.files[name] = f
		}
	}
	return p, nil
}

// parseFDs parses EnvVar's value.
func parseFDs(spec string) (map[string]int, error) {
	fds := map[string]int{}
	seen := map[int]bool{}
	for _, item := range strings.Split(spec, ",") {
		name, num, ok := strings.Cut(item, "=")
		fd, err := strconv.Atoi(num)
		if !ok || name == "" || err != nil || fd < 3 || fd > 1<<16 || seen[fd] || fds[name] != 0 {
			return nil, fmt.Errorf("upgrade: %s: %q is not name=fd with a descriptor above 2 given once", EnvVar, item)
		}
		fds[name], seen[fd] = fd, true
	}
	if fds["ready"] == 0 || fds["gone"] == 0 {
		return nil, fmt.Errorf("upgrade: %s: %q names no ready and gone pipes", EnvVar, spec)
	}
	return fds, nil
}

// watch reads the gone pipe: a byte says the predecessor released its UDP
// sockets, the end of the pipe that it is done (it closed it, or exited).
func (p *Process) watch(f *os.File) {
	defer f.Close()
	var b [1]byte
	relOnce := sync.OnceFunc(func() { close(p.released) })
	for {
		if _, err := f.Read(b[:]); err != nil {
			relOnce()
			close(p.done)
			return
		}
		relOnce()
	}
}

// Inherited reports whether this process was started by an upgrade.
func (p *Process) Inherited() bool { return p.inherited }

// TakesPackets says, with Ready, that this process passes the one it
// replaces that one's QUIC packets (package cidroute): that one may then
// stop reading its UDP socket at once, rather than once it is done with
// its connections. Call it before Ready.
func (p *Process) TakesPackets() {
	p.mu.Lock()
	p.takesPackets = true
	p.mu.Unlock()
}

// PacketsReleased is closed once the process this one replaces reads its
// UDP sockets no more (at once when there is none).
func (p *Process) PacketsReleased() <-chan struct{} { return p.released }

// PredecessorDone is closed once the process this one replaces is done:
// it closed what one process at a time may hold, or exited (at once when
// there is none).
func (p *Process) PredecessorDone() <-chan struct{} { return p.done }

// Listen returns a TCP listener for the config field name at addr: the
// inherited socket of that name when its address is addr's (a port 0
// takes the inherited socket's port), else a new one.
func (p *Process) Listen(name, addr string) (net.Listener, error) {
	if f := p.take(name, addr); f != nil {
		defer f.Close() // FileListener holds a copy
		l, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("upgrade: inherited socket %s: %w", name, err)
		}
		return l, nil
	}
	return net.Listen("tcp", addr)
}

// ListenPacket is Listen for a UDP socket. A socket it inherited is read,
// by QUIC, only once PacketsReleased is closed.
func (p *Process) ListenPacket(name, addr string) (net.PacketConn, error) {
	if f := p.take(name, addr); f != nil {
		defer f.Close()
		c, err := net.FilePacketConn(f)
		if err != nil {
			return nil, fmt.Errorf("upgrade: inherited socket %s: %w", name, err)
		}
		return c, nil
	}
	return net.ListenPacket("udp", addr)
}

// Inherit returns the inherited file of name that is no listening socket
// (the relay of package cidroute), and forgets it; nil when there is
// none. The caller closes it.
func (p *Process) Inherit(name string) *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.files[name]
	delete(p.files, name)
	return f
}

// take returns the inherited socket of name if it is bound where addr
// says, and forgets it; nil otherwise (it is closed by Ready).
func (p *Process) take(name, addr string) *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.files[name]
	if f == nil {
		return nil
	}
	sa, err := syscall.Getsockname(int(f.Fd()))
	if err != nil || !sameAddr(sa, addr) {
		return nil
	}
	delete(p.files, name)
	return f
}

// sameAddr reports whether a socket bound at sa is what a listener at addr
// ("host:port", the host a name or empty) would bind: the same port, or
// any for port 0, and the same address, or both unspecified (Go binds
// "0.0.0.0:443" and ":443" as the dual-stack [::]:443).
func sameAddr(sa syscall.Sockaddr, addr string) bool {
	var got netip.AddrPort
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		got = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *syscall.SockaddrInet6:
		got = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	default:
		return false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if n, err := strconv.Atoi(port); err != nil || n != 0 && n != int(got.Port()) {
		return false
	}
	if host == "" {
		return got.Addr().IsUnspecified()
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.Unmap() == got.Addr().Unmap() || ip.IsUnspecified() && got.Addr().IsUnspecified() {
			return true
		}
	}
	return false
}

// Ready says that this process serves: to the process it replaces, if any,
// which then stops accepting, and to systemd (READY=1 and MAINPID, so that
// systemd follows this process once the old one exits). It closes the
// inherited sockets that no listener took (a listener moved elsewhere).
func (p *Process) Ready() error {
	p.mu.Lock()
	for name, f := range p.files {
		f.Close()
		delete(p.files, name)
	}
	pipe := p.readyPipe
	p.readyPipe = nil
	word := readyWord
	if p.takesPackets {
		word = readyTakingPackets
	}
	p.mu.Unlock()
	var errs []error
	if pipe != nil {
		_, err := io.WriteString(pipe, word)
		errs = append(errs, err, pipe.Close())
	}
	errs = append(errs, p.Notify(fmt.Sprintf("READY=1\nMAINPID=%d", p.pid)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("upgrade: saying ready: %w", err)
	}
	return nil
}

// Fail tells the process this one was to replace why it stops before it
// was ready; nothing without one, or once Ready was said.
func (p *Process) Fail(why error) {
	p.mu.Lock()
	pipe := p.readyPipe
	p.readyPipe = nil
	p.mu.Unlock()
	if pipe != nil {
		io.WriteString(pipe, why.Error())
		pipe.Close()
	}
}

// readyWord is what a new process writes on the ready pipe once it serves,
// readyTakingPackets when it also said TakesPackets (which only a
// predecessor that handed over a relay hears, so that one of an earlier
// version, which knows readyWord alone, never does); anything else is why
// it failed.
const (
	readyWord          = "ready\n"
	readyTakingPackets = "ready, taking packets\n"
)

// Notify sends state to systemd's notify socket (sd_notify(3)): nothing
// when the process was not started with one.
func (p *Process) Notify(state string) error {
	if p.notify == "" {
		return nil
	}
	name := p.notify
	if name[0] == '@' {
		name = "\x00" + name[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("upgrade: %s: %w", NotifyEnvVar, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("upgrade: %s: %w", NotifyEnvVar, err)
	}
	return nil
}
