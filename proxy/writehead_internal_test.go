package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/forwarded"
)

// TestWriteHeadAgreesWithTheHeaderMap: the request head writeHead writes
// without a header map holds the same fields as the way it was first
// written, and http.Transport's path still is: the client's header cloned,
// the hop-by-hop fields and those Connection lists removed, then
// forwarded.Trust.SetHeaders. Random requests mix every kind of field
// SetHeaders and the hop-by-hop rules treat apart, from trusted and
// untrusted peers, under both underscore policies.
func TestWriteHeadAgreesWithTheHeaderMap(t *testing.T) {
	trust, err := forwarded.Parse([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{
		"Accept", "User-Agent", "X-Foo", "X_Foo", "X-Bar", "Close", "X-User-Id", "X_User_Id", "X-User_Id",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-Ip", "Forwarded", "X-Client-Ip",
		"X-Forwarded-Port", "X-Auth-Request-User", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade",
		"Proxy-Authorization", "Proxy_Authorization", "Proxy-Connection", "Content-Length", "Host",
		"Transfer_Encoding", "X-Request-Id",
	}
	values := map[string][]string{
		"Connection":      {"close", "X-Foo", "keep-alive, X-Bar", "Close", "x-foo , upgrade", "Proxy-Authorization"},
		"Te":              {"trailers", "gzip", "gzip, trailers"},
		"X-Forwarded-For": {"203.0.113.7", "198.51.100.1, 203.0.113.9", "junk"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		r, _ := http.NewRequest(http.MethodGet, "http://h.example/p?q=1", nil)
		r.Host = []string{"h.example", "other.example:8080"}[rng.IntN(2)]
		r.RemoteAddr = []string{"127.0.0.1:5000", "192.0.2.10:5000"}[rng.IntN(2)]
		for range rng.IntN(8) {
			k := names[rng.IntN(len(names))]
			v := fmt.Sprintf("v%d", rng.IntN(3))
			if vs, ok := values[k]; ok {
				v = vs[rng.IntN(len(vs))]
			}
			r.Header[k] = append(r.Header[k], v)
		}
		if rng.IntN(10) == 0 {
			r.Header["X-Forwarded-For"] = nil // send none
		}
		pol := forwarded.NewPolicy([]string{"X-User-ID"}, rng.IntN(2) == 0)

		st := &h1State{}
		if _, err := st.writeHead(r, r.Host, trust, pol); err != nil {
			t.Fatal(err)
		}
		got := headFields(t, string(st.head))
		want := mapFields(r, trust, pol)
		if !slices.Equal(got, want) {
			t.Fatalf("request %d from %s, header %v:\nwriteHead  %q\nheader map %q", i, r.RemoteAddr, r.Header, got, want)
		}
	}
}

// headFields returns the fields of a request head after its Host line,
// sorted.
func headFields(t *testing.T, head string) []string {
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "Host: ") {
		t.Fatalf("head %q: want a request line and Host first", head)
	}
	fields := lines[2:]
	slices.Sort(fields)
	return fields
}

// mapFields is the fields of r's head written from a header map, sorted.
func mapFields(r *http.Request, trust *forwarded.Trust, pol forwarded.Policy) []string {
	out := r.Header.Clone()
	for _, v := range out["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			tok = strings.TrimSpace(tok)
			switch {
			case tok == "", strings.EqualFold(tok, "close"), strings.EqualFold(tok, "keep-alive"), strings.EqualFold(tok, "upgrade"):
			default:
				for k := range out {
					if strings.EqualFold(k, tok) {
						delete(out, k)
					}
				}
			}
		}
	}
	for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host"} {
		delete(out, k)
	}
	trust.SetHeaders(out, r, pol)
	var fields []string
	for k, vv := range out {
		for _, v := range vv {
			fields = append(fields, k+": "+v)
		}
	}
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		fields = append(fields, "Te: trailers")
	}
	if up := upgradeType(r.Header); up != "" {
		fields = append(fields, "Connection: Upgrade", "Upgrade: "+up)
	}
	slices.Sort(fields)
	return fields
}
