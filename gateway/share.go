package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/tenant"
)

// Shared is a share token made for an operator (POST /admin/share, gateway
// share): the token and where it opens.
type Shared = stats.Shared

// MakeShare makes a share token under the plan's key (stats.share.key_env)
// for the link key of tenant ("": the default tenant), or for all its
// links when all, valid for ttl from now (0: 30 days, capped at
// stats.share.max_ttl).
func (p *Plan) MakeShare(tenant, key string, all bool, ttl time.Duration, now time.Time) (Shared, error) {
	return p.share.Share(p.cfg.Stats.Prefix, stats.ShareRequest{Tenant: tenant, ShortKey: key, All: all, TTL: ttl}, now)
}

// handleShare makes a share token: POST /admin/share with a JSON object or
// a form of short_key (or all=true), tenant (default: the default tenant)
// and ttl (a duration: 720h, 30d; default 30 days). 200 with a Shared; 400
// naming the parameter; 409 when sharing is off (no key in
// stats.share.key_env's variable).
func (g *Gateway) handleShare(w http.ResponseWriter, r *http.Request) {
	req, ok := stats.ReadShareRequest(w, r, true)
	if !ok {
		return
	}
	plan := g.current().plan
	sh, err := plan.share.Share(plan.cfg.Stats.Prefix, req, time.Now())
	if err == nil {
		g.log.Info("share token made", "tenant", sh.Tenant, "short_key", sh.ShortKey, "all", sh.All, "expires", sh.Expires)
	}
	stats.WriteShared(w, req, sh, err)
}

// TenantToken is a tenant token made for an operator (POST /admin/tokens):
// a bearer token that reads the tenant's stats and nothing else, until it
// expires.
type TenantToken struct {
	Token   string    `json:"token"`
	Tenant  string    `json:"tenant"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
}

// MakeTenantToken makes a tenant token under the plan's key
// (stats.share.key_env) for the tenant name, valid for ttl from now (0: 30
// days, capped at stats.share.max_ttl).
func (p *Plan) MakeTenantToken(name string, ttl time.Duration, now time.Time) (TenantToken, error) {
	tok, g, err := p.share.MakeTenant(name, ttl, now)
	if err != nil {
		return TenantToken{}, err
	}
	return TenantToken{Token: tok, Tenant: g.Tenant, Issued: g.Issued, Expires: g.Expires}, nil
}

// handleTokens makes a tenant token: POST /admin/tokens with a JSON object
// of tenant and ttl (a duration: 24h, 30d; default 30 days). 200 with a
// TenantToken; 400 naming the parameter; 409 when sharing is off (tenant
// tokens are signed with the share tokens' key).
func (g *Gateway) handleTokens(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Tenant string `json:"tenant"`
		TTL    string `json:"ttl"`
	}
	if !decodeBody(w, r, &in, "tenant and ttl") {
		return
	}
	if !tenant.ValidName(in.Tenant) {
		badParam(w, "tenant", "give a tenant's name: 1 to 63 lower-case letters, digits and -, starting with a letter or a digit")
		return
	}
	var ttl time.Duration
	if in.TTL != "" {
		d, err := rollup.ParseDuration(in.TTL)
		if err != nil || d <= 0 {
			badParam(w, "ttl", "not a duration like 24h, 30d or 8w")
			return
		}
		ttl = d
	}
	tt, err := g.current().plan.MakeTenantToken(in.Tenant, ttl, time.Now())
	switch {
	case errors.Is(err, stats.ErrSharingOff):
		problem.Write(w, http.StatusConflict, "tenant tokens are off: they are signed with the key of stats.share.key_env; set its environment variable (at least 16 bytes) and restart")
		return
	case err != nil:
		badParam(w, "ttl", err.Error())
		return
	}
	g.log.Info("tenant token made", "tenant", tt.Tenant, "expires", tt.Expires)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(tt)
}

// decodeBody reads r's body, 64 KiB at most, into in, a JSON object whose
// fields are those of in and no other, described as "of what" in the 400
// naming the body that answers any other; false after that answer.
func decodeBody(w http.ResponseWriter, r *http.Request, in any, what string) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		badParam(w, "body", "not a JSON object of "+what+": "+err.Error())
		return false
	}
	return true
}

// badParam answers 400 naming the parameter name and why.
func badParam(w http.ResponseWriter, name, reason string) {
	problem.WriteDetails(w, problem.Details{Status: http.StatusBadRequest, Detail: name + ": " + reason,
		Extra: map[string]any{"invalid-params": []map[string]string{{"name": name, "reason": reason}}}})
}
