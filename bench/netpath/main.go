// Command netpath joins two network namespaces through a TUN device in
// each and passes every IP packet from one to the other after a fixed
// delay, dropping a share of them at random in each direction: what
// `tc qdisc add ... netem delay D loss P%` does, for kernels built without
// netem (CONFIG_NET_SCH_NETEM, as on the build machine). The devices must
// exist (`ip -n NS tuntap add dev NAME mode tun`); netpath attaches to
// them, prints "ready" and relays until it is killed. For bench/h3loss.sh.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	nsA := flag.String("a", "", "first network namespace (a name under /var/run/netns)")
	nsB := flag.String("b", "", "second network namespace")
	dev := flag.String("dev", "lgt0", "the TUN device's name in both namespaces")
	delay := flag.Duration("delay", 25*time.Millisecond, "added to every packet, each direction (at most 1s)")
	loss := flag.Float64("loss", 0, "percent of packets dropped, each direction (0 to 50)")
	flag.Parse()
	if *nsA == "" || *nsB == "" || *delay < 0 || *delay > time.Second || *loss < 0 || *loss > 50 {
		fmt.Fprintln(os.Stderr, "netpath: -a NS -b NS, -delay 0 to 1s, -loss 0 to 50")
		os.Exit(2)
	}
	a, err := openTUN(*nsA, *dev)
	if err == nil {
		var b *os.File
		if b, err = openTUN(*nsB, *dev); err == nil {
			fmt.Println("ready")
			go relay(a, b, *delay, *loss/100)
			relay(b, a, *delay, *loss/100)
		}
	}
	fmt.Fprintln(os.Stderr, "netpath:", err)
	os.Exit(1)
}

// openTUN attaches to the TUN device dev of the namespace ns. A device is
// looked up in the namespace of the thread that attaches, so a thread of
// its own enters ns and is dropped afterwards (locked, it ends with its
// goroutine instead of going back to the pool in the wrong namespace).
func openTUN(ns, dev string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		f, err := func() (*os.File, error) {
			nsf, err := os.Open("/var/run/netns/" + ns)
			if err != nil {
				return nil, err
			}
			defer nsf.Close()
			if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("enter %s: %w", ns, err)
			}
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				return nil, err
			}
			ifr, err := unix.NewIfreq(dev)
			if err == nil {
				ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
				err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
			}
			if err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("attach %s in %s: %w", dev, ns, err)
			}
			return os.NewFile(uintptr(fd), ns+"/"+dev), nil
		}()
		done <- result{f, err}
	}()
	r := <-done
	return r.f, r.err
}

// relay reads packets from src and writes each to dst delay after it was
// read, unless it is lost. The delay is the same for all, so a queue in
// arrival order is also one in departure order, as netem's without jitter.
func relay(src, dst *os.File, delay time.Duration, loss float64) {
	type packet struct {
		due  time.Time
		data []byte
	}
	queue := make(chan packet, 4096)
	go func() {
		for p := range queue {
			time.Sleep(time.Until(p.due))
			dst.Write(p.data) // a refused packet is a lost one, as on a wire
		}
	}()
	buf := make([]byte, 65536)
	for {
		n, err := src.Read(buf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "netpath:", err)
			os.Exit(1)
		}
		if rand.Float64() < loss {
			continue
		}
		select {
		case queue <- packet{time.Now().Add(delay), append([]byte(nil), buf[:n]...)}:
		default: // a full queue drops, as a full qdisc does
		}
	}
}
