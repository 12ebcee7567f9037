package cqlwire

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/internal/testkit"
)

// Case is a statement, or a batch of statements, that Compare runs on a
// real node and on a model.
type Case struct {
	Name  string
	Q     string // one statement…
	Args  []any
	Batch []Entry         // …or a batch of these (Q empty)
	Type  gocql.BatchType // the batch's type
	Rows  bool            // compare the rows a SELECT or a conditional statement answers too
	// Refused: both must refuse the case (it is there for that), not only
	// agree.
	Refused bool
}

// Entry is a statement of a Case's batch.
type Entry struct {
	Q    string
	Args []any
}

// Outcome is what a session answered a Case: an error's code and message,
// or the rows, in a comparable form.
type Outcome struct {
	Code int
	Err  string
	Rows []string // each row's columns, sorted, as name=value; the rows sorted
}

func (o Outcome) String() string {
	if o.Err != "" {
		return fmt.Sprintf("error %#x %q", o.Code, o.Err)
	}
	return fmt.Sprintf("ok %q", o.Rows)
}

// Exec runs c on sess.
func Exec(sess *gocql.Session, c Case) Outcome {
	var (
		err  error
		rows []map[string]any
	)
	switch {
	case strings.Contains(c.Q, " IF "):
		// A lightweight transaction's result columns are known only once
		// it ran: gocql reads them with MapScanCAS.
		m := map[string]any{}
		var applied bool
		if applied, err = sess.Query(c.Q, c.Args...).MapScanCAS(m); err == nil {
			m["[applied]"] = applied
			rows = []map[string]any{m}
		}
	case c.Q != "":
		it := sess.Query(c.Q, c.Args...).Iter()
		rows, err = it.SliceMap()
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	default:
		b := sess.NewBatch(c.Type)
		for _, e := range c.Batch {
			b.Query(e.Q, e.Args...)
		}
		if !slices.ContainsFunc(c.Batch, func(e Entry) bool { return strings.Contains(e.Q, " IF ") }) {
			err = sess.ExecuteBatch(b)
		} else {
			m := map[string]any{}
			var applied bool
			if applied, _, err = sess.MapExecuteBatchCAS(b, m); err == nil {
				m["[applied]"] = applied
				rows = []map[string]any{m}
			}
		}
	}
	var o Outcome
	var re gocql.RequestError
	switch {
	case errors.As(err, &re):
		return Outcome{Code: re.Code(), Err: re.Message()}
	case err != nil:
		return Outcome{Code: -1, Err: err.Error()}
	}
	if c.Rows {
		for _, r := range rows {
			var cols []string
			for k, v := range r {
				switch x := v.(type) {
				case time.Time:
					v = x.UTC().Format(time.RFC3339Nano)
				case []byte:
					if len(x) > 32 {
						v = fmt.Sprintf("%d bytes %x", len(x), sha256.Sum256(x))
					}
				case string:
					if len(x) > 64 {
						v = fmt.Sprintf("%d bytes %x", len(x), sha256.Sum256([]byte(x)))
					}
				}
				cols = append(cols, fmt.Sprintf("%s=%v", k, v))
			}
			slices.Sort(cols)
			o.Rows = append(o.Rows, strings.Join(cols, " "))
		}
		slices.Sort(o.Rows)
	}
	return o
}

// Sessions returns a session on a real node (CASSANDRA_HOSTS; the test is
// skipped without it) and one on a model listening at model, each having
// run schema: the two sides of a Compare.
func Sessions(t *testing.T, model string, schema []string) (real, modelSession *gocql.Session) {
	t.Helper()
	real = testkit.CassandraSession(t, testkit.CassandraHosts(t)...)
	modelSession = testkit.CassandraSession(t, model)
	for _, st := range schema {
		for _, s := range []*gocql.Session{real, modelSession} {
			if err := s.Query(st).Exec(); err != nil {
				t.Fatalf("%s: %v", st, err)
			}
		}
	}
	return real, modelSession
}

// Compare runs every case on a real node and on a model, in order, and
// fails t where their answers differ, or where a case meant to be refused
// is not.
func Compare(t *testing.T, real, model *gocql.Session, cases []Case) {
	t.Helper()
	for _, c := range cases {
		r, m := Exec(real, c), Exec(model, c)
		switch {
		case r.Code != m.Code || r.Err != m.Err || !slices.Equal(r.Rows, m.Rows):
			t.Errorf("%s:\n  cassandra: %v\n  model:     %v", c.Name, r, m)
		case c.Refused && r.Err == "":
			t.Errorf("%s: accepted by both, want it refused: %v", c.Name, r)
		case testing.Verbose():
			t.Logf("%s: both %v", c.Name, r)
		}
	}
}
