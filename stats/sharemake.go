package stats

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/tenant"
)

// ShareRequest asks for a share token: of the link ShortKey, or of all
// links when All, of Tenant ("": the default tenant), valid for TTL (0:
// the default).
type ShareRequest struct {
	Tenant   string
	ShortKey string
	All      bool
	TTL      time.Duration
}

// Shared is a share token made on request (POST /admin/share, POST
// <prefix>/tokens/share, gateway share): the token and where it opens.
type Shared struct {
	Token    string    `json:"token"`
	Tenant   string    `json:"tenant,omitempty"`
	ShortKey string    `json:"short_key"` // "" for all links
	All      bool      `json:"all"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
	// Page is the chart page's path with the token, Embed the embed
	// view's and Data the JSON answer's: append them to the gateway's
	// address.
	Page  string `json:"page"`
	Embed string `json:"embed"`
	Data  string `json:"data"`
}

// errShareWhat is the error of a request for both a link and all links,
// or for neither.
var errShareWhat = errors.New("stats: a share token is for one link or for all links: give a short key, or all=true")

// Share makes the token req asks for, with the paths it opens under the
// stats prefix: see Make.
func (s Sharer) Share(prefix string, req ShareRequest, now time.Time) (Shared, error) {
	if req.All == (req.ShortKey != "") {
		return Shared{}, errShareWhat
	}
	if req.Tenant != "" && !tenant.ValidName(req.Tenant) {
		return Shared{}, errBadTenant(req.Tenant)
	}
	key := analytics.TenantAll(req.Tenant)
	if !req.All {
		key = analytics.TenantKey(req.Tenant, req.ShortKey)
	}
	tok, g, err := s.Make(key, req.TTL, now)
	if err != nil {
		return Shared{}, err
	}
	path := prefix
	if !req.All {
		path += "/" + url.PathEscape(req.ShortKey)
	}
	q := "share=" + url.QueryEscape(tok)
	return Shared{
		Token: tok, Tenant: req.Tenant, ShortKey: req.ShortKey, All: req.All, Issued: g.Issued, Expires: g.Expires,
		Page: path + "?" + q, Embed: path + "?format=embed&" + q, Data: path + "?format=json&" + q,
	}, nil
}

// ReadShareRequest reads a request for a share token: a JSON object or a
// form of short_key (or all=true), ttl (a duration: 720h, 30d) and, when
// tenants, tenant. It answers a 400 naming the parameter and returns false
// when the request cannot be read.
func ReadShareRequest(w http.ResponseWriter, r *http.Request, tenants bool) (ShareRequest, bool) {
	var in struct {
		Tenant   string `json:"tenant"`
		ShortKey string `json:"short_key"`
		All      bool   `json:"all"`
		TTL      string `json:"ttl"`
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeParamError(w, badParam("body", "not a JSON object of tenant, short_key, all and ttl: %v", err))
			return ShareRequest{}, false
		}
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			writeParamError(w, badParam("body", "%v", err))
			return ShareRequest{}, false
		}
		in.Tenant, in.ShortKey, in.TTL = r.Form.Get("tenant"), r.Form.Get("short_key"), r.Form.Get("ttl")
		if a := r.Form.Get("all"); a != "" {
			b, err := strconv.ParseBool(a)
			if err != nil {
				writeParamError(w, badParam("all", "%q is not true or false", a))
				return ShareRequest{}, false
			}
			in.All = b
		}
	}
	req := ShareRequest{Tenant: in.Tenant, ShortKey: in.ShortKey, All: in.All}
	if in.TTL != "" {
		d, err := rollup.ParseDuration(in.TTL)
		if err != nil || d <= 0 {
			writeParamError(w, badParam("ttl", "%q is not a duration like 24h, 30d or 8w", in.TTL))
			return ShareRequest{}, false
		}
		req.TTL = d
	}
	if !tenants && req.Tenant != "" {
		writeParamError(w, badParam("tenant", "not read here: the token's tenant is the one shared"))
		return ShareRequest{}, false
	}
	return req, true
}

// WriteShared answers a made token as JSON, or why req's could not be made:
// 409 when sharing is off (no key), else a 400 naming the parameter.
func WriteShared(w http.ResponseWriter, req ShareRequest, sh Shared, err error) {
	var pe *paramError
	switch {
	case errors.Is(err, ErrSharingOff):
		problem.Write(w, http.StatusConflict, "sharing is off: set the environment variable named by stats.share.key_env (at least 16 bytes) and restart")
		return
	case errors.As(err, &pe):
		writeParamError(w, err)
		return
	case errors.Is(err, errShareWhat):
		writeParamError(w, badParam("short_key", "give a short key, or all=true for all links"))
		return
	case err != nil && req.TTL != 0:
		writeParamError(w, badParam("ttl", "%s", trimStats(err)))
		return
	case err != nil:
		writeParamError(w, badParam("short_key", "%s", trimStats(err)))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the paths' "&" stay readable
	enc.Encode(sh)
}

func trimStats(err error) string {
	s := err.Error()
	if len(s) > 7 && s[:7] == "stats: " {
		return s[7:]
	}
	return s
}

// serveMakeShare answers POST <prefix>/tokens/share: a share token of a
// link, or of all links, of the tenant the request's token reads (a tenant
// token's; the stats token's, the default tenant unless the request names
// another), never of another tenant's. A share token makes none. The
// request and answer are those of the admin API's POST /admin/share.
func (s *API) serveMakeShare(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		problem.Write(w, http.StatusMethodNotAllowed, "POST a short_key (or all=true) and a ttl to make a share token")
		return
	}
	b, _ := bearerToken(r)
	own := "" // the tenant of a tenant token; "": the stats token's
	switch {
	case strings.HasPrefix(b, tenantPrefix):
		g, err := s.o.Share.VerifyTenant(b, s.o.Now())
		if err != nil {
			problem.WriteDetails(w, *tokenProblem("Authorization", err))
			return
		}
		own = g.Tenant
	case s.o.Token != "" && s.authorized(r):
	default:
		// The stats token is required here even when the API is open:
		// an open API reads, it does not hand out tokens.
		writeUnauthorized(w, r)
		return
	}
	req, ok := ReadShareRequest(w, r, true)
	if !ok {
		return
	}
	by := "stats token"
	if own != "" {
		if req.Tenant != "" && req.Tenant != own {
			problem.WriteDetails(w, problem.Details{Status: http.StatusForbidden, Detail: "the token is not for the tenant " + strconv.Quote(req.Tenant),
				Extra: map[string]any{"invalid-params": []map[string]string{{"name": "tenant", "reason": "not the token's tenant"}}}})
			return
		}
		req.Tenant, by = own, "tenant token"
	}
	sh, err := s.o.Share.Share(s.o.Prefix, req, s.o.Now())
	if err == nil {
		s.o.Log.Info("share token made", "tenant", sh.Tenant, "short_key", sh.ShortKey, "all", sh.All, "expires", sh.Expires, "by", by)
	}
	WriteShared(w, req, sh, err)
}
