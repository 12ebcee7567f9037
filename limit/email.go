package limit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// An email rule must count the email the upstream will read, or refuse the
// request: a limit on wrong passwords per email that a client can step
// around by moving the email somewhere the gateway does not look is no
// limit. So the gateway reads the configured fields wherever common
// upstreams read them, and when it cannot be sure it found the same value
// (a body it cannot parse, two values that disagree, an encoding it cannot
// read) it says so instead of guessing: the rule's on_unreadable policy then
// refuses the request (the default), lets it through uncounted, or counts it
// by client address.
//
// Where common upstreams read the email:
//
//   - Go's r.FormValue: the urlencoded body (Content-Type
//     application/x-www-form-urlencoded, even with a malformed parameter),
//     or the multipart body, and the query string; the first value wins,
//     the body's before the query's for urlencoded bodies, the query's first
//     for multipart ones.
//   - Go's json.NewDecoder(r.Body).Decode(&v), whatever the Content-Type:
//     the first JSON value only (trailing data is never read), fields matched
//     case-insensitively by Unicode simple folding, the last of duplicate
//     keys winning, \u escapes in keys decoded.
//   - Other stacks differ: the last form value wins (PHP), ';' separates
//     query pairs, keys are matched exactly, a charset is honoured, a
//     Content-Encoding is decoded.
//
// The rules below make every one of those readers find the same email or
// none; anything else is unreadable.

// unreadable says why a request's email cannot be told. Under on_unreadable
// reject the request is answered status with reason in the problem's detail.
type unreadable struct {
	status int    // 400, 408, 413 or 415
	reason string // what the gateway could not read, without the request's data
	// close: the body is not read to its end, so the answer closes the
	// connection rather than have the server drain the rest first.
	close bool
	// broken: the body could not be read at all (too slow, malformed); the
	// request cannot go on to the upstream whatever on_unreadable says.
	broken bool
}

func (u *unreadable) Error() string { return "limit: cannot tell the email: " + u.reason }

func badRequest(format string, a ...any) *unreadable {
	return &unreadable{status: http.StatusBadRequest, reason: fmt.Sprintf(format, a...)}
}

func badMedia(format string, a ...any) *unreadable {
	return &unreadable{status: http.StatusUnsupportedMediaType, reason: fmt.Sprintf(format, a...)}
}

// The email folds an identity may turn on (identity.email_fold).
const (
	FoldPlusTag   = "plus_tag"   // alice+news@example.com counts as alice@example.com
	FoldGmailDots = "gmail_dots" // a.lice@gmail.com and alice@googlemail.com count as alice@gmail.com
)

// emailReader is how an identifier reads emails: the configured fields and
// folds, compiled. It is immutable.
type emailReader struct {
	keys      []string // identity.email_fields, folded as encoding/json folds object keys
	maxBody   int64
	plusTag   bool
	gmailDots bool
}

func newEmailReader(fields []string, maxBody int64, folds []string) emailReader {
	er := emailReader{maxBody: maxBody}
	for _, f := range fields {
		er.keys = append(er.keys, foldKey(f))
	}
	er.plusTag = slices.Contains(folds, FoldPlusTag)
	er.gmailDots = slices.Contains(folds, FoldGmailDots)
	return er
}

// isField reports whether a form or JSON key names an email field. Keys are
// compared as encoding/json compares object keys with struct fields
// (Unicode simple folding: "EMAIL" and "Email" are "email"), for every kind
// of body: Go's form values are case-sensitive, but other stacks bind form
// fields case-insensitively, and a key the gateway matches too eagerly can
// only add a value to compare, never hide one. For the same reason a key
// with brackets is the field before them: PHP, Rails and Node's qs read
// "email[]=V" and "email[0]=V" as a list (or map) holding V, which an
// upstream may take as the email.
func (er *emailReader) isField(key string) bool {
	if i := strings.IndexByte(key, '['); i > 0 {
		key = key[:i]
	}
	var buf [32]byte
	k := appendFoldedKey(buf[:0], key)
	for _, f := range er.keys {
		if string(k) == f {
			return true
		}
	}
	return false
}

// normalize is how an email is counted: NormalizeEmail, then the folds the
// identity turned on.
func (er *emailReader) normalize(s string) string {
	s = NormalizeEmail(s)
	if !er.plusTag && !er.gmailDots {
		return s
	}
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return s
	}
	local, domain := s[:at], s[at+1:]
	if er.plusTag {
		if i := strings.IndexByte(local, '+'); i > 0 {
			local = local[:i]
		}
	}
	if er.gmailDots && (domain == "gmail.com" || domain == "googlemail.com") {
		if l := strings.ReplaceAll(local, ".", ""); l != "" {
			local = l
		}
		domain = "gmail.com"
	}
	return local + "@" + domain
}

