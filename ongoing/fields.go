package ongoing

import (
	"net/http"

	"github.com/linkgate/linkgate/h1wire"
)

// FieldWriter is a response writer that takes a head's fields as a list,
// as a relayed head came, rather than through its header map: the proxy
// hands it the upstream's end-to-end fields, with no map built and read
// again. The writers of h1serve's and h2serve's loops are ones; so are
// the wrappers that pass heads on (Recorder, the redirect cache's
// recorder) while the writer they wrap is one.
type FieldWriter interface {
	http.ResponseWriter
	// TakesFields reports whether the writer takes a head as a list: a
	// wrapper's answer depends on the writer it wraps.
	TakesFields() bool
	// WriteHeaderFields is WriteHeader(code) for a head of the header
	// map's fields and then fields (their names canonical, their values
	// valid), which it copies.
	WriteHeaderFields(code int, fields []h1wire.Field)
	// HeadField is the first value of the named field (canonical) of the
	// head written: the header map's, else the fields WriteHeaderFields
	// took; "" for none.
	HeadField(name string) string
}

// AsFieldWriter returns w as a FieldWriter when it takes a head as a
// list.
func AsFieldWriter(w http.ResponseWriter) (FieldWriter, bool) {
	fw, ok := w.(FieldWriter)
	if !ok || !fw.TakesFields() {
		return nil, false
	}
	return fw, true
}

// TakesFields: a Recorder takes a head as a list when the writer it wraps
// does.
func (w *Recorder) TakesFields() bool {
	_, ok := AsFieldWriter(w.ResponseWriter)
	return ok
}

// WriteHeaderFields is WriteHeader's for a head of the header map's fields
// and fields; only when TakesFields.
func (w *Recorder) WriteHeaderFields(code int, fields []h1wire.Field) {
	if w.passes(code) {
		w.ResponseWriter.(FieldWriter).WriteHeaderFields(code, fields)
	}
}

// HeadField is the first value of the named field (canonical) of the
// answer's head: the writer underneath's, when it is a FieldWriter; else
// the header map's.
func (w *Recorder) HeadField(name string) string {
	if fw, ok := w.ResponseWriter.(FieldWriter); ok {
		return fw.HeadField(name)
	}
	if v := w.Header()[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
