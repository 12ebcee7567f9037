package gateway_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/gateway"
)

// machineAddr returns an address of one of this machine's interfaces that
// is not a loopback or link-local one, "" when it has none.
func machineAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err == nil && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() && p.Addr().Is4() {
			return p.Addr().String()
		}
	}
	return ""
}

// TestCheckConfigRefusesSelfTargets: an upstream or route target that is
// one of the gateway's own listeners, in any spelling that reaches it (the
// address, localhost, the loopback's other spellings, 0.0.0.0, the
// machine's own address or name for a listener on every interface, the
// default port of the scheme), is refused by the compile step, naming the
// target's field and the listener's; a target on another port, or on an
// address a listener of one address does not hold, is not.
func TestCheckConfigRefusesSelfTargets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key, _ := edgetest.NewCA(t).WritePair(t, dir, "sho.rt")
	listeners := func(server, httpL, internal, admin string) string {
		s := fmt.Sprintf("server:\n  listen: %q\n  internal_listen: %q\n", server, internal)
		if httpL != "" {
			s += fmt.Sprintf("  http_listen: %q\n  tls: {cert_file: %s, key_file: %s}\n", httpL, cert, key)
		}
		return s + fmt.Sprintf("admin:\n  listen: %q\n", admin)
	}
	loopback := listeners("127.0.0.1:18080", "", "127.0.0.1:18082", "127.0.0.1:18090")
	every := listeners(":18080", "", "0.0.0.0:18082", "[::]:18090")
	type row struct {
		name, listen, target, field, listener string // field "": accepted
	}
	rows := []row{
		{"the address", loopback, "http://127.0.0.1:18080", "upstream.targets[1]", "server.listen"},
		{"localhost", loopback, "http://localhost:18080", "upstream.targets[1]", "server.listen"},
		{"0.0.0.0", loopback, "http://0.0.0.0:18080", "upstream.targets[1]", "server.listen"},
		{"IPv4-mapped", loopback, "http://[::ffff:127.0.0.1]:18080", "upstream.targets[1]", "server.listen"},
		{"https to the listener", loopback, "https://127.0.0.1:18080", "upstream.targets[1]", "server.listen"},
		{"the internal listener", loopback, "http://localhost:18082", "upstream.targets[1]", "server.internal_listen"},
		{"the admin listener", loopback, "http://127.0.0.1:18090", "upstream.targets[1]", "admin.listen"},
		{"a route's target", loopback, "route:http://127.0.0.1:18090", "routes[0].upstream.targets[0]", "admin.listen"},
		{"every interface, loopback", every, "http://127.0.0.1:18080", "upstream.targets[1]", "server.listen"},
		{"every interface, another loopback address", every, "http://127.0.0.2:18082", "upstream.targets[1]", "server.internal_listen"},
		{"every interface, IPv6 loopback", every, "http://[::1]:18090", "upstream.targets[1]", "admin.listen"},
		{"every interface, ::", every, "http://[::]:18080", "upstream.targets[1]", "server.listen"},
		{"the default port", listeners("127.0.0.1:80", "", "", "127.0.0.1:0"), "http://localhost", "upstream.targets[1]", "server.listen"},
		{"the HTTP listener beside TLS", listeners("127.0.0.1:18443", "127.0.0.1:18081", "", "127.0.0.1:0"), "http://localhost:18081", "upstream.targets[1]", "server.http_listen"},
		{"another port", loopback, "http://127.0.0.1:18081", "", ""},
		{"an address the listener does not hold", loopback, "http://127.0.0.2:18080", "", ""},
		{"a name that does not resolve", loopback, "http://nowhere.invalid:18080", "", ""},
	}
	if name, err := os.Hostname(); err == nil {
		rows = append(rows, row{"every interface, the machine's name", every, "http://" + name + ":18080", "upstream.targets[1]", "server.listen"})
	}
	if a := machineAddr(t); a != "" {
		rows = append(rows,
			row{"every interface, the machine's address", every, "http://" + a + ":18080", "upstream.targets[1]", "server.listen"},
			row{"the machine's address, listener on loopback", loopback, "http://" + a + ":18080", "", ""})
	} else {
		t.Log("no non-loopback address on this machine: its rows SKIPPED")
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cfg := r.listen + "upstream:\n  targets: [http://127.0.0.1:9, \"" + r.target + "\"]\nanalytics: {enabled: false}\n"
			if rt, ok := strings.CutPrefix(r.target, "route:"); ok {
				cfg = r.listen + "upstream:\n  targets: [http://127.0.0.1:9]\nroutes:\n  - hosts: [a.example]\n    upstream: {targets: [\"" + rt + "\"]}\nanalytics: {enabled: false}\n"
			}
			c, err := config.Parse([]byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			_, err = gateway.Compile(c, getenv)
			if r.field == "" {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != r.field || ce.Line == 0 || !strings.Contains(err.Error(), "own "+r.listener) {
				t.Errorf("got %v; want an error at %s, with its line, naming %s", err, r.field, r.listener)
			}
		})
	}
}