// NormalizeEmail is how an email is compared: trimmed and case-folded. Beyond
// ASCII it is also reduced to a skeleton that common database collations
// cannot tell apart from it (compatibility decomposition, combining marks
// and invisible format characters dropped, Unicode case folding), so
// that "Ａlice", "alicé" and "ali\u200bce" count as "alice": an upstream
// whose user table compares accent- and width-insensitively would log them
// all in as one user. Folding too much only makes a limit stricter.
func NormalizeEmail(s string) string {
	s = strings.TrimSpace(s)
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return skeleton(s)
		}
	}
	return strings.ToLower(s)
}

func skeleton(s string) string {
	var b strings.Builder
	// Invalid bytes first, as ranging over the string would: norm passes
	// them through and may then leave the next rune undecomposed.
	s = strings.ToValidUTF8(s, "\uFFFD")
	for _, r := range norm.NFKD.String(s) {
		// Upper then lower case folds ſ to s and the Kelvin sign to k, and
		// never yields a combining mark (the smallest rune of a folding
		// orbit can be one: U+0345 for the Greek iota).
		r = unicode.ToLower(unicode.ToUpper(r))
		if unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) {
			continue
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// email returns the normalized email r names in the configured fields of its
// query string and body: "" when it names none, an *unreadable when the
// gateway cannot be sure which email the upstream will read. It reads at
// most maxBody bytes of the body and puts them back, so that the upstream
// receives the body byte for byte whatever its size.
func (er *emailReader) email(r *http.Request) (string, *unreadable) {
	return er.emailIn(r, &requestBody{r: r, max: er.maxBody})
}

// emailIn is email, the body read through rb, which other readers of the
// same request share.
func (er *emailReader) emailIn(r *http.Request, rb *requestBody) (string, *unreadable) {
	var found emailSet
	if r.URL.RawQuery != "" {
		// Go's r.URL.Query drops a pair it cannot parse; another stack may
		// read it (';' as a separator): cannot tell.
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return "", badRequest("the query string does not parse (%v)", err)
		}
		if u := found.addValues(er, q, "query string"); u != nil {
			return "", u
		}
	}
	if u := er.body(r, rb, &found); u != nil {
		return "", u
	}
	return found.email, nil
}

// body adds the emails of r's body, read through rb, to found.
func (er *emailReader) body(r *http.Request, rb *requestBody, found *emailSet) *unreadable {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return badMedia("the body has Content-Encoding %q; the gateway reads only bodies without one", c)
			}
		}
	}
	// A body over maxBody by its Content-Length is not read at all: under
	// skip it goes on untouched.
	buf, u := rb.bytes()
	if u != nil {
		return u
	}
	if len(buf) == 0 {
		return nil
	}
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		return badMedia("the request has %d Content-Type headers", len(cts))
	}
	var mt string
	var params map[string]string
	var err error
	if len(cts) == 1 {
		// Go's ParseForm reads an urlencoded body whose parameters do not
		// parse, a JSON decoder reads any body: refuse rather than skip.
		if mt, params, err = mime.ParseMediaType(cts[0]); err != nil {
			return badMedia("the Content-Type %q does not parse", truncate(cts[0]))
		}
	}
	if cs, ok := params["charset"]; ok && !isUTF8(cs) {
		return badMedia("the body's charset is %q; the gateway reads UTF-8 only", truncate(cs))
	}
	// A JSON decoder reads a body whatever its Content-Type says, and only
	// a JSON body starts with '{' (a form key never does).
	jsonBody := mt == "application/json" || strings.HasSuffix(mt, "+json") || looksJSON(buf)
	switch mt {
	case "application/x-www-form-urlencoded":
		vs, err := url.ParseQuery(string(buf))
		if err != nil {
			return badRequest("the form body does not parse (%v)", err)
		}
		if u := found.addValues(er, vs, "body"); u != nil {
			return u
		}
	case "multipart/form-data":
		if u := er.multipart(buf, params["boundary"], found); u != nil {
			return u
		}
	default:
		if !jsonBody {
			if mt == "" {
				return badMedia("the body has no Content-Type and is not JSON; the gateway reads the email from forms and JSON only")
			}
			return badMedia("the body is %s; the gateway reads the email from forms and JSON only", truncate(mt))
		}
	}
	if jsonBody {
		return er.json(buf, found)
	}
	return nil
}

// multipart adds the email fields of a multipart/form-data body to found.
// A part is an email field by the name of its Content-Disposition, whatever
// the disposition's type (Go reads form-data only; others are laxer).
func (er *emailReader) multipart(buf []byte, boundary string, found *emailSet) *unreadable {
	if boundary == "" {
		return badRequest("the multipart body has no boundary")
	}
	mr := multipart.NewReader(bytes.NewReader(buf), boundary)
	for {
		p, err := mr.NextPart() // decodes quoted-printable parts, as Go's ReadForm does
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return badRequest("the multipart body does not parse")
		}
		_, disp, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		if err != nil {
			return badRequest("a part of the multipart body has a Content-Disposition that does not parse")
		}
		if !er.isField(disp["name"]) {
			continue
		}
		if _, ok := disp["filename"]; ok {
			return badRequest("a file part is named like an email field")
		}
		if ct := p.Header.Get("Content-Type"); ct != "" {
			_, ps, err := mime.ParseMediaType(ct)
			if err != nil {
				return badMedia("an email part's Content-Type does not parse")
			}
			if cs, ok := ps["charset"]; ok && !isUTF8(cs) {
				return badMedia("an email part's charset is %q; the gateway reads UTF-8 only", truncate(cs))
			}
		}
		switch cte := strings.ToLower(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding"))); cte {
		case "", "7bit", "8bit", "binary":
		default:
			return badMedia("an email part has Content-Transfer-Encoding %q", truncate(cte))
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return badRequest("the multipart body does not parse")
		}
		if u := found.add(er, string(v), "body"); u != nil {
			return u
		}
	}
}

