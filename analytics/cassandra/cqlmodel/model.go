// Package cqlmodel is a model of a Cassandra node that speaks just enough of
// the CQL native protocol v4 for gocql to connect and for the analytics
// store to prepare and execute its statements, so that tests can inject the
// faults a real cluster produces only under duress: WriteTimeout and
// Unavailable errors, and requests that are never answered (a coordinator
// waiting for replicas that are gone). It is not a database: DDL and
// writes are acknowledged without effect and kept for the test to read,
// and a SELECT answers the rows the test gives it. Tests only.
package cqlmodel

import (
	"encoding/binary"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/cqlwire"
)

// Server is a model of a node: it answers the analytics store's statements
// (cqlwire does the protocol) and keeps what it received for the test.
type Server struct {
	*cqlwire.Server

	// Mu guards the fields below, which tests read and set.
	Mu          sync.Mutex
	Executes    map[string]int      // statement → EXECUTEs seen
	Bound       [][][]byte          // values of every EXECUTE of an INSERT
	Batches     []Batch             // BATCHes received
	Applied     []Stmt              // writes answered OK (EXECUTEs and the statements of BATCHes), in order
	DDL         []string            // CREATE statements received, in order
	Consistency map[string][]uint16 // statement → consistency of each EXECUTE
	// Reply picks the answer to an EXECUTE of stmt (a BATCH's is
	// "BATCH"): ReplyOK, or an error code, or ReplyStall to never answer.
	// Nil: always OK.
	Reply func(stmt string) int
	// Rows answers a SELECT; nil: no rows.
	Rows func(stmt string, values [][]byte) (cols []Col, rows [][][]byte)
	// CAS answers a conditional EXECUTE; nil: [applied] true.
	CAS func(stmt string, values [][]byte) (cols []Col, rows [][][]byte)
}

// Stmt is a statement of an EXECUTE or a BATCH: its text and bound values.
type Stmt = cqlwire.Stmt

// Col is a result column or bind marker: its name and CQL type.
type Col = cqlwire.Col

// Batch is a BATCH received.
type Batch struct {
	Stmts               []Stmt
	Consistency, Serial uint16
}

// Answers of Reply (ReplyOK, ReplyStall, or an error code), and the CQL
// types of columns.
const (
	ReplyOK    = 0
	ReplyStall = -1

	ErrUnavailable  = 0x1000
	ErrWriteTimeout = 0x1100
	ErrWriteFailure = 0x1500 // replicas timing out among themselves

	TypeBigint    = cqlwire.TypeBigint
	TypeBoolean   = cqlwire.TypeBoolean
	TypeInt       = cqlwire.TypeInt
	TypeTimestamp = cqlwire.TypeTimestamp
	TypeUUID      = cqlwire.TypeUUID
	TypeInet      = cqlwire.TypeInet
	TypeVarchar   = cqlwire.TypeVarchar
	TypeList      = cqlwire.TypeList
	TypeMap       = cqlwire.TypeMap
	TypeSet       = cqlwire.TypeSet
)

// collections are the collection columns of the Store's tables.
var collections = map[string]Col{
	"dims": {Name: "dims", Type: TypeMap, Key: TypeVarchar, Elem: TypeBigint},
	"regs": {Name: "regs", Type: TypeSet, Elem: TypeInt},
}

// New starts a Server on a free loopback port; it stops at the end of t.
func New(t testing.TB) *Server { return NewAt(t, "127.0.0.1:0") }

// NewAt starts a Server on addr; it stops at the end of t.
func NewAt(t testing.TB, addr string) *Server {
	s := &Server{Executes: map[string]int{}, Consistency: map[string][]uint16{}}
	s.Server = cqlwire.Start(t, addr, s)
	return s
}

// NumBatches returns how many BATCH messages the server received.
func (s *Server) NumBatches() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.Batches)
}

