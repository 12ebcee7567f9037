package stats

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/bearer"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/tenant"
)

// Tenant tokens
//
// A tenant token lets whoever holds it read one tenant's stats, and nothing
// else, until it expires: all its links together, each of its links, its
// top links, breakdowns, unique visitors, live stream and Graphite tree, as
// a bearer token (Authorization: Bearer lgt1....) on every stats path. It
// is signed as a share token is, under the same key (stats.share.key_env),
// with a prefix of its own, which the signature covers: no share token
// passes for a tenant token, nor the other way round. Nothing is stored:
// rotating the key revokes every token, and lowering stats.share.max_ttl
// those that live longer.
//
//	lgt1.<payload>.<signature>
//
// payload is base64url of "<issued unix seconds>:<expiry unix
// seconds>:<tenant>".

// tenantPrefix starts every tenant token: its format's version.
const tenantPrefix = "lgt1."

// TenantGrant is what a tenant token allows: reading Tenant's stats until
// Expires.
type TenantGrant struct {
	Tenant  string
	Issued  time.Time
	Expires time.Time
}

// MakeTenant returns a token granting the stats of the tenant name from now
// for ttl (0: DefaultShareTTL, capped at MaxTTL).
func (s Sharer) MakeTenant(name string, ttl time.Duration, now time.Time) (string, TenantGrant, error) {
	if len(s.Key) == 0 {
		return "", TenantGrant{}, ErrSharingOff
	}
	if !tenant.ValidName(name) {
		return "", TenantGrant{}, errBadTenant(name)
	}
	issued, expires, err := s.lifetime(ttl, now)
	if err != nil {
		return "", TenantGrant{}, err
	}
	g := TenantGrant{Tenant: name, Issued: issued, Expires: expires}
	return sign(s.Key, tenantPrefix, issued, expires, name), g, nil
}

// VerifyTenant checks a tenant token at now, as Verify checks a share
// token, and returns what it grants.
func (s Sharer) VerifyTenant(token string, now time.Time) (TenantGrant, error) {
	if len(s.Key) == 0 {
		return TenantGrant{}, ErrSharingOff
	}
	name, issued, expires, err := verify(s.Key, tenantPrefix, token, now, s.MaxTTL)
	g := TenantGrant{Tenant: name, Issued: issued, Expires: expires}
	if err == nil && !tenant.ValidName(name) {
		return TenantGrant{}, ErrShareMalformed // signed, so never: a name is checked when made
	}
	return g, err
}

// errTenantExpired ends a live stream opened with a tenant token when the
// token expires.
var errTenantExpired = errors.New("stats: the tenant token has expired")

func errBadTenant(name string) error {
	return badParam("tenant", "%q is not a tenant name: 1 to 63 lower-case letters, digits and -, starting with a letter or a digit", name)
}

// scope is what one request may read: the links of one tenant ("": the
// default tenant, whose all-links answers are every tenant's visits
// together), all of them or those a share token grants, and the
// credentials it came with, which the live stream's limits count.
type scope struct {
	tenant string
	// token is true when the request carries the stats token (false when
	// none is required).
	token bool
	// shareTok is the share token the request carries, "" for none; share
	// is what it grants.
	shareTok string
	share    *Grant
	// tenantTok is the tenant token the request carries, "" for none: the
	// tenant is its holder's.
	tenantTok string
	// expires is when the request's token (a share or tenant token)
	// expires; zero for the stats token or none.
	expires time.Time
}

// byTenant reports whether sc is a tenant token's.
func (sc scope) byTenant() bool { return sc.tenantTok != "" }

// key returns the stored key of the short key in s (short "": all links).
func (sc scope) key(short string) string {
	if short == "" {
		return analytics.TenantAll(sc.tenant)
	}
	return analytics.TenantKey(sc.tenant, short)
}

// scopeOf decides what r may read (see resolve), or answers why it may
// read nothing.
func (s *API) scopeOf(w http.ResponseWriter, r *http.Request, v url.Values, shares bool) (scope, bool) {
	sc, d := s.resolve(r, v, shares, s.o.Now())
	if d != nil {
		writeRefusal(w, r, sc, d)
		return sc, false
	}
	return sc, true
}

