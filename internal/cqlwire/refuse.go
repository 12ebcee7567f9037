package cqlwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
)

// What Cassandra 4.0 refuses, so that no model accepts it: the server
// learns the keyspaces and tables from the CREATE statements it passes on
// to its Handler, and checks every statement against them before the
// Handler sees it, with Cassandra's error code (Invalid, 0x2200) and
// message. TestRefusalsAsCassandra in the stores' packages runs the same
// statements on a real node and on the models and compares the answers.
//
// Refused when prepared: a table or keyspace never created, a conditional
// statement with a custom timestamp. Refused when executed: a null or
// unset partition key or clustering column (in an equality), an empty
// partition key of one column, a key value over 65,535 bytes, a negative
// TTL, a TTL over 20 years (630,720,000 s) or one that expires after
// 2038-01-19T03:14:07Z (Cassandra 4.0 stores the expiry in 32-bit seconds,
// CASSANDRA-14092), a null or out of range write timestamp, a LIMIT under
// 1. In a BATCH, beside each statement's own: a SELECT, conditions across
// tables or partitions, and statements of more than one partition whose
// data is over batch_size_fail_threshold_in_kb's default, 50 KB (a
// batch of one partition is never measured: it is one mutation).

// Cassandra's limits.
const (
	maxTTL        = 20 * 365 * 24 * 3600 // seconds
	maxKeyLength  = math.MaxUint16
	batchFailSize = 50 << 10 // batch_size_fail_threshold_in_kb: 50
	codeInvalid   = 0x2200
	codeServer    = 0x0000
)

// MaxExpiry is the last second Cassandra 4.0 can store as a cell's expiry
// (localExpirationTime, an int32 of seconds, whose largest value marks a
// cell that never expires): a write whose TTL ends later is refused.
var MaxExpiry = time.Unix(math.MaxInt32-1, 0).UTC()

// refusal is an ERROR answer of Cassandra's.
type refusal struct {
	code int32
	msg  string
}

func invalid(format string, a ...any) *refusal {
	return &refusal{codeInvalid, fmt.Sprintf(format, a...)}
}

func (r *refusal) answer() Answer { return Answer{Error: ErrorBody(r.code, r.msg)} }

// schema is what the server learnt from the CREATE statements.
type schema struct {
	mu        sync.Mutex
	keyspaces map[string]bool
	tables    map[string]*table // by keyspace.table
}

type table struct {
	name                  string // keyspace.table
	partition, clustering []string
}

func (t *table) isPartition(col string) bool { return index(t.partition, col) >= 0 }
func (t *table) isClustering(col string) bool {
	return index(t.clustering, col) >= 0
}

func index(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

var (
	createKeyspace = regexp.MustCompile(`(?is)^CREATE KEYSPACE (?:IF NOT EXISTS )?(\w+)`)
	createTable    = regexp.MustCompile(`(?is)^CREATE TABLE (?:IF NOT EXISTS )?(\w+)\.(\w+)\s*\(`)
)

// learn records a CREATE KEYSPACE or CREATE TABLE.
func (s *schema) learn(q string) {
	q = strings.TrimSpace(q)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keyspaces == nil {
		s.keyspaces, s.tables = map[string]bool{}, map[string]*table{}
	}
	if m := createKeyspace.FindStringSubmatch(q); m != nil {
		s.keyspaces[strings.ToLower(m[1])] = true
		return
	}
	m := createTable.FindStringSubmatchIndex(q)
	if m == nil {
		return
	}
	t := &table{name: strings.ToLower(q[m[2]:m[3]] + "." + q[m[4]:m[5]])}
	for _, def := range splitTop(inner(q[m[1]-1:])) {
		f := strings.Fields(def)
		switch {
		case len(f) >= 2 && strings.EqualFold(f[0], "PRIMARY") && strings.EqualFold(f[1], "KEY"):
			key := splitTop(inner(def))
			if len(key) == 0 {
				continue
			}
			if strings.HasPrefix(key[0], "(") {
				t.partition = splitTop(inner(key[0]))
			} else {
				t.partition = key[:1]
			}
			t.clustering = key[1:]
		case len(f) >= 4 && strings.EqualFold(f[2], "PRIMARY") && strings.EqualFold(f[3], "KEY"):
			t.partition = f[:1]
		}
	}
	s.keyspaces[strings.ToLower(q[m[2]:m[3]])] = true
	s.tables[t.name] = t
}

// inner returns what the first parentheses of s hold.
func inner(s string) string {
	from := strings.IndexByte(s, '(')
	if from < 0 {
		return ""
	}
	depth := 0
	for i := from; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return s[from+1 : i]
			}
		}
	}
	return s[from+1:]
}

