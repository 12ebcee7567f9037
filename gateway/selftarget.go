package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"

	"github.com/linkgate/linkgate/config"
)

// checkSelfTargets refuses an upstream or route target that is one of the
// gateway's own listeners (server.listen, server.http_listen,
// server.internal_listen, admin.listen): the gateway would proxy every
// request, and every health check, back to itself (or serve /metrics on
// the public port). A target is one when its port is the listener's and
// its host reaches the listener: the same address, or a name that
// resolves to it; for a listener on every interface (an empty host,
// 0.0.0.0 or ::, which Go binds for both families), any address of this
// machine (loopback, an interface's, or 0.0.0.0 and ::, which a connection
// takes for the loopback). A listener on port 0 has a port no file can
// name. A target whose name does not resolve here is not refused: that it
// is the gateway cannot be known. What the file cannot show (a balancer
// or a DNS name that leads back, a listener a reload keeps while the file
// names another) the run-time check answers: see refuseLoops.
func checkSelfTargets(cfg *config.Config) error {
	own := []struct{ field, addr string }{
		{"server.listen", cfg.Server.Listen}, {"server.http_listen", cfg.Server.HTTPListen},
		{"server.internal_listen", cfg.Server.InternalListen}, {"admin.listen", cfg.Admin.Listen},
	}
	var local []netip.Addr // this machine's addresses, looked up once when needed
	check := func(field string, targets []string) error {
		for i, t := range targets {
			u, err := url.Parse(t)
			if err != nil {
				continue // not reached: proxy.Compile refused it
			}
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			for _, l := range own {
				lhost, lport, err := net.SplitHostPort(l.addr)
				if l.addr == "" || err != nil || lport != port || lport == "0" {
					continue
				}
				if local == nil {
					local = machineAddrs()
				}
				if reaches(u.Hostname(), lhost, local) {
					return fmt.Errorf("%s[%d]: %q is the gateway's own %s (%q): every request, and every health check, would be proxied back to the gateway", field, i, t, l.field, l.addr)
				}
			}
		}
		return nil
	}
	if err := check("upstream.targets", cfg.Upstream.Targets); err != nil {
		return err
	}
	for i, r := range cfg.Routes {
		if err := check(fmt.Sprintf("routes[%d].upstream.targets", i), r.Upstream.Targets); err != nil {
			return err
		}
	}
	return nil
}

// reaches reports whether a connection to target (a host of a URL) would
// reach a listener bound on listen (the host of a listen address), local
// being this machine's addresses.
func reaches(target, listen string, local []netip.Addr) bool {
	at, wild := netip.Addr{}, listen == ""
	if !wild {
		// net.Listen binds a name's first IPv4 address, else its first.
		addrs := resolve(listen)
		if i := slices.IndexFunc(addrs, netip.Addr.Is4); i >= 0 {
			at = addrs[i]
		} else if len(addrs) > 0 {
			at = addrs[0]
		}
		wild = at.IsUnspecified()
	}
	for _, a := range resolve(target) {
		switch {
		case a.IsUnspecified() && a.Is4():
			a = netip.AddrFrom4([4]byte{127, 0, 0, 1}) // connecting to 0.0.0.0 is connecting to the loopback
		case a.IsUnspecified():
			a = netip.IPv6Loopback()
		}
		if a == at || wild && (a.IsLoopback() || slices.Contains(local, a)) {
			return true
		}
	}
	return false
}

// resolve returns the addresses host names, unmapped: itself when it is an
// address, else what the resolver says (nothing when it cannot say within
// listenProbeTimeout).
func resolve(host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap().WithZone("")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), listenProbeTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap().WithZone("")
	}
	return addrs
}

// machineAddrs returns the addresses of this machine's interfaces (an
// empty, non-nil list when they cannot be read).
func machineAddrs() []netip.Addr {
	out := []netip.Addr{}
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out
}
