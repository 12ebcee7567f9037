package h2serve_test

import (
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"testing"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

// TestWriteHeaderFields: a head written as a list of fields
// (ongoing.FieldWriter) goes out after the header map's fields, by the
// same rules: connection-specific fields dropped, a declared length kept
// and held to, Date and Content-Type added only when neither list has
// them, the Trailer field read from both. HeadField reads the map first,
// then the list. An interim head's fields go out with it and are not
// kept; changes to the map after the head are not sent, but trailers
// are; a second head is ignored.
func TestWriteHeaderFields(t *testing.T) {
	type seen struct{ location, cache, interim, missing string }
	got := make(chan seen, 1)
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw, ok := ongoing.AsFieldWriter(w)
		if !ok {
			t.Fatal("the writer takes no head as a list")
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		fw.WriteHeaderFields(http.StatusEarlyHints, []h1wire.Field{{Name: "Link", Value: "</a.css>"}})
		var s seen
		s.interim = fw.HeadField("Link")
		h.Set("Trailer", "X-T")
		fw.WriteHeaderFields(http.StatusFound, []h1wire.Field{
			{Name: "Location", Value: "/b"}, {Name: "Cache-Control", Value: "private"},
			{Name: "Connection", Value: "x-hop"}, {Name: "Keep-Alive", Value: "timeout=5"},
			{Name: "Transfer-Encoding", Value: "chunked"}, {Name: "Content-Length", Value: "3"},
			{Name: "Date", Value: "Mon, 02 Jan 2006 15:04:05 GMT"}, {Name: "Content-Type", Value: "text/x-a"},
			{Name: "Trailer", Value: "X-U"},
		})
		fw.WriteHeaderFields(http.StatusOK, []h1wire.Field{{Name: "X-Second", Value: "2"}})
		s.location, s.cache, s.missing = fw.HeadField("Location"), fw.HeadField("Cache-Control"), fw.HeadField("X-Second")
		h.Set("X-After", "not sent")
		w.Write([]byte("abc"))
		h.Set("X-T", "t")
		h.Set("X-U", "u")
		got <- s
	}))
	ts.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var interim []textproto.MIMEHeader
	req := newRequest(t, "GET", ts.url("/"), nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			interim = append(interim, h)
			return nil
		}}))
	res, body := do(t, ts, req)
	s := <-got
	if s != (seen{location: "/b", cache: "no-store"}) {
		t.Errorf("HeadField: %+v, want Location /b, Cache-Control no-store (the map's), no Link, no X-Second", s)
	}
	if len(interim) != 1 || interim[0].Get("Link") != "</a.css>" || interim[0].Get("Cache-Control") != "no-store" {
		t.Errorf("interim heads %v, want one with Link and the map's Cache-Control", interim)
	}
	h := res.Header
	if res.StatusCode != http.StatusFound || string(body) != "abc" || res.ContentLength != 3 ||
		!slices.Equal(h["Cache-Control"], []string{"no-store", "private"}) || h.Get("Location") != "/b" ||
		h.Get("Date") != "Mon, 02 Jan 2006 15:04:05 GMT" || !slices.Equal(h["Content-Type"], []string{"text/x-a"}) ||
		h.Get("Link") != "" || h.Get("X-Second") != "" || h.Get("X-After") != "" {
		t.Errorf("answer %d %q length %d, header %v", res.StatusCode, body, res.ContentLength, h)
	}
	for _, k := range []string{"Connection", "Keep-Alive", "Transfer-Encoding"} {
		if _, ok := h[k]; ok {
			t.Errorf("%s sent: %v", k, h[k])
		}
	}
	if res.Trailer.Get("X-T") != "t" || res.Trailer.Get("X-U") != "u" {
		t.Errorf("trailers %v, want X-T and X-U", res.Trailer)
	}
}

// TestWriteHeaderFieldsOfNoBody: a HEAD's answer, a 304 and a 204
// relayed as lists keep the fields they name (a HEAD's Content-Length,
// a 304's Content-Type), and end with the head.
func TestWriteHeaderFieldsOfNoBody(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := map[string]int{"/head": http.StatusOK, "/304": http.StatusNotModified, "/204": http.StatusNoContent}[r.URL.Path]
		fields := []h1wire.Field{{Name: "Content-Type", Value: "text/x-a"}, {Name: "Etag", Value: `"e"`}}
		if code == http.StatusOK {
			fields = append(fields, h1wire.Field{Name: "Content-Length", Value: "10"})
		}
		w.(ongoing.FieldWriter).WriteHeaderFields(code, fields)
	}))
	for _, c := range []struct {
		method, path string
		code         int
		length       string
	}{
		{"HEAD", "/head", 200, "10"},
		{"GET", "/304", 304, ""},
		{"GET", "/204", 204, ""},
	} {
		res, body := do(t, ts, newRequest(t, c.method, ts.url(c.path), nil))
		if res.StatusCode != c.code || len(body) != 0 || res.Header.Get("Content-Length") != c.length ||
			res.Header.Get("Content-Type") != "text/x-a" || res.Header.Get("Etag") != `"e"` {
			t.Errorf("%s %s: %d %q, header %v", c.method, c.path, res.StatusCode, body, res.Header)
		}
	}
}