// splitTop splits s at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, from := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[from:i]))
				from = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[from:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

// A bind is what a bind marker stands for: a column in a clause, or a
// statement's TTL, timestamp or limit.
type bind struct {
	col    string
	op     string // "=", "IN", ">=", …
	clause string // "values", "set", "where", "if", "ttl", "timestamp", "limit"
}

// statement is a prepared statement as the checks see it.
type statement struct {
	kind  string // INSERT, UPDATE, DELETE, SELECT
	table *table
	cond  bool // IF …: a lightweight transaction
	binds []bind
}

var tableOf = regexp.MustCompile(`(?i)^(?:INSERT INTO|UPDATE|DELETE .*?FROM|SELECT .*? FROM) (?:(\w+)\.)?(\w+)`)

// parse reads q against the schema; a refusal when Cassandra refuses to
// prepare it.
func (s *schema) parse(q string) (*statement, *refusal) {
	m := tableOf.FindStringSubmatch(q)
	if m == nil {
		return &statement{}, nil // not a statement on a table: left to the Handler
	}
	st := &statement{kind: strings.ToUpper(strings.Fields(q)[0])}
	if m[1] == "" {
		return nil, invalid("No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename")
	}
	ks := strings.ToLower(m[1])
	s.mu.Lock()
	known, t := s.keyspaces[ks], s.tables[ks+"."+strings.ToLower(m[2])]
	s.mu.Unlock()
	switch {
	case !known:
		return nil, invalid("keyspace %s does not exist", m[1])
	case t == nil:
		return nil, invalid("table %s does not exist", m[2])
	}
	st.table = t
	words := strings.Fields(strings.NewReplacer("(", " ( ", ")", " ) ", ",", " , ").Replace(q))
	up := func(i int) string { return strings.ToUpper(words[i]) }
	st.cond = st.kind != "SELECT" && index(upper(words), "IF") >= 0
	if st.cond && index(upper(words), "TIMESTAMP") >= 0 {
		return nil, invalid("Cannot provide custom timestamp for conditional updates")
	}
	clause := "where"
	if st.kind == "INSERT" {
		// INSERT INTO t ( c1 , c2 ) VALUES ( v1 , v2 ) …: the values pair
		// with the columns.
		open := index(words, "(")
		end := open + index(words[open:], ")")
		var cols []string
		for _, w := range words[open+1 : end] {
			if w != "," {
				cols = append(cols, w)
			}
		}
		vopen := end + index(words[end:], "(")
		n := 0
		i := vopen + 1
		for ; i < len(words) && words[i] != ")"; i++ {
			if words[i] == "," {
				n++
				continue
			}
			if words[i] == "?" && n < len(cols) {
				st.binds = append(st.binds, bind{col: cols[n], op: "=", clause: "values"})
			}
		}
		words = words[i:]
		clause = "using"
	}
	for i, w := range words {
		switch strings.ToUpper(w) {
		case "SET":
			clause = "set"
		case "WHERE":
			clause = "where"
		case "IF":
			clause = "if"
		}
		if w != "?" {
			continue
		}
		switch prev := up(i - 1); {
		case prev == "TTL" || prev == "TIMESTAMP" || prev == "LIMIT":
			st.binds = append(st.binds, bind{clause: strings.ToLower(prev)})
		case i >= 2:
			st.binds = append(st.binds, bind{col: words[i-2], op: prev, clause: clause})
		}
	}
	return st, nil
}

func upper(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = strings.ToUpper(w)
	}
	return out
}

// value is a bound value: nil is null; unset marks a value not set.
type value struct {
	b     []byte
	unset bool
}