// Count returns the EXECUTEs of the statements that start with prefix.
func (s *Server) Count(prefix string) int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	n := 0
	for k, v := range s.Executes {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// Shape implements cqlwire.Handler: the bind markers and the selected
// columns of any statement of the store's.
func (s *Server) Shape(q string) (binds, result []Col, ok bool) {
	return bindTypes(q), SelectCols(q), true
}

// Query implements cqlwire.Handler: the schema's statements are
// acknowledged (no schema change event, no agreement wait) and kept. An
// ALTER TABLE … ADD is refused as Cassandra refuses it on the tables the
// CREATE statements made, which hold the columns already.
func (s *Server) Query(q string) cqlwire.Answer {
	if m := alterAdd.FindStringSubmatch(q); m != nil {
		return cqlwire.Answer{Error: cqlwire.ErrorBody(0x2200, "Column with name '"+m[1]+"' already exists")}
	}
	if !strings.HasPrefix(q, "CREATE") {
		return cqlwire.Answer{Error: cqlwire.ErrorBody(0x2200, "cqlmodel: unexpected query "+q)}
	}
	s.Mu.Lock()
	s.DDL = append(s.DDL, q)
	s.Mu.Unlock()
	return cqlwire.Answer{}
}

var alterAdd = regexp.MustCompile(`^ALTER TABLE \w+\.(?:points_\w+|link_days|rollup_active) ADD \((\w+) `)

// failed returns the answer of a Reply code other than ReplyOK.
func failed(code int, consistency uint16, writeType string) cqlwire.Answer {
	switch code {
	case ReplyStall:
		return cqlwire.Answer{Stall: true}
	case ErrUnavailable:
		return cqlwire.Answer{Error: cqlwire.Unavailable(consistency, 2, 1)}
	case ErrWriteFailure:
		return cqlwire.Answer{Error: cqlwire.WriteFailure(consistency, 1, 2, 2, writeType,
			"Operation failed - received 1 responses and 2 failures: TIMEOUT from /127.0.0.12:7000, TIMEOUT from /127.0.0.11:7000")}
	default:
		return cqlwire.Answer{Error: cqlwire.WriteTimeout(consistency, 0, 1, writeType)}
	}
}

// Execute implements cqlwire.Handler.
func (s *Server) Execute(st cqlwire.Stmt, consistency uint16) cqlwire.Answer {
	s.Mu.Lock()
	s.Executes[st.Q]++
	s.Consistency[st.Q] = append(s.Consistency[st.Q], consistency)
	reply, rows, cas := s.Reply, s.Rows, s.CAS
	s.Mu.Unlock()
	if reply != nil {
		if code := reply(st.Q); code != ReplyOK {
			return failed(code, consistency, "SIMPLE")
		}
	}
	switch {
	case strings.HasPrefix(st.Q, "SELECT"):
		a := cqlwire.Answer{Cols: SelectCols(st.Q)} // by default: no rows
		if rows != nil {
			a.Cols, a.Rows = rows(st.Q, st.Values)
		}
		return a
	case strings.Contains(st.Q, " IF "):
		// A lightweight transaction: applied, unless CAS says not; one
		// that applies has its write checked as Cassandra checks it.
		a := cqlwire.Answer{Cols: []Col{{Name: "[applied]", Type: TypeBoolean}}, Rows: [][][]byte{{{1}}}}
		if cas != nil {
			a.Cols, a.Rows = cas(st.Q, st.Values)
		}
		if len(a.Rows) == 1 && len(a.Rows[0]) > 0 && len(a.Rows[0][0]) == 1 && a.Rows[0][0][0] == 1 {
			if refused, ok := st.Applies(time.Now()); ok {
				return refused
			}
		}
		s.Mu.Lock()
		s.Bound = append(s.Bound, st.Values)
		s.Mu.Unlock()
		return a
	}
	s.Mu.Lock()
	s.Bound = append(s.Bound, st.Values)
	s.Applied = append(s.Applied, st)
	s.Mu.Unlock()
	return cqlwire.Answer{}
}

// Batch implements cqlwire.Handler.
func (s *Server) Batch(stmts []cqlwire.Stmt, consistency, serial uint16) cqlwire.Answer {
	s.Mu.Lock()
	s.Batches = append(s.Batches, Batch{stmts, consistency, serial})
	reply := s.Reply
	s.Mu.Unlock()
	if reply != nil {
		if code := reply("BATCH"); code != ReplyOK {
			if serial != 0 {
				return failed(code, serial, "CAS")
			}
			return failed(code, consistency, "UNLOGGED_BATCH")
		}
	}
	s.Mu.Lock()
	s.Applied = append(s.Applied, stmts...)
	s.Mu.Unlock()
	return cqlwire.Answer{Cols: []Col{{Name: "[applied]", Type: TypeBoolean}}, Rows: [][][]byte{{{1}}}}
}

func bindTypes(q string) []Col {
	types := map[string]uint16{
		"short_key": TypeVarchar, "bucket": TypeTimestamp, "start": TypeTimestamp, "writer": TypeUUID,
		"human": TypeBigint, "bot": TypeBigint, "preview": TypeBigint, "scanner": TypeBigint, "prefetch": TypeBigint, "internal": TypeBigint, "step": TypeInt, "period": TypeTimestamp, "shard": TypeInt,
		"id": TypeBigint, "at_us": TypeBigint, "done": TypeTimestamp, "holder": TypeUUID, "name": TypeVarchar,
		"dim": TypeInt, "day": TypeTimestamp, "value": TypeVarchar, "visits": TypeBigint, "reg": TypeInt, "rho": TypeInt, "slot": TypeInt,
		"epoch": TypeBigint, "erased_ns": TypeBigint,
	}
	var cols []Col
	rest := q
	if strings.HasPrefix(q, "INSERT") {
		names := strings.Split(q[strings.Index(q, "(")+1:strings.Index(q, ")")], ", ")
		v := q[strings.Index(q, "VALUES (")+len("VALUES ("):]
		values := strings.Split(v[:strings.Index(v, ")")], ", ")
		for i, n := range names {
			if values[i] == "?" {
				cols = append(cols, Col{Name: n, Type: types[n]})
			}
		}
		rest = v[strings.Index(v, ")"):]
	}
	fields := strings.Fields(rest)
	for i, f := range fields {
		if f != "?" && f != "?," {
			continue
		}
		switch fields[i-1] {
		case "TTL":
			cols = append(cols, Col{Name: "[ttl]", Type: TypeInt})
		case "TIMESTAMP":
			cols = append(cols, Col{Name: "[timestamp]", Type: TypeBigint})
		case "LIMIT":
			cols = append(cols, Col{Name: "[limit]", Type: TypeInt})
		case "IN":
			cols = append(cols, Col{Name: "in(" + fields[i-2] + ")", Type: TypeList, Elem: types[fields[i-2]]})
		case "+":
			cols = append(cols, collections[fields[i-2]])
		default:
			cols = append(cols, Col{Name: fields[i-2], Type: types[fields[i-2]]})
		}
	}
	return cols
}

var resultTypes = map[string]uint16{
	"start": TypeTimestamp, "writer": TypeUUID, "human": TypeBigint, "bot": TypeBigint,
	"preview": TypeBigint, "scanner": TypeBigint, "prefetch": TypeBigint, "internal": TypeBigint,
	"step": TypeInt, "id": TypeBigint, "at_us": TypeBigint, "done": TypeTimestamp, "short_key": TypeVarchar,
	"day": TypeTimestamp, "value": TypeVarchar, "visits": TypeBigint, "reg": TypeInt, "rho": TypeInt, "slot": TypeInt,
	"name": TypeVarchar, "epoch": TypeBigint, "erased_ns": TypeBigint,
}

// SelectCols returns the columns a SELECT of the Store's returns.
func SelectCols(q string) []Col {
	var cols []Col
	if strings.HasPrefix(q, "SELECT ") {
		for _, n := range strings.Split(q[len("SELECT "):strings.Index(q, " FROM")], ", ") {
			if c, ok := collections[n]; ok {
				cols = append(cols, c)
				continue
			}
			cols = append(cols, Col{Name: n, Type: resultTypes[n]})
		}
	}
	return cols
}

// BE64 is a bigint or timestamp cell.
func BE64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// BE32 is an int cell.
func BE32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// TimeCell is a timestamp cell (ms).
func TimeCell(t time.Time) []byte { return BE64(t.UnixMilli()) }
