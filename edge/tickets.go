package edge

import (
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Session tickets: the keys are derived, not stored. Key number n (the
// n-th period of Rotate since the Unix epoch) is HKDF-SHA256 of the
// secret with n and Rotate as its info, so every gateway given the same
// secret and Rotate computes the same keys at the same time, with nothing
// shared at run time but the clock: no store to be up at handshake time,
// no key to distribute or delete. The listener encrypts with the key of
// the current period and decrypts with it, the next one (a gateway whose
// clock runs ahead) and those of the periods a ticket of Lifetime can
// reach back to. A ticket carries the time it was given (in the
// SessionState's Extra), and one older than Lifetime makes a full
// handshake.
//
// What the secret protects: a TLS 1.3 resumption makes a new ECDHE
// exchange (Go's server takes psk_dhe_ke only), so a leaked secret
// decrypts no recorded TLS 1.3 traffic, but it lets its holder resume
// sessions as any server of the fleet and decrypt the recorded TLS 1.2
// sessions whose tickets it derives keys for. Changing the secret (a
// reload) ends every ticket given with the old one.

// MinTicketSecretBytes is the least a session_tickets.secret_env secret
// holds.
const MinTicketSecretBytes = 32

// ticketPlan is a session_tickets section compiled.
type ticketPlan struct {
	secret   []byte // nil: the process's own
	rotate   time.Duration
	lifetime time.Duration
}

// compileTickets reads the secret of s from getenv.
func compileTickets(s SessionTickets, getenv func(string) string) (*ticketPlan, error) {
	const f = "server.tls.session_tickets."
	p := &ticketPlan{rotate: s.Rotate, lifetime: s.Lifetime}
	if s.SecretEnv == "" {
		return p, nil
	}
	var v string
	if getenv != nil {
		v = getenv(s.SecretEnv)
	}
	switch {
	case v == "":
		return nil, fmt.Errorf(f+"secret_env: the environment variable %s is not set or empty; set it to the fleet's secret (openssl rand -base64 48 makes one), or remove secret_env for keys of this gateway's own", s.SecretEnv)
	case len(v) < MinTicketSecretBytes:
		return nil, fmt.Errorf(f+"secret_env: the secret in %s is %d bytes, fewer than %d (openssl rand -base64 48 makes one)", s.SecretEnv, len(v), MinTicketSecretBytes)
	}
	p.secret = []byte(v)
	return p, nil
}

// ticketKey derives the key of period n.
func ticketKey(secret []byte, rotate time.Duration, n int64) [32]byte {
	info := "linkgate session ticket key " + strconv.FormatInt(int64(rotate/time.Second), 10) + "s " + strconv.FormatInt(n, 10)
	b, err := hkdf.Key(sha256.New, secret, nil, info, 32)
	if err != nil {
		panic(err) // 32 bytes of SHA-256 cannot fail
	}
	return [32]byte(b)
}

// ticketKeys are the keys of the period of now: the current first (it
// encrypts), the next, then the earlier ones a ticket of lifetime needs.
func ticketKeys(secret []byte, rotate, lifetime time.Duration, now time.Time) [][32]byte {
	n := now.Unix() / int64(rotate/time.Second)
	back := int64((lifetime + rotate - 1) / rotate)
	keys := make([][32]byte, 0, back+2)
	keys = append(keys, ticketKey(secret, rotate, n), ticketKey(secret, rotate, n+1))
	for i := int64(1); i <= back; i++ {
		keys = append(keys, ticketKey(secret, rotate, n-i))
	}
	return keys
}

// ticketer keeps the ticket keys of one tls.Config current: it sets them
// anew when the period turns or a reload changes the section, checked at
// each ticket given or taken (a handshake's cost is a thousand times the
// check's).
type ticketer struct {
	e     *Edge
	cfg   *tls.Config
	mu    sync.Mutex
	plan  *ticketPlan
	epoch int64
}

// createdTag marks the Extra entry holding when a ticket was given.
var createdTag = []byte("linkgate created ")

// install makes t the ticket keeper of cfg.
func (t *ticketer) install(cfg *tls.Config) {
	t.cfg = cfg
	cfg.Time = t.e.now
	cfg.WrapSession = t.wrap
	cfg.UnwrapSession = t.unwrap
}

// refresh sets the keys of now's period when they are not set yet, and
// returns the plan they come from.
func (t *ticketer) refresh(now time.Time) *ticketPlan {
	p := t.e.plan.Load().tickets
	epoch := now.Unix() / int64(p.rotate/time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	if p != t.plan || epoch != t.epoch {
		secret := p.secret
		if secret == nil {
			secret = t.e.ticketSecret
		}
		t.cfg.SetSessionTicketKeys(ticketKeys(secret, p.rotate, p.lifetime, now))
		t.plan, t.epoch = p, epoch
	}
	return p
}

// wrap is the listener's WrapSession: the ticket, with the time it was
// given, encrypted with the current key.
func (t *ticketer) wrap(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	now := t.e.now()
	t.refresh(now)
	ss.Extra = append(ss.Extra, binary.BigEndian.AppendUint64(bytes.Clone(createdTag), uint64(now.Unix())))
	return t.cfg.EncryptTicket(cs, ss)
}

// unwrap is the listener's UnwrapSession: a ticket that none of the keys
// decrypts, that carries no time, or that is older than the lifetime
// makes a full handshake (nil, nil), as an unknown one does.
func (t *ticketer) unwrap(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	now := t.e.now()
	p := t.refresh(now)
	ss, err := t.cfg.DecryptTicket(identity, cs)
	if ss == nil || err != nil {
		return nil, err
	}
	for _, x := range ss.Extra {
		if len(x) == len(createdTag)+8 && bytes.HasPrefix(x, createdTag) {
			created := time.Unix(int64(binary.BigEndian.Uint64(x[len(createdTag):])), 0)
			if now.Sub(created) > p.lifetime {
				return nil, nil
			}
			return ss, nil
		}
	}
	return nil, nil
}

// newTicketSecret draws the secret of a process without secret_env.
func newTicketSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}
