package limit

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// A rule must match the request the upstream will route, not only the one
// the gateway sees. Many stacks route a request by a method named in the
// request itself: Rack (Rails), Symfony (Laravel), Spring's
// HiddenHttpMethodFilter, ASP.NET Core's HttpMethodOverride and Express's
// method-override honour a header or a "_method" field of the query string
// or the body, on a POST at least. A rule for PUT /account must count the
// POST that says "_method=PUT", and a rule for POST /login the PUT that says
// "X-HTTP-Method-Override: POST". So a rule matches a request under its own
// method or under any method such an override names (route.Folding.Also).

// overrideHeaders are the headers that name a method override, canonical.
var overrideHeaders = [...]string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// overrideField is the form, query and JSON field that names a method
// override, matched case-insensitively.
const overrideField = "_method"

// overrides returns the methods r's headers and query string name as
// overrides, upper-cased, nil when none (the common case costs three map
// lookups and a scan of the query string, without allocating).
func overrides(r *http.Request) []string {
	var out []string
	for _, h := range overrideHeaders {
		for _, v := range r.Header[h] {
			out = addMethod(out, v)
		}
	}
	for q := r.URL.RawQuery; q != ""; {
		var k, v string
		k, v, q = nextPair(q)
		if !isOverrideKey(k) {
			continue
		}
		if u, err := url.QueryUnescape(v); err == nil {
			v = u
		}
		out = addMethod(out, v)
	}
	return out
}

// nextPair cuts the first key=value pair off s, a query string or a form
// body, and returns its key and value as sent (percent-encoded) and the
// rest. Pairs are separated by '&' or, for some stacks, ';'.
func nextPair(s string) (k, v, rest string) {
	pair := s
	if i := strings.IndexAny(s, "&;"); i >= 0 {
		pair, rest = s[:i], s[i+1:]
	}
	k, v, _ = strings.Cut(pair, "=")
	return k, v, rest
}

// isOverrideKey reports whether k, a query or form key as sent
// (percent-encoded), names the override field.
func isOverrideKey(k string) bool {
	if len(k) != len(overrideField) {
		if !strings.ContainsAny(k, "%+") {
			return false
		}
		u, err := url.QueryUnescape(k)
		if err != nil {
			return false
		}
		k = u
	}
	return strings.EqualFold(k, overrideField)
}

// addMethod adds the methods v names to ms, upper-cased: one, or several
// joined by commas (a header sent twice may reach a stack joined, and
// which one it takes is its own choice).
func addMethod(ms []string, v string) []string {
	for m := range strings.SplitSeq(v, ",") {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			ms = append(ms, m)
		}
	}
	return ms
}

// The kinds of body a "_method" field may be read from, by the stacks that
// honour it.
const (
	noOverrideBody = iota // a media type those stacks do not parse for fields
	formBody              // urlencoded, or no Content-Type (Rack parses a form then)
	multipartBody         // multipart/form-data
	jsonBody              // application/json, +json (Laravel)
	unknownBody           // encoded, or a Content-Type or charset that does not parse
)

// overrideBody says, from r's headers alone, which kind of body r has, as
// far as a "_method" field goes.
func overrideBody(r *http.Request) (kind int, boundary string) {
	for _, v := range r.Header.Values("Content-Encoding") {
		if v = strings.TrimSpace(v); v != "" && !strings.EqualFold(v, "identity") {
			return unknownBody, ""
		}
	}
	ct := r.Header.Values("Content-Type")
	if len(ct) == 0 {
		return formBody, ""
	}
	if len(ct) > 1 {
		return unknownBody, ""
	}
	mt, params, err := mime.ParseMediaType(ct[0])
	if err != nil {
		return unknownBody, ""
	}
	if cs, has := params["charset"]; has && !isUTF8(cs) {
		return unknownBody, ""
	}
	switch {
	case mt == "application/x-www-form-urlencoded":
		return formBody, ""
	case mt == "multipart/form-data":
		if params["boundary"] == "" {
			return unknownBody, ""
		}
		return multipartBody, params["boundary"]
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return jsonBody, ""
	}
	return noOverrideBody, ""
}

// bodyOverrides returns the methods the "_method" fields of buf, a whole
// body of the given kind, name, or ok false when it does not parse.
func bodyOverrides(kind int, boundary string, buf []byte) (ms []string, ok bool) {
	switch kind {
	case formBody:
		for rest := string(buf); rest != ""; {
			var k, v string
			k, v, rest = nextPair(rest)
			if !isOverrideKey(k) {
				continue
			}
			u, err := url.QueryUnescape(v)
			if err != nil {
				return nil, false
			}
			ms = addMethod(ms, u)
		}
		return ms, true
	case multipartBody:
		mr := multipart.NewReader(bytes.NewReader(buf), boundary)
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return ms, true
			}
			if err != nil {
				return nil, false
			}
			if !strings.EqualFold(p.FormName(), overrideField) {
				continue
			}
			v, err := io.ReadAll(p)
			if err != nil {
				return nil, false
			}
			ms = addMethod(ms, string(v))
		}
	case jsonBody:
		// Laravel reads "_method" from a JSON body too. Every top-level key
		// that folds to it counts, duplicates included.
		if !json.Valid(buf) {
			return nil, false
		}
		dec := json.NewDecoder(bytes.NewReader(buf))
		if t, _ := dec.Token(); t != json.Delim('{') {
			return nil, true // not an object: no field
		}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, false
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, false
			}
			var v string
			if k, _ := kt.(string); strings.EqualFold(k, overrideField) && json.Unmarshal(raw, &v) == nil {
				ms = addMethod(ms, v)
			}
		}
		return ms, true
	}
	return nil, kind != unknownBody
}
