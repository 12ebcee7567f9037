package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Socket is a listening socket to hand over: the config field that names
// it ("server.listen") and a descriptor of it. Make it with SocketOf, and
// close it once Start returned.
type Socket struct {
	Name string
	File *os.File
}

// SocketOf returns the Socket of c (a *net.TCPListener or *net.UDPConn)
// under name: a copy of its descriptor. Not (*net.TCPListener).File, whose
// descriptor is turned to blocking mode as it is passed to a new process,
// and with it the listener's own (they share the open file's flags): its
// Accept would then block a thread that Close cannot wake.
func SocketOf(name string, c syscall.Conn) (Socket, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Socket{}, fmt.Errorf("upgrade: %s: %w", name, err)
	}
	var fd int
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return Socket{}, fmt.Errorf("upgrade: %s: %w", name, err)
	}
	if derr != nil {
		return Socket{}, fmt.Errorf("upgrade: %s: dup: %w", name, derr)
	}
	return Socket{Name: name, File: os.NewFile(uintptr(fd), name)}, nil
}

// Successor is the process Start started, once it said it serves. Until
// Close, this process must not exit without the kernel closing the pipe
// for it, which it does.
type Successor struct {
	Pid int
	// TakesPackets: it passes this process its QUIC packets (it said
	// TakesPackets), so this one may release the UDP socket at once.
	TakesPackets bool
	gone         *os.File
}

// ReleasePackets tells the successor that this process reads its UDP
// sockets no more: it starts reading them.
func (s *Successor) ReleasePackets() error {
	_, err := s.gone.Write([]byte{'u'})
	return err
}

// Close tells the successor that this process is done: it holds nothing
// one process at a time may hold (it closed the embedded store and the
// journal). Exiting says the same.
func (s *Successor) Close() error { return s.gone.Close() }

// Start starts the binary of p's Command, with sockets, and waits until it
// says it serves, says why it failed, exits, or timeout passes (it is then
// killed), or ctx is done (the same). Only a Successor that serves is
// returned: on any failure this process keeps its sockets and serves on,
// and the error says why, in the new process's own words when it gave
// them. Start refuses while the process this one replaced is not done
// yet, while another Start runs, and in a process of PID 1 (a container's
// first process: the container would end with it).
func (p *Process) Start(ctx context.Context, sockets []Socket, timeout time.Duration) (*Successor, error) {
	if err := p.claim(); err != nil {
		return nil, err
	}
	defer func() {
		p.mu.Lock()
		p.starting = false
		p.mu.Unlock()
	}()
	cmd, readyR, goneW, err := p.spawn(sockets)
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	said := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(readyR, 4096))
		said <- string(b)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	t := time.NewTimer(timeout)
	defer t.Stop()
	pid := cmd.Process.Pid
	var why string
	select {
	case msg := <-said:
		if msg == readyWord || msg == readyTakingPackets {
			return &Successor{Pid: pid, TakesPackets: msg == readyTakingPackets, gone: goneW}, nil
		}
		why = strings.TrimSpace(msg)
		if why == "" {
			why = "it ended before it said it was ready"
		}
	case <-t.C:
		why = fmt.Sprintf("it did not say it was ready within %v, so it was killed", timeout)
		cmd.Process.Kill()
	case <-ctx.Done():
		why = "the upgrade was called off, so it was killed"
		cmd.Process.Kill()
	}
	goneW.Close()
	var status error
	select {
	case status = <-exited: // it said why and exited, or ended without a word
	case <-time.After(exitGrace):
		// A failed process must not go on holding the sockets.
		cmd.Process.Kill()
		status = <-exited
	}
	return nil, fmt.Errorf("upgrade: the new process (pid %d, %s) failed: %s (%v)", pid, p.cmd.Path, why, status)
}

// claim refuses a Start while the process this one replaced is not
// done, in PID 1, or while another Start runs; otherwise it marks this
// one as under way.
func (p *Process) claim() error {
	select {
	case <-p.done:
	default:
		return errors.New("upgrade: the process this one replaced is not done yet")
	}
	if p.pid == 1 {
		return errors.New("upgrade: this process is PID 1 (a container's first process), and its container would end with it: start a new container instead")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starting {
		return errors.New("upgrade: an upgrade is already under way")
	}
	p.starting = true
	return nil
}

// spawn starts the new process with sockets and the two pipes it talks
// through: it writes readyR (it serves, or why it failed); goneW closes
// when this process is gone or gives up on it.
func (p *Process) spawn(sockets []Socket) (cmd *exec.Cmd, readyR, goneW *os.File, err error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("upgrade: %w", err)
	}
	goneR, goneW, err := os.Pipe()
	if err != nil {
		readyR.Close()
		readyW.Close()
		return nil, nil, nil, fmt.Errorf("upgrade: %w", err)
	}
	cmd, err = p.command(readyW, goneR, sockets)
	if err == nil {
		err = cmd.Start()
	}
	// The new process holds its copies of these now.
	readyW.Close()
	goneR.Close()
	if err != nil {
		readyR.Close()
		goneW.Close()
		return nil, nil, nil, fmt.Errorf("upgrade: starting %s: %w", p.cmd.Path, err)
	}
	return cmd, readyR, goneW, nil
}

// exitGrace is how long a new process that said why it failed has to exit
// before it is killed.
const exitGrace = 5 * time.Second

// command is the new process: p's Command with the pipes and the sockets
// as its descriptors 3 and up, named in EnvVar.
func (p *Process) command(ready, gone *os.File, sockets []Socket) (*exec.Cmd, error) {
	files := []*os.File{ready, gone}
	names := []string{"ready=3", "gone=4"}
	for _, s := range sockets {
		if s.Name == "ready" || s.Name == "gone" || strings.ContainsAny(s.Name, ",=") {
			return nil, fmt.Errorf("socket name %q", s.Name)
		}
		names = append(names, fmt.Sprintf("%s=%d", s.Name, 3+len(files)))
		files = append(files, s.File)
	}
	env := make([]string, 0, len(p.cmd.Env)+1)
	for _, kv := range p.cmd.Env {
		if !strings.HasPrefix(kv, EnvVar+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, EnvVar+"="+strings.Join(names, ","))
	cmd := &exec.Cmd{Path: p.cmd.Path, Args: p.cmd.Args, Env: env, ExtraFiles: files,
		Stdout: p.cmd.Stdout, Stderr: p.cmd.Stderr}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	return cmd, nil
}
