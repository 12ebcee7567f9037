package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

// Shared is a share token made for an operator (POST /admin/share, gateway
// share): the token and where it opens.
type Shared struct {
	Token    string    `json:"token"`
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

// MakeShare makes a share token under the plan's key (stats.share.key_env)
// for the link key, or for all links when all, valid for ttl from now (0:
// 30 days, capped at stats.share.max_ttl).
func (p *Plan) MakeShare(key string, all bool, ttl time.Duration, now time.Time) (Shared, error) {
	k := key
	switch {
	case all && key != "":
		return Shared{}, errors.New("gateway: a share token is for one link or for all links, not both")
	case all:
		k = analytics.AllLinks
	case key == "":
		return Shared{}, errors.New("gateway: a share token needs a short key, or all links")
	}
	tok, g, err := p.share.Make(k, ttl, now)
	if err != nil {
		return Shared{}, err
	}
	path := p.cfg.Stats.Prefix
	if !all {
		path += "/" + url.PathEscape(key)
	}
	q := "share=" + url.QueryEscape(tok)
	return Shared{
		Token: tok, ShortKey: key, All: all, Issued: g.Issued, Expires: g.Expires,
		Page: path + "?" + q, Embed: path + "?format=embed&" + q, Data: path + "?format=json&" + q,
	}, nil
}

// handleShare makes a share token: POST /admin/share with a JSON object or
// a form of short_key (or all=true) and ttl (a duration: 720h, 30d; default
// 30 days). 200 with a Shared; 400 naming the parameter; 409 when sharing
// is off (no key in stats.share.key_env's variable).
func (g *Gateway) handleShare(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ShortKey string `json:"short_key"`
		All      bool   `json:"all"`
		TTL      string `json:"ttl"`
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			badShareParam(w, "body", "not a JSON object of short_key, all and ttl: "+err.Error())
			return
		}
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			badShareParam(w, "body", err.Error())
			return
		}
		in.ShortKey, in.TTL = r.Form.Get("short_key"), r.Form.Get("ttl")
		if a := r.Form.Get("all"); a != "" {
			b, err := strconv.ParseBool(a)
			if err != nil {
				badShareParam(w, "all", fmt.Sprintf("%q is not true or false", a))
				return
			}
			in.All = b
		}
	}
	var ttl time.Duration
	if in.TTL != "" {
		d, err := rollup.ParseDuration(in.TTL)
		if err != nil || d <= 0 {
			badShareParam(w, "ttl", fmt.Sprintf("%q is not a duration like 24h, 30d or 8w", in.TTL))
			return
		}
		ttl = d
	}
	plan := g.current().plan
	sh, err := plan.MakeShare(in.ShortKey, in.All, ttl, time.Now())
	switch {
	case errors.Is(err, stats.ErrSharingOff):
		problem.Write(w, http.StatusConflict, "sharing is off: set the environment variable named by stats.share.key_env (at least 16 bytes) and restart")
		return
	case err != nil && (in.All && in.ShortKey != "" || in.ShortKey == "" && !in.All):
		badShareParam(w, "short_key", "give a short key, or all=true for all links")
		return
	case err != nil && ttl != 0:
		badShareParam(w, "ttl", err.Error())
		return
	case err != nil:
		badShareParam(w, "short_key", err.Error())
		return
	}
	g.log.Info("share token made", "short_key", sh.ShortKey, "all", sh.All, "expires", sh.Expires)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the paths' "&" stay readable
	enc.Encode(sh)
}

func badShareParam(w http.ResponseWriter, name, reason string) {
	problem.WriteDetails(w, problem.Details{Status: http.StatusBadRequest, Detail: name + ": " + reason,
		Extra: map[string]any{"invalid-params": []map[string]string{{"name": name, "reason": reason}}}})
}