// resolve decides at now what r may read, or the problem to answer: a share
// token (the share parameter, or a bearer token that is one; only when
// shares) reads the links of its tenant it grants; a tenant token (bearer)
// reads its tenant; the stats token (or none, when none is required) reads
// any tenant, the default one unless the tenant parameter names another.
// v is the request's parameters (its query, or its form). A tenant
// parameter naming another tenant than a token's is a 403 naming tenant;
// an invalid token a 401 naming where it was; no token when one is
// required a 401.
func (s *API) resolve(r *http.Request, v url.Values, shares bool, now time.Time) (scope, *problem.Details) {
	asked, hasAsked := v.Get("tenant"), v.Has("tenant")
	if hasAsked && !tenant.ValidName(asked) {
		return scope{}, paramProblem(errBadTenant(asked))
	}
	b, hasBearer := bearerToken(r)
	tok := v.Get("share")
	if tok == "" && hasBearer && strings.HasPrefix(b, sharePrefix) {
		tok = b
	}
	var sc scope
	switch {
	case tok != "" && shares:
		sc.shareTok = tok
		g, err := s.o.Share.Verify(tok, now)
		if err != nil {
			return sc, tokenProblem("share", err)
		}
		sc.tenant, sc.share, sc.expires = g.Tenant(), &g, g.Expires
	case hasBearer && strings.HasPrefix(b, tenantPrefix):
		sc.tenantTok = b
		g, err := s.o.Share.VerifyTenant(b, now)
		if err != nil {
			return sc, tokenProblem("Authorization", err)
		}
		sc.tenant, sc.expires = g.Tenant, g.Expires
	case s.authorized(r):
		return scope{tenant: asked, token: s.o.Token != ""}, nil
	default:
		return sc, &problem.Details{Status: http.StatusUnauthorized, Detail: needsToken}
	}
	if hasAsked && asked != sc.tenant {
		return sc, &problem.Details{Status: http.StatusForbidden, Detail: "the token is not for the tenant " + strconv.Quote(asked),
			Extra: map[string]any{"invalid-params": []map[string]string{{"name": "tenant", "reason": "not the token's tenant"}}}}
	}
	return sc, nil
}

// check decides at now whether r may read the link shortKey ("": all
// links) of the tenant it may read (resolve), and returns the link's
// stored key, or the problem to answer.
func (s *API) check(r *http.Request, v url.Values, shortKey string, now time.Time) (scope, string, *problem.Details) {
	sc, d := s.resolve(r, v, true, now)
	if d != nil {
		return sc, "", d
	}
	key := sc.key(shortKey)
	return sc, key, sc.allows(key)
}

// writeRefusal answers d, the refusal of a request that carried sc's
// credentials: with the RFC 6750 challenge when it carried no token.
func writeRefusal(w http.ResponseWriter, r *http.Request, sc scope, d *problem.Details) {
	if d.Status == http.StatusUnauthorized && sc.shareTok == "" && sc.tenantTok == "" {
		bearer.Challenge(w, r, "linkgate stats")
	}
	problem.WriteDetails(w, *d)
}

// tokenProblem is the 401 of a token that is not valid, naming where it
// was (the share parameter, or the Authorization header).
func tokenProblem(name string, err error) *problem.Details {
	reason := strings.TrimPrefix(err.Error(), "stats: ")
	return &problem.Details{Status: http.StatusUnauthorized, Detail: reason,
		Extra: map[string]any{"invalid-params": []map[string]string{{"name": name, "reason": reason}}}}
}

// allows says whether sc may read the stored key, or the 403 to answer: a
// share token reads only what it grants. Any other scope reads every key
// of its tenant, which is the only kind of key it can name.
func (sc scope) allows(key string) *problem.Details {
	if sc.share == nil || sc.share.Allows(key) {
		return nil
	}
	what := "all links together"
	if _, short := analytics.SplitKey(key); short != "" {
		what = "the link " + strconv.Quote(short)
	}
	return &problem.Details{Status: http.StatusForbidden, Detail: "the share token is not for " + what,
		Extra: map[string]any{"invalid-params": []map[string]string{{"name": "share", "reason": "not for " + what}}}}
}

// TenantTopReader is what the API reads for a tenant's top lists:
// analytics.Reader is one. Without it a tenant's top= is a 400.
type TenantTopReader interface {
	// TenantTop is Top over the links of tenant alone, their keys as
	// stored (analytics.TenantKey).
	TenantTop(ctx context.Context, tenant string, from, to time.Time, n int) ([]analytics.TopLink, error)
}

// topOf returns the n most visited links of sc's tenant over the UTC days
// whose start lies in [from, to), their keys as stored: the service's top
// list in the default tenant, which holds every tenant's links.
func (s *API) topOf(ctx context.Context, sc scope, from, to time.Time, n int) ([]analytics.TopLink, error) {
	if sc.tenant == "" {
		return s.r.(TopReader).Top(ctx, from, to, n)
	}
	return s.r.(TenantTopReader).TenantTop(ctx, sc.tenant, from, to, n)
}

// hasTop reports whether the API can answer sc's top lists.
func (s *API) hasTop(sc scope) bool {
	if sc.tenant == "" {
		_, ok := s.r.(TopReader)
		return ok
	}
	_, ok := s.r.(TenantTopReader)
	return ok
}
