package edge

import (
	"time"

	"github.com/linkgate/linkgate/limit"
)

// Config is the server.tls section: how the client listener terminates
// TLS. The zero value (no certificate files, no ACME names, no ask) leaves
// the listener on plain HTTP, as before TLS existed.
type Config struct {
	// CertFile and KeyFile are a static certificate chain and its key
	// (PEM). They are read again when either file changes.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// HandshakeTimeout bounds a TLS handshake, an on-demand issuance
	// included: a client that has not finished it by then is cut off.
	HandshakeTimeout time.Duration  `yaml:"handshake_timeout"`
	ACME             ACME           `yaml:"acme"`
	OnDemand         OnDemand       `yaml:"on_demand"`
	Storage          Storage        `yaml:"storage"`
	SessionTickets   SessionTickets `yaml:"session_tickets"`
	// HSTS maps host names (or *.suffix patterns) to the
	// Strict-Transport-Security header their TLS responses carry, as RFC
	// 6797 writes it: "max-age=31536000; includeSubDomains". None by
	// default.
	HSTS map[string]string `yaml:"hsts"`
}

// ACME is where automatic certificates come from.
type ACME struct {
	// CA is the ACME directory URL.
	CA string `yaml:"ca"`
	// CARoot is a PEM file of roots trusted for the CA's own HTTPS, for
	// test CAs; "": the system's roots.
	CARoot string `yaml:"ca_root"`
	// Email is the ACME account's contact; "": an account without one.
	Email string `yaml:"email"`
	// Domains are names whose certificates are obtained at start and
	// renewed in the background, without asking anyone.
	Domains []string `yaml:"domains"`
	// Challenges are the ACME challenges offered: tls-alpn-01 (answered
	// on server.listen) and http-01 (answered on server.http_listen).
	Challenges []string `yaml:"challenges"`
}

// OnDemand obtains certificates at the first handshake for names the
// tiny-URL service approves (branded short domains).
type OnDemand struct {
	// Ask is a URL asked GET <ask>?domain=<name> before any certificate
	// is obtained for a name not in Domains: 200 allows it, anything else
	// denies it. "": no on-demand certificates.
	Ask string `yaml:"ask"`
	// AskTimeout bounds one ask.
	AskTimeout time.Duration `yaml:"ask_timeout"`
	// AllowTTL and DenyTTL are how long an answer of the ask endpoint is
	// kept.
	AllowTTL time.Duration `yaml:"allow_ttl"`
	DenyTTL  time.Duration `yaml:"deny_ttl"`
	// HandshakesPerClient limits, per client address (IPv6 by
	// identity.ipv6_prefix), the handshakes for names whose answer is not
	// known yet; one over them fails without an ask.
	HandshakesPerClient []limit.Limit `yaml:"handshakes_per_client"`
	// OrdersPerHour caps the new certificates this gateway orders in any
	// hour (renewals are not counted).
	OrdersPerHour int `yaml:"orders_per_hour"`
	// OrdersPerHourPerClient and OrdersPerHourPerDomain cap, within
	// OrdersPerHour, the new certificates ordered in any hour for the
	// handshakes of one client address (IPv6 by identity.ipv6_prefix),
	// and for the names of one registered domain (the public suffix and
	// one label: a.b.example.co.uk is example.co.uk's), so that strangers
	// asking for names the ask endpoint allows cannot spend the gateway's
	// orders for the hour.
	OrdersPerHourPerClient int `yaml:"orders_per_hour_per_client"`
	OrdersPerHourPerDomain int `yaml:"orders_per_hour_per_domain"`
}

// SessionTickets are the keys of the TLS session tickets the listener
// gives clients, with which a returning client resumes its session
// without a full handshake (RFC 8446 section 2.2; RFC 5077 for TLS 1.2).
type SessionTickets struct {
	// SecretEnv names the environment variable holding the secret every
	// ticket key is derived from (32 bytes at least): the gateways of a
	// fleet given the same secret (and the same rotate) resume each
	// other's sessions. "": a secret of the process's own, drawn at start,
	// so that a session resumes only on the gateway that began it.
	SecretEnv string `yaml:"secret_env"`
	// Rotate is how long one key encrypts the new tickets; the next key
	// takes over at the next multiple of Rotate since the Unix epoch.
	Rotate time.Duration `yaml:"rotate"`
	// Lifetime is how long a ticket resumes a session after it was given.
	Lifetime time.Duration `yaml:"lifetime"`
}

// Storage is where certificates, keys and ACME accounts are kept, and
// where a fleet's gateways lock a name while one of them obtains it.
type Storage struct {
	// Path is the folder of the file storage (one machine).
	Path string `yaml:"path"`
	// Cassandra, with hosts, stores them in Cassandra instead (a fleet).
	Cassandra Cassandra `yaml:"cassandra"`
}

// Cassandra is the certificate storage on Cassandra.
type Cassandra struct {
	Hosts             []string      `yaml:"hosts"`
	Keyspace          string        `yaml:"keyspace"`
	Consistency       string        `yaml:"consistency"`
	ReplicationFactor int           `yaml:"replication_factor"`
	Timeout           time.Duration `yaml:"timeout"`
	// LockTTL is how long a lock lives without its holder refreshing it:
	// the wait for a lock whose holder died.
	LockTTL time.Duration `yaml:"lock_ttl"`
}

// Let's Encrypt's production directory, the default CA.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// Challenge names.
const (
	TLSALPN01 = "tls-alpn-01"
	HTTP01    = "http-01"
)

// DefaultConfig returns the values of the fields a file leaves out.
func DefaultConfig() Config {
	return Config{
		HandshakeTimeout: 30 * time.Second,
		ACME: ACME{
			CA:         LetsEncrypt,
			Challenges: []string{TLSALPN01, HTTP01},
		},
		OnDemand: OnDemand{
			AskTimeout:             3 * time.Second,
			AllowTTL:               time.Hour,
			DenyTTL:                10 * time.Minute,
			HandshakesPerClient:    []limit.Limit{{N: 5, Window: time.Minute}, {N: 30, Window: time.Hour}},
			OrdersPerHour:          30,
			OrdersPerHourPerClient: 5,
			OrdersPerHourPerDomain: 5,
		},
		SessionTickets: SessionTickets{Rotate: 12 * time.Hour, Lifetime: 24 * time.Hour},
		Storage: Storage{
			Path: "./data/certs",
			Cassandra: Cassandra{
				Keyspace:          "linkgate",
				Consistency:       "LOCAL_QUORUM",
				ReplicationFactor: 1,
				Timeout:           5 * time.Second,
				LockTTL:           2 * time.Minute,
			},
		},
	}
}

// Enabled reports whether the config terminates TLS: a static
// certificate, ACME names, or on-demand certificates.
func (c Config) Enabled() bool {
	return c.CertFile != "" || c.KeyFile != "" || c.Managed()
}

// managed reports whether certificates are obtained by ACME.
func (a ACME) managed() bool { return len(a.Domains) > 0 }

// Managed reports whether the config obtains certificates by ACME, for
// configured names or on demand.
func (c Config) Managed() bool { return c.ACME.managed() || c.OnDemand.Ask != "" }
