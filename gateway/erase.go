package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/tenant"
)

// Erased is the answer of POST /admin/erase: what was erased, up to when.
type Erased struct {
	Tenant   string    `json:"tenant"`
	ShortKey string    `json:"short_key,omitempty"`
	At       time.Time `json:"erased_at"`
}

// handleErase erases the counts of one link or of one tenant: POST
// /admin/erase with a JSON object of tenant and short_key (the link
// short_key of tenant; tenant "" is the default tenant) or tenant alone
// (all of its links). 200 with an Erased; 400 naming the field; 409 when
// analytics are off (both stores erase); 503 when the store fails.
func (g *Gateway) handleErase(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Tenant   string `json:"tenant"`
		ShortKey string `json:"short_key"`
	}
	if !decodeBody(w, r, &in, "tenant and short_key") {
		return
	}
	switch {
	case in.Tenant != "" && !tenant.ValidName(in.Tenant):
		badParam(w, "tenant", "give a tenant's name: 1 to 63 lower-case letters, digits and -, starting with a letter or a digit")
		return
	case in.Tenant == "" && in.ShortKey == "":
		badParam(w, "short_key", "give the link to erase: the default tenant cannot be erased whole")
		return
	case len(in.ShortKey) > 65535 || !validShortKey(in.ShortKey):
		badParam(w, "short_key", "a short key is one path segment: no / and no control characters")
		return
	}
	if g.pipeline == nil {
		problem.Write(w, http.StatusConflict, "analytics are off: there are no counts to erase")
		return
	}
	e, err := g.pipeline.Erase(r.Context(), in.Tenant, in.ShortKey)
	switch {
	case errors.Is(err, analytics.ErrCannotErase):
		problem.Write(w, http.StatusConflict, "the analytics store keeps no erasures")
		return
	case err != nil:
		g.log.Error("erase", "tenant", in.Tenant, "short_key", in.ShortKey, "err", err)
		problem.Write(w, http.StatusServiceUnavailable, "the analytics store did not erase: "+err.Error())
		return
	}
	g.log.Info("counts erased", "tenant", e.Tenant, "short_key", e.Key, "at", e.At)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(Erased{Tenant: e.Tenant, ShortKey: e.Key, At: e.At})
}

// validShortKey reports whether k can be a stored short key: no "/" and
// no control character.
func validShortKey(k string) bool {
	for _, c := range []byte(k) {
		if c == '/' || c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
