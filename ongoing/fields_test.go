package ongoing_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

// fieldWriter is a FieldWriter that keeps the heads written through it.
type fieldWriter struct {
	*httptest.ResponseRecorder
	codes  []int
	fields []h1wire.Field
}

func (w *fieldWriter) TakesFields() bool { return true }

func (w *fieldWriter) WriteHeaderFields(code int, fs []h1wire.Field) {
	w.codes = append(w.codes, code)
	w.fields = append(w.fields[:0], fs...)
}

func (w *fieldWriter) HeadField(name string) string {
	for _, f := range w.fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// TestAsFieldWriter: a FieldWriter, and a Recorder over one, take a head
// as a list; a Recorder over another writer does not, and HeadField then
// reads its header map. Through a Recorder, the first final status is
// recorded and passed on, interim ones are passed on, later final ones
// dropped, as with WriteHeader.
func TestAsFieldWriter(t *testing.T) {
	if _, ok := ongoing.AsFieldWriter(httptest.NewRecorder()); ok {
		t.Error("a ResponseRecorder taken for a FieldWriter")
	}
	plain := ongoing.StatusWriter(httptest.NewRecorder())
	if _, ok := ongoing.AsFieldWriter(plain); ok {
		t.Error("a Recorder over a ResponseRecorder taken for a FieldWriter")
	}
	plain.Header().Set("Location", "/a")
	if v := plain.HeadField("Location"); v != "/a" {
		t.Errorf("HeadField over a header map = %q, want /a", v)
	}

	under := &fieldWriter{ResponseRecorder: httptest.NewRecorder()}
	if fw, ok := ongoing.AsFieldWriter(under); !ok || fw != under {
		t.Errorf("AsFieldWriter(a FieldWriter) = %v, %v; want itself", fw, ok)
	}
	rec := ongoing.StatusWriter(under)
	fw, ok := ongoing.AsFieldWriter(rec)
	if !ok || fw != rec {
		t.Fatalf("AsFieldWriter(a Recorder over a FieldWriter) = %v, %v; want the Recorder", fw, ok)
	}
	fw.WriteHeaderFields(http.StatusEarlyHints, []h1wire.Field{{Name: "Link", Value: "</a>"}})
	fw.WriteHeaderFields(http.StatusFound, []h1wire.Field{{Name: "Location", Value: "/b"}})
	fw.WriteHeaderFields(http.StatusOK, nil)
	if s := rec.Status(); s != http.StatusFound {
		t.Errorf("Status %d, want 302", s)
	}
	if len(under.codes) != 2 || under.codes[0] != http.StatusEarlyHints || under.codes[1] != http.StatusFound {
		t.Errorf("heads passed on: %v, want [103 302]", under.codes)
	}
	if v := rec.HeadField("Location"); v != "/b" {
		t.Errorf("HeadField through the Recorder = %q, want /b", v)
	}
}