// json adds the email fields of a JSON body to found. The body must be one
// JSON object and nothing else: a decoder reads the first value and ignores
// what follows, a stricter parser refuses the body, and the gateway cannot
// know which one the upstream uses. Every key that folds to an email field
// must hold a string; duplicates must agree.
func (er *emailReader) json(buf []byte, found *emailSet) *unreadable {
	if !utf8.Valid(buf) {
		return badRequest("the JSON body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	syntax := func() *unreadable { return badRequest("the JSON body does not parse") }
	tok, err := dec.Token()
	if err != nil {
		return syntax()
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return badRequest("the JSON body is not an object")
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return syntax()
		}
		key, _ := kt.(string)
		if !er.isField(key) {
			if err := skipValue(dec); err != nil {
				return syntax()
			}
			continue
		}
		vt, err := dec.Token()
		if err != nil {
			return syntax()
		}
		s, ok := vt.(string)
		if !ok {
			return badRequest("a JSON email field holds %s, not a string", jsonKind(vt))
		}
		if u := found.add(er, s, "body"); u != nil {
			return u
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return syntax()
	}
	if rest := bytes.TrimLeft(buf[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		if looksJSON(rest) || strings.ContainsRune(`"-0123456789tfn`, rune(rest[0])) {
			return badRequest("the JSON body holds more than one value")
		}
		return badRequest("the JSON body has data after its value")
	}
	return nil
}

// skipValue reads the value dec is at, whatever its depth.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

func jsonKind(t json.Token) string {
	switch t := t.(type) {
	case json.Delim:
		if t == '{' {
			return "an object"
		}
		return "an array"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "something else"
}

// looksJSON reports whether b starts, after JSON white space and a byte
// order mark, like a JSON object or array.
func looksJSON(b []byte) bool {
	b = bytes.TrimPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("\ufeff"))
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

func isUTF8(charset string) bool {
	switch strings.ToLower(strings.TrimSpace(charset)) {
	case "utf-8", "utf8", "us-ascii":
		return true
	}
	return false
}

// truncate bounds a client's string quoted in a problem's detail.
func truncate(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "�")
}

// emailSet is the email a request names, collected from every place it
// may be: all must agree.
type emailSet struct {
	email string // normalized; "" until one is found
	where string // where it was first found
}

func (s *emailSet) addValues(er *emailReader, vs url.Values, where string) *unreadable {
	for k, v := range vs {
		if !er.isField(k) {
			continue
		}
		for _, x := range v {
			if u := s.add(er, x, where); u != nil {
				return u
			}
		}
	}
	return nil
}

// add adds one value of an email field found in where. A blank value names
// no email (the upstream finds none either). A value with control
// characters or bytes that are not UTF-8 is unreadable: a NUL may end the
// string in the upstream's database driver, and bytes that are not UTF-8
// are read differently by every stack. So is a value that normalizes to
// nothing (combining marks or invisible characters alone): the upstream
// reads a value where the gateway would count none.
func (s *emailSet) add(er *emailReader, raw, where string) *unreadable {
	v := strings.TrimSpace(raw)
	if v == "" {
		return nil
	}
	if !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return badRequest("an email field in the %s holds control characters or bytes that are not UTF-8", where)
	}
	n := er.normalize(v)
	if n == "" {
		return badRequest("an email field in the %s holds nothing but marks or invisible characters", where)
	}
	switch {
	case s.email == "":
		s.email, s.where = n, where
	case n == s.email:
	case where != s.where:
		return badRequest("the query string and the body name different emails")
	default:
		return badRequest("the %s names different emails", where)
	}
	return nil
}

// foldKey folds a key as encoding/json folds an object's keys to match them
// with struct fields: ASCII upper case, every other rune to the smallest of
// its Unicode simple folding orbit (so the Kelvin sign K is K, and ſ is S).
func foldKey(s string) string { return string(appendFoldedKey(nil, s)) }

func appendFoldedKey(out []byte, s string) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// foldRune returns the smallest rune of r's simple folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// replayBody is a request body whose first bytes were read by the limiter:
// it reads them again, then the rest, and closes the original.
type replayBody struct {
	io.Reader
	c io.Closer
}

func (b *replayBody) Close() error { return b.c.Close() }
