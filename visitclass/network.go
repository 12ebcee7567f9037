package visitclass

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/oschwald/maxminddb-golang/v2"

	"github.com/linkgate/linkgate/internal/mmdb"
)

// netKind is what the classes make of a client's network.
type netKind uint8

const (
	netNone    netKind = iota
	netScanner         // an e-mail security vendor's
	netCloud           // a cloud's or hoster's
)

// DefaultScannerNetworks are the networks of the e-mail security products
// that open every link of every mail they filter, by the organization
// name of their ASN (matched as a substring, ASCII case ignored): the
// vendors whose link scanning mail senders report inflating clicks
// (resend-node#901, Mautic#16263).
var DefaultScannerNetworks = []string{"proofpoint", "mimecast", "barracuda"}

// DefaultCloudNetworks are the networks of the large clouds and hosters,
// by ASN, as their operators registered them: Amazon (AS16509, AS14618),
// Microsoft (AS8075, where Safe Links runs), Google (AS15169) and Google
// Cloud (AS396982), DigitalOcean (AS14061), Hetzner (AS24940), OVH
// (AS16276), Linode (AS63949), Oracle (AS31898), Vultr (AS20473). Not the
// CDNs whose networks also carry people (iCloud Private Relay leaves
// through Akamai, Cloudflare and Fastly), nor Google Fiber (AS16591).
var DefaultCloudNetworks = []string{"AS16509", "AS14618", "AS8075", "AS15169", "AS396982", "AS14061",
	"AS24940", "AS16276", "AS63949", "AS31898", "AS20473"}

// Networks answers which networks clients are in, from a MaxMind-format
// ASN database (.mmdb): MaxMind's GeoLite2-ASN or GeoIP2-ISP, or an ASN
// database of the ip-location-db project (its asn .mmdb files, served by
// the npm registry in @ip-location-db/* packages); both name a network's
// autonomous_system_number and autonomous_system_organization. It is
// immutable and safe for concurrent use. Use OpenNetworks.
//
// Opening reads every record once and keeps the kind of those on the
// lists, by their offset in the database: a lookup then walks the tree and
// reads one map, without decoding or allocating.
type Networks struct {
	db    *maxminddb.Reader
	path  string
	kinds map[uintptr]netKind
	// Scanner and Cloud count the database's records on each list.
	scanner, cloud int
}

// OpenNetworks reads the ASN database at path whole into memory and marks
// the records of the scanner and cloud lists: entries "AS1234" name an
// autonomous system by number, any other an organization name substring
// (ASCII case ignored). A record on both lists is a scanner's.
func OpenNetworks(path string, scanner, cloud []string) (*Networks, error) {
	db, err := mmdb.Load(path)
	if err != nil {
		return nil, fmt.Errorf("asn: %w", err)
	}
	sl, err := parseNetworkList(scanner)
	if err != nil {
		return nil, fmt.Errorf("asn: scanner networks: %w", err)
	}
	cl, err := parseNetworkList(cloud)
	if err != nil {
		return nil, fmt.Errorf("asn: cloud networks: %w", err)
	}
	n := &Networks{db: db, path: path, kinds: map[uintptr]netKind{}}
	seen := map[uintptr]bool{}
	numbered := false
	for res := range db.Networks() {
		if err := res.Err(); err != nil {
			return nil, fmt.Errorf("asn: %s: %w", path, err)
		}
		off := res.Offset()
		if seen[off] {
			continue
		}
		seen[off] = true
		var rec asnRecord
		if err := res.Decode(&rec); err != nil {
			return nil, fmt.Errorf("asn: %s: %w", path, err)
		}
		numbered = numbered || rec.Number != 0
		switch {
		case sl.has(rec):
			n.kinds[off] = netScanner
			n.scanner++
		case cl.has(rec):
			n.kinds[off] = netCloud
			n.cloud++
		}
	}
	if !numbered {
		return nil, fmt.Errorf("asn: %s (%s): no record names an autonomous_system_number: not an ASN database", path, db.Metadata.DatabaseType)
	}
	return n, nil
}

// asnRecord is what an ASN database holds of a network.
type asnRecord struct {
	Number uint32 `maxminddb:"autonomous_system_number"`
	Org    string `maxminddb:"autonomous_system_organization"`
}

// networkList is a scanner or cloud list, parsed.
type networkList struct {
	numbers map[uint32]bool
	names   []string // lower case
}

func parseNetworkList(entries []string) (networkList, error) {
	l := networkList{numbers: map[uint32]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if len(e) > 2 && strings.EqualFold(e[:2], "AS") && e[2] >= '0' && e[2] <= '9' {
			v, err := strconv.ParseUint(e[2:], 10, 32)
			if err != nil {
				return l, fmt.Errorf("%q is not an AS number", e)
			}
			l.numbers[uint32(v)] = true
			continue
		}
		if e == "" {
			return l, fmt.Errorf("an empty entry")
		}
		l.names = append(l.names, strings.ToLower(e))
	}
	return l, nil
}

func (l networkList) has(r asnRecord) bool {
	if l.numbers[r.Number] {
		return true
	}
	if len(l.names) == 0 || r.Org == "" {
		return false
	}
	org := strings.ToLower(r.Org)
	for _, name := range l.names {
		if strings.Contains(org, name) {
			return true
		}
	}
	return false
}

// kind returns the kind of a's network.
func (n *Networks) kind(a netip.Addr) netKind {
	res := n.db.Lookup(a.Unmap())
	if !res.Found() {
		return netNone
	}
	return n.kinds[res.Offset()]
}

// Path returns the file the database was read from.
func (n *Networks) Path() string { return n.path }

// Type returns the database's type as its metadata names it
// ("GeoLite2-ASN").
func (n *Networks) Type() string { return n.db.Metadata.DatabaseType }

// Listed returns how many of the database's records are on the scanner
// and on the cloud list.
func (n *Networks) Listed() (scanner, cloud int) { return n.scanner, n.cloud }