// check refuses what Cassandra refuses in one execution of st with vs
// (now: the node's clock, for expiry dates).
func (st *statement) check(vs []value, now time.Time) *refusal {
	if st.table == nil {
		return nil
	}
	if r := st.checkClustering(vs); r != nil {
		return r
	}
	for i, b := range st.binds {
		if i >= len(vs) {
			break
		}
		v := vs[i]
		switch b.clause {
		case "ttl":
			if st.cond {
				continue // checked only once the condition holds (Stmt.Applies)
			}
			if r := st.checkTTL(v.b, now); r != nil {
				return r
			}
		case "timestamp":
			switch {
			case v.unset:
				return invalid("Invalid unset value of timestamp")
			case v.b == nil:
				return invalid("Invalid null value of timestamp")
			case len(v.b) == 8 && int64(binary.BigEndian.Uint64(v.b)) == math.MinInt64:
				return invalid("Out of bound timestamp, must be in [%d, %d]", -math.MaxInt64, math.MaxInt64)
			}
		case "limit":
			if len(v.b) == 4 && int32(binary.BigEndian.Uint32(v.b)) <= 0 {
				return invalid("LIMIT must be strictly positive")
			}
		case "values", "where":
			if r := st.checkKey(b, v); r != nil {
				return r
			}
		}
	}
	return st.checkCompositeKey(vs)
}

// checkCompositeKey refuses a partition key of several columns whose
// serialized form (each part's 2-byte length, bytes and end-of-component
// byte) is over 65,535 bytes.
func (st *statement) checkCompositeKey(vs []value) *refusal {
	if len(st.table.partition) < 2 {
		return nil
	}
	n, parts := 0, 0
	for i, b := range st.binds {
		if i < len(vs) && b.op == "=" && (b.clause == "values" || b.clause == "where") && st.table.isPartition(b.col) {
			n += 3 + len(vs[i].b)
			parts++
		}
	}
	if parts == len(st.table.partition) && n > maxKeyLength {
		return invalid("Key length of %d is longer than maximum of %d", n, maxKeyLength)
	}
	return nil
}

// checkClustering refuses a write whose clustering values (every
// clustering column bound with =) add up to more than 65,535 bytes, as
// Cassandra measures a row's clustering before its values.
func (st *statement) checkClustering(vs []value) *refusal {
	if st.kind != "INSERT" && st.kind != "UPDATE" || len(st.table.clustering) == 0 {
		return nil
	}
	n, parts := 0, 0
	for i, b := range st.binds {
		if i < len(vs) && b.op == "=" && (b.clause == "values" || b.clause == "where") && st.table.isClustering(b.col) {
			n += len(vs[i].b)
			parts++
		}
	}
	if parts == len(st.table.clustering) && n > maxKeyLength {
		return invalid("Key length of %d is longer than maximum of %d", n, maxKeyLength)
	}
	return nil
}

// checkTTL checks a TTL bound (nil: null or unset, no TTL).
func (st *statement) checkTTL(b []byte, now time.Time) *refusal {
	if len(b) != 4 {
		return nil
	}
	ttl := int64(int32(binary.BigEndian.Uint32(b)))
	switch end := now.Unix() + ttl; {
	case ttl < 0:
		return invalid("A TTL must be greater or equal to 0, but was %d", ttl)
	case ttl > maxTTL:
		return invalid("ttl is too large. requested (%d) maximum (%d)", ttl, maxTTL)
	case ttl > 0 && end > math.MaxInt32:
		return invalid("Request on table %s with ttl of %d seconds exceeds maximum supported expiration date of %s. "+
			"In order to avoid this use a lower TTL, change the expiration date overflow policy or upgrade to a version where this limitation is fixed. "+
			"See CASSANDRA-14092 for more details.", st.table.name, ttl, MaxExpiry.Format("2006-01-02T15:04:05+00:00"))
	case ttl > 0 && end >= math.MaxInt32-1:
		return &refusal{codeServer, "java.lang.AssertionError"}
	}
	return nil
}

// Applies returns the answer Cassandra gives a conditional statement whose
// condition holds when it checks the write it then makes (its TTL, which
// it does not look at when the condition fails), and false when there is
// none: a Handler calls it before it applies the statement.
func (s Stmt) Applies(now time.Time) (Answer, bool) {
	if s.st == nil || s.st.table == nil {
		return Answer{}, false
	}
	for i, b := range s.st.binds {
		if b.clause == "ttl" && i < len(s.Values) {
			if r := s.st.checkTTL(s.Values[i], now); r != nil {
				return r.answer(), true
			}
		}
	}
	return Answer{}, false
}

