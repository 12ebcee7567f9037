package limit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// request builds a POST /login request with a raw query, header pairs and
// a body, as the server hands it to a handler.
func request(query string, body []byte, hdr ...string) *http.Request {
	r := &http.Request{Method: "POST", URL: &url.URL{Path: "/login", RawQuery: query}, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	if body == nil {
		r.Body = http.NoBody
	} else {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	return r
}

// TestEmailShapes is the table of request shapes and what the gateway reads
// from each: an email, none, or a refusal with its status.
func TestEmailShapes(t *testing.T) {
	er := newEmailReader([]string{"email", "login"}, 256, nil)
	const (
		form = "application/x-www-form-urlencoded"
		js   = "application/json"
	)
	for _, tc := range []struct {
		name   string
		query  string
		body   string
		hdr    []string
		want   string // the email
		status int    // or the refusal
	}{
		{name: "no body, no query"},
		{name: "query only", query: "email=a%40example.com", want: "a@example.com"},
		{name: "form", body: "email=A%40Example.com&password=x", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "form, second configured field", body: "login=a%40example.com", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "form, both fields agree", body: "login=a%40example.com&email=A%40EXAMPLE.COM", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "form, fields disagree", body: "login=a%40example.com&email=b%40example.com", hdr: []string{"Content-Type", form}, status: 400},
		{name: "form with utf-8 charset", body: "email=a%40example.com", hdr: []string{"Content-Type", form + "; charset=UTF-8"}, want: "a@example.com"},
		{name: "form, no email field", body: "password=x", hdr: []string{"Content-Type", form}},
		{name: "form, blank email", body: "email=+&password=x", hdr: []string{"Content-Type", form}},
		{name: "form, bad escape", body: "email=a%40example.com&x=%zz", hdr: []string{"Content-Type", form}, status: 400},
		{name: "query and form agree", query: "email=a%40example.com", body: "email=a%40example.com", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "query and form disagree", query: "email=a%40example.com", body: "email=b%40example.com", hdr: []string{"Content-Type", form}, status: 400},
		{name: "query with a bad escape", query: "email=a%4", status: 400},
		{name: "json", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", js}, want: "a@example.com"},
		{name: "json +json type", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", "application/vnd.api+json"}, want: "a@example.com"},
		{name: "json, trailing white space", body: "{\"email\":\"a@example.com\"}\r\n\t ", hdr: []string{"Content-Type", js}, want: "a@example.com"},
		{name: "json, trailing garbage", body: `{"email":"a@example.com"}x`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, second value", body: `{"email":"a@example.com"} "x"`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, unterminated", body: `{"email":"a@example.com"`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, duplicate keys agree", body: `{"email":"a@example.com","EMAIL":"A@example.com"}`, hdr: []string{"Content-Type", js}, want: "a@example.com"},
		{name: "json, keys differing in case disagree", body: `{"login":"a@example.com","LOGIN":"b@example.com"}`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, null email", body: `{"email":null}`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, object email", body: `{"email":{"a":"b"}}`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, bool email", body: `{"email":true}`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, other fields of every type", body: `{"a":null,"b":[1,2,{"c":[]}],"d":{"e":"f"},"g":true,"email":"a@example.com"}`, hdr: []string{"Content-Type", js}, want: "a@example.com"},
		{name: "json, empty object", body: `{}`, hdr: []string{"Content-Type", js}},
		{name: "json, invalid UTF-8", body: "{\"email\":\"a@example.com\xff\"}", hdr: []string{"Content-Type", js}, status: 400},
		{name: "json, \\u0000 in the email", body: `{"email":"a@example.com\u0000"}`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "json sniffed from an untyped body", body: ` {"email":"a@example.com"}`, want: "a@example.com"},
		{name: "json sniffed from an octet-stream body", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", "application/octet-stream"}, want: "a@example.com"},
		{name: "untyped body that is not JSON", body: "email=a%40example.com", status: 415},
		{name: "xml body", body: "<email>a@example.com</email>", hdr: []string{"Content-Type", "application/xml"}, status: 415},
		{name: "body over max_body_bytes", body: "email=a%40example.com&x=" + strings.Repeat("y", 300), hdr: []string{"Content-Type", form}, status: 413},
		{name: "malformed media type", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", "application/json; charset"}, status: 415},
		{name: "non-UTF-8 charset", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", js + "; charset=utf-16"}, status: 415},
		{name: "content encoding", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", js, "Content-Encoding", "br"}, status: 415},
		{name: "identity content encoding", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", js, "Content-Encoding", "identity"}, want: "a@example.com"},
		{name: "two content types", body: `{"email":"a@example.com"}`, hdr: []string{"Content-Type", js, "Content-Type", js}, status: 415},
		{name: "multipart", body: "--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@example.com\r\n--b--\r\n", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, want: "a@example.com"},
		{name: "multipart, RFC 2231 name", body: "--b\r\nContent-Disposition: form-data; name*=utf-8''email\r\n\r\na@example.com\r\n--b--\r\n", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, want: "a@example.com"},
		{name: "multipart, truncated", body: "--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@example.com", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, status: 400},
		{name: "multipart, file named email", body: "--b\r\nContent-Disposition: form-data; name=\"email\"; filename=\"e.txt\"\r\n\r\na@example.com\r\n--b--\r\n", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, status: 400},
		{name: "multipart, latin-1 part", body: "--b\r\nContent-Disposition: form-data; name=\"email\"\r\nContent-Type: text/plain; charset=latin1\r\n\r\na@example.com\r\n--b--\r\n", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, status: 415},
		{name: "multipart, JSON preamble", body: "{\"email\":\"b@example.com\"}\r\n--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@example.com\r\n--b--\r\n", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, status: 400},
		{name: "unicode skeleton", body: "email=%EF%BC%A1lice%40example.com", hdr: []string{"Content-Type", form}, want: "alice@example.com"},
		// PHP, Rails and Node's qs read a bracketed key as a list (or map)
		// holding the value: it counts as the field.
		{name: "form, email[]", body: "email[]=a%40example.com", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "form, encoded email[0]", body: "email%5B0%5D=a%40example.com", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "query, email[x][y]", query: "email[x][y]=a%40example.com", want: "a@example.com"},
		{name: "form, email[] and email agree", body: "email[]=a%40example.com&email=A%40example.com", hdr: []string{"Content-Type", form}, want: "a@example.com"},
		{name: "form, two email[] disagree", body: "email[]=a%40example.com&email[]=b%40example.com", hdr: []string{"Content-Type", form}, status: 400},
		{name: "query email[] and body email disagree", query: "email[]=b%40example.com", body: "email=a%40example.com", hdr: []string{"Content-Type", form}, status: 400},
		{name: "multipart, email[]", body: "--b\r\nContent-Disposition: form-data; name=\"email[]\"\r\n\r\na@example.com\r\n--b--\r\n", hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, want: "a@example.com"},
		{name: "json, email[] key", body: `{"email[]":"a@example.com"}`, hdr: []string{"Content-Type", js}, want: "a@example.com"},
		{name: "json, a combining mark alone", body: `{"email":"\u07B0"}`, hdr: []string{"Content-Type", js}, status: 400},
		{name: "form, a zero-width space alone", body: "email=%E2%80%8B", hdr: []string{"Content-Type", form}, status: 400},
		{name: "form, x[email] is not the field", body: "x[email]=a%40example.com", hdr: []string{"Content-Type", form}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := request(tc.query, body, tc.hdr...)
			got, u := er.email(r)
			status := 0
			if u != nil {
				status = u.status
				if u.reason == "" || strings.Contains(u.reason, "a@example.com") {
					t.Errorf("reason %q: want one that says what was wrong without the request's data", u.reason)
				}
			}
			if got != tc.want || status != tc.status {
				t.Errorf("got (%q, %d), want (%q, %d); reason %v", got, status, tc.want, tc.status, u)
			}
			if rest, _ := io.ReadAll(r.Body); !bytes.Equal(rest, body) && status != 413 {
				t.Errorf("the body read after the gateway is %q, want %q", rest, body)
			}
		})
	}
}

func TestEmailFolds(t *testing.T) {
	plain := newEmailReader([]string{"email"}, 1024, nil)
	folded := newEmailReader([]string{"email"}, 1024, []string{FoldPlusTag, FoldGmailDots})
	for _, tc := range []struct{ in, plain, folded string }{
		{"Alice@Example.com", "alice@example.com", "alice@example.com"},
		{"alice+news@example.com", "alice+news@example.com", "alice@example.com"},
		{"+alice@example.com", "+alice@example.com", "+alice@example.com"},
		{"a.l.ice@gmail.com", "a.l.ice@gmail.com", "alice@gmail.com"},
		{"A.Lice+x@GoogleMail.com", "a.lice+x@googlemail.com", "alice@gmail.com"},
		{"a.lice@example.com", "a.lice@example.com", "a.lice@example.com"},
		{"...@gmail.com", "...@gmail.com", "...@gmail.com"},
		{"not an email", "not an email", "not an email"},
		{"ﬁ@example.com", "fi@example.com", "fi@example.com"},
		{"\u212Aate@example.com", "kate@example.com", "kate@example.com"}, // Kelvin sign
		{"İlker@example.com", "ilker@example.com", "ilker@example.com"},
	} {
		if got := plain.normalize(tc.in); got != tc.plain {
			t.Errorf("normalize(%q) = %q, want %q", tc.in, got, tc.plain)
		}
		if got := folded.normalize(tc.in); got != tc.folded {
			t.Errorf("with folds, normalize(%q) = %q, want %q", tc.in, got, tc.folded)
		}
	}
}

// upstreamEmails returns the emails standard Go handlers read from a copy of
// the request: r.FormValue (urlencoded or multipart body, then the query)
// and json.NewDecoder(r.Body).Decode into a struct, whatever the
// Content-Type, keeping whatever it set even when it returned an error.
func upstreamEmails(query string, body []byte, hdr []string, fields []string) []string {
	var out []string
	r := request(query, body, hdr...)
	for _, f := range fields {
		out = append(out, r.FormValue(f))
	}
	for _, f := range fields {
		var s string
		json.NewDecoder(bytes.NewReader(body)).Decode(&jsonFieldDecoder{field: f, out: &s})
		out = append(out, s)
	}
	return out
}

// jsonFieldDecoder decodes a JSON object into the string field named field,
// matching keys as encoding/json matches struct fields: it unmarshals the
// object into a struct with the field's name (the tests use "email").
type jsonFieldDecoder struct {
	field string
	out   *string
}

func (d *jsonFieldDecoder) UnmarshalJSON(b []byte) error {
	switch d.field {
	case "email":
		var v struct {
			Email string `json:"email"`
		}
		err := json.Unmarshal(b, &v)
		*d.out = v.Email
		return err
	case "login":
		var v struct {
			Login string `json:"login"`
		}
		err := json.Unmarshal(b, &v)
		*d.out = v.Login
		return err
	}
	return nil
}

// FuzzEmail checks the rule the email reader exists for: whatever the
// request, either the gateway refuses it as unreadable, or every email a
// standard Go upstream reads from it (r.FormValue, json.NewDecoder) is the
// one the gateway counts. And the body reaches the upstream byte for byte.
func FuzzEmail(f *testing.F) {
	f.Add("", "application/x-www-form-urlencoded", []byte("email=a%40b.c&password=x"))
	f.Add("email=a%40b.c", "", []byte(nil))
	f.Add("", "application/json", []byte(`{"email":"a@b.c"}`))
	f.Add("", "text/plain", []byte(`{"EMAIL":"a@b.c","email":"a@b.c"} `))
	f.Add("", "application/json", []byte(`{"email":"a@b.c"}{"email":"d@e.f"}`))
	f.Add("login=x", "application/x-www-form-urlencoded", []byte(`{"login":"y"}`))
	f.Add("", "multipart/form-data; boundary=b", []byte("--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@b.c\r\n--b--\r\n"))
	f.Add("email=z%40b.c", "multipart/form-data; boundary=b", []byte("--b\r\nContent-Disposition: form-data; name=\"Email\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nz=40b.c\r\n--b--\r\n"))
	f.Add("", "application/json", []byte(`{"em\u0061il":"\u017Fam@b.c"}`))
	fields := []string{"email", "login"}
	er := newEmailReader(fields, 512, nil)
	f.Fuzz(func(t *testing.T, query, ctype string, body []byte) {
		var hdr []string
		if ctype != "" {
			hdr = []string{"Content-Type", ctype}
		}
		r := request(query, body, hdr...)
		got, u := er.email(r)
		rest, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(rest, body) {
			t.Fatalf("the body after the gateway read it is %q (%v), want %q", rest, err, body)
		}
		if u != nil {
			if u.status != 400 && u.status != 413 && u.status != 415 {
				t.Fatalf("refusal with status %d", u.status)
			}
			return
		}
		if got != "" && got != er.normalize(got) {
			t.Fatalf("email %q is not normalized (%q)", got, er.normalize(got))
		}
		for _, e := range upstreamEmails(query, body, hdr, fields) {
			if strings.TrimSpace(e) == "" {
				continue
			}
			if got == "" {
				t.Fatalf("the upstream reads %q, the gateway found no email", e)
			}
			if n := er.normalize(e); n != got {
				t.Fatalf("the upstream reads %q (%q), the gateway counts %q", e, n, got)
			}
		}
	})
}

// FuzzNormalizeEmail: normalizing is idempotent (the admin endpoint and the
// allowlist normalize values that may already be), with and without folds.
func FuzzNormalizeEmail(f *testing.F) {
	for _, s := range []string{"Alice@Example.com", " a.b+c@GoogleMail.com ", "ﬁ\u0301@x", "\u212A", "ǅ", "İ", "ẞ", "\u00a0x\u200b"} {
		f.Add(s)
	}
	folded := newEmailReader([]string{"email"}, 1024, []string{FoldPlusTag, FoldGmailDots})
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizeEmail(s)
		if NormalizeEmail(n) != n {
			t.Fatalf("NormalizeEmail(%q) = %q, and again %q", s, n, NormalizeEmail(n))
		}
		m := folded.normalize(s)
		if folded.normalize(m) != m {
			t.Fatalf("folded normalize(%q) = %q, and again %q", s, m, folded.normalize(m))
		}
	})
}

// TestFoldKeyMatchesEncodingJSON: a key the reader takes for the email
// field is exactly one encoding/json decodes into a field tagged "email".
func TestFoldKeyMatchesEncodingJSON(t *testing.T) {
	er := newEmailReader([]string{"email"}, 1024, nil)
	for _, k := range []string{"email", "EMAIL", "Email", "eMaIl", "em\u0061il", "emaıl", "emaİl", "ema\u0130l", "e-mail", "email ", "\u212Amail", "emai\u0049"} {
		var v struct {
			Email string `json:"email"`
		}
		b, _ := json.Marshal(map[string]string{k: "x"})
		json.Unmarshal(b, &v)
		if got, want := er.isField(k), v.Email == "x"; got != want {
			t.Errorf("key %q: reader says %v, encoding/json %v", k, got, want)
		}
	}
}

// BenchmarkEmail is the email reader on the login bodies real clients send:
// the cost an email rule adds to a request before its check.
func BenchmarkEmail(b *testing.B) {
	er := newEmailReader([]string{"email"}, 64<<10, nil)
	for _, tc := range []struct {
		name, ctype, body string
	}{
		{"form", "application/x-www-form-urlencoded", "email=alice%40example.com&password=hunter2&remember=on"},
		{"json", "application/json", `{"email":"alice@example.com","password":"hunter2","remember":true}`},
		{"multipart", "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nalice@example.com\r\n--b\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nhunter2\r\n--b--\r\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body := []byte(tc.body)
			b.ReportAllocs()
			for b.Loop() {
				r := request("", body, "Content-Type", tc.ctype)
				if e, u := er.email(r); e != "alice@example.com" || u != nil {
					b.Fatalf("got %q, %v", e, u)
				}
			}
		})
	}
}