// checkKey checks a value bound to a key column.
func (st *statement) checkKey(b bind, v value) *refusal {
	t := st.table
	part, clust := t.isPartition(b.col), t.isClustering(b.col)
	if !part && !clust {
		return nil
	}
	if b.op == "IN" {
		switch {
		case v.unset:
			return invalid("Invalid unset value for column %s", b.col)
		case v.b == nil:
			return invalid("Invalid null value for column %s", b.col)
		}
		for _, e := range listElems(v.b) {
			if e == nil {
				return invalid("Invalid null value in condition for column %s", b.col)
			}
			if r := keyValue(t, part, value{b: e}); r != nil {
				return r
			}
		}
		return nil
	}
	if b.op != "=" {
		return nil // a range of clustering values: null is no bound
	}
	switch {
	case v.unset:
		return invalid("Invalid unset value for column %s", b.col)
	case v.b == nil:
		return invalid("Invalid null value in condition for column %s", b.col)
	}
	return keyValue(t, part, v)
}

// keyValue checks one value of a key column.
func keyValue(t *table, part bool, v value) *refusal {
	switch {
	case len(v.b) > maxKeyLength && !(part && len(t.partition) > 1):
		return invalid("Key length of %d is longer than maximum of %d", len(v.b), maxKeyLength)
	case part && len(t.partition) == 1 && len(v.b) == 0:
		return invalid("Key may not be empty")
	}
	return nil
}

// listElems returns the elements of a serialized list.
func listElems(b []byte) [][]byte {
	r := &rbuf{b: b}
	n := r.int()
	var out [][]byte
	for i := int32(0); i < n && len(r.b) >= 4; i++ {
		out = append(out, r.bytes())
	}
	return out
}

// checkBatch refuses what Cassandra refuses in a BATCH, beside what it
// refuses in each statement: see the comment at the top of this file.
func checkBatch(sts []*statement, vals [][]value, now time.Time) *refusal {
	cond := false
	for _, st := range sts {
		if st.kind == "SELECT" {
			return invalid("Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.")
		}
		cond = cond || st.cond
	}
	if cond {
		for _, st := range sts[1:] {
			if st.table != sts[0].table {
				return invalid("Batch with conditions cannot span multiple tables")
			}
		}
	}
	for i, st := range sts {
		if r := st.check(vals[i], now); r != nil {
			return r
		}
	}
	// The mutations: one per keyspace and partition key. Their data size
	// as Cassandra measures it (PartitionUpdate.dataSize): each row's
	// clustering values, and each cell's value plus 16 bytes (its
	// timestamp, TTL and expiry); keys and deletions count nothing else.
	type rowID struct{ part, clustering string }
	parts := map[string]bool{}
	cells := map[rowID]map[string]int{}
	for i, st := range sts {
		if st.table == nil {
			continue
		}
		ks := st.table.name[:strings.IndexByte(st.table.name, '.')]
		var part, clustering strings.Builder
		part.WriteString(ks + "\x00")
		row := map[string]int{}
		for j, b := range st.binds {
			if j >= len(vals[i]) {
				break
			}
			v := vals[i][j]
			switch {
			case b.clause == "if" || b.col == "" || v.unset:
			case st.table.isPartition(b.col):
				part.Write(binary.BigEndian.AppendUint32(nil, uint32(len(v.b))))
				part.Write(v.b)
			case st.table.isClustering(b.col):
				clustering.Write(binary.BigEndian.AppendUint32(nil, uint32(len(v.b))))
				clustering.Write(v.b)
			case st.kind != "DELETE":
				row[b.col] = 16 + len(v.b)
			}
		}
		parts[part.String()] = true
		id := rowID{part.String(), clustering.String()}
		if cells[id] == nil {
			cells[id] = map[string]int{"": clusteringSize(st, vals[i])}
		}
		for c, n := range row {
			cells[id][c] = n
		}
	}
	if cond && len(parts) > 1 {
		return invalid("Batch with conditions cannot span multiple partitions")
	}
	if len(parts) <= 1 {
		return nil
	}
	size := 0
	for _, row := range cells {
		for _, n := range row {
			size += n
		}
	}
	if size > batchFailSize {
		return invalid("Batch too large")
	}
	return nil
}

// clusteringSize is the bytes of the clustering values st binds.
func clusteringSize(st *statement, vs []value) int {
	n := 0
	for j, b := range st.binds {
		if j < len(vs) && b.clause != "if" && st.table.isClustering(b.col) {
			n += len(vs[j].b)
		}
	}
	return n
}
