package cassandra

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/edge/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/internal/cqlwire"
)

// TestRefusalsAsCassandra runs the certificate storage's statements, with
// the values Cassandra refuses and with values it takes, on a real node
// (CASSANDRA_HOSTS) and on the CQL model, and compares the answers: the
// model must refuse what Cassandra refuses, with the same error, and answer
// the same rows otherwise. (The empty partition key of the top folder
// passed the model and failed every Store on a real node.)
func TestRefusalsAsCassandra(t *testing.T) {
	cfg := config()
	cfg.Keyspace = "linkgate_certs_refusals"
	real, model := cqlwire.Sessions(t, cqlmodel.New(t).Addr(), Schema(cfg))
	q := newStatements(cfg.Keyspace)
	// The rows of this run only: the node keeps those of earlier runs.
	b := make([]byte, 6)
	rand.Read(b)
	run := hex.EncodeToString(b)
	at := time.Now().UTC().Truncate(time.Millisecond)
	big := func(n int) string { return run + strings.Repeat("x", n-len(run)) }
	cases := []cqlwire.Case{
		{Name: "a file", Q: q.put, Args: []any{run + "/a", []byte("v"), at}},
		{Name: "a file read back", Q: q.get, Args: []any{run + "/a"}, Rows: true},
		{Name: "a file never stored", Q: q.get, Args: []any{run + "/none"}, Rows: true},
		{Name: "an empty key", Q: q.put, Args: []any{"", []byte("v"), at}, Refused: true},
		{Name: "an empty key read", Q: q.get, Args: []any{""}, Refused: true},
		{Name: "an empty key deleted", Q: q.del, Args: []any{""}, Refused: true},
		{Name: "a null key", Q: q.put, Args: []any{nil, []byte("v"), at}, Refused: true},
		{Name: "an unset key", Q: q.put, Args: []any{gocql.UnsetValue, []byte("v"), at}, Refused: true},
		{Name: "a key of 65,535 bytes", Q: q.put, Args: []any{big(65535), []byte("v"), at}},
		{Name: "a key of 65,536 bytes", Q: q.put, Args: []any{big(65536), []byte("v"), at}, Refused: true},
		{Name: "a null value", Q: q.put, Args: []any{run + "/n", nil, at}},
		{Name: "the top folder as the empty partition", Q: q.putDir, Args: []any{"", run, false}, Refused: true},
		{Name: "the top folder as /", Q: q.putDir, Args: []any{rootDir, run, false}},
		{Name: "an entry", Q: q.putDir, Args: []any{run, "a", true}},
		{Name: "an entry of an empty name", Q: q.putDir, Args: []any{run, "", true}},
		{Name: "an entry of a null name", Q: q.putDir, Args: []any{run, nil, true}, Refused: true},
		{Name: "an entry of an unset name", Q: q.putDir, Args: []any{run, gocql.UnsetValue, true}, Refused: true},
		{Name: "a folder listed", Q: q.list, Args: []any{run}, Rows: true},
		{Name: "the empty folder listed", Q: q.list, Args: []any{""}, Refused: true},
		{Name: "an entry of a null name deleted", Q: q.delDir, Args: []any{run, nil}, Refused: true},
		{Name: "an entry deleted", Q: q.delDir, Args: []any{run, ""}},
		{Name: "the folder after", Q: q.list, Args: []any{run}, Rows: true},
		{Name: "a lock", Q: q.lock, Args: []any{run + "lock", "me", 60}, Rows: true},
		{Name: "a lock held", Q: q.lock, Args: []any{run + "lock", "you", 60}, Rows: true},
		{Name: "a lock refreshed", Q: q.refresh, Args: []any{60, "me", run + "lock", "me"}, Rows: true},
		{Name: "a held lock refreshed past 2038", Q: q.refresh, Args: []any{630720000, "me", run + "lock", "me"}, Refused: true},
		{Name: "a lock refreshed by another", Q: q.refresh, Args: []any{60, "you", run + "lock", "you"}, Rows: true},
		{Name: "a lock never taken refreshed", Q: q.refresh, Args: []any{60, "me", run + "none", "me"}, Rows: true},
		{Name: "a lock never taken refreshed with a negative TTL: not applied, not checked", Q: q.refresh, Args: []any{-1, "me", run + "none", "me"}, Rows: true},
		{Name: "a lock held refused to another with a negative TTL: not applied, not checked", Q: q.lock, Args: []any{run + "lock", "you", -1}, Rows: true},
		{Name: "a lock released by another", Q: q.unlock, Args: []any{run + "lock", "you"}, Rows: true},
		{Name: "a lock released", Q: q.unlock, Args: []any{run + "lock", "me"}, Rows: true},
		{Name: "a lock of an empty name", Q: q.lock, Args: []any{"", "me", 60}, Refused: true},
		{Name: "a negative TTL", Q: q.lock, Args: []any{run + "neg", "me", -1}, Refused: true},
		{Name: "a TTL over 20 years", Q: q.lock, Args: []any{run + "20y", "me", 630720001}, Refused: true},
		{Name: "a TTL of 20 years: past 2038", Q: q.lock, Args: []any{run + "2038", "me", 630720000}, Refused: true},
		{Name: "two files of 20 KB in a batch", Type: gocql.UnloggedBatch, Batch: []cqlwire.Entry{
			{Q: q.put, Args: []any{run + "/b1", make([]byte, 20<<10), at}},
			{Q: q.put, Args: []any{run + "/b2", make([]byte, 20<<10), at}},
		}},
		{Name: "two files of 30 KB in a batch", Type: gocql.UnloggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.put, Args: []any{run + "/b3", make([]byte, 30<<10), at}},
			{Q: q.put, Args: []any{run + "/b4", make([]byte, 30<<10), at}},
		}},
		{Name: "two files of 30 KB in a logged batch", Type: gocql.LoggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.put, Args: []any{run + "/b3", make([]byte, 30<<10), at}},
			{Q: q.put, Args: []any{run + "/b4", make([]byte, 30<<10), at}},
		}},
		{Name: "two entries of 30 KB of one folder in a batch", Type: gocql.UnloggedBatch, Batch: []cqlwire.Entry{
			{Q: q.putDir, Args: []any{run, big(30 << 10), true}},
			{Q: q.putDir, Args: []any{run, big(30<<10) + "y", true}},
		}},
		{Name: "a batch with an empty key", Type: gocql.UnloggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.put, Args: []any{run + "/b5", []byte("v"), at}},
			{Q: q.put, Args: []any{"", []byte("v"), at}},
		}},
		{Name: "a conditional batch of two partitions", Type: gocql.LoggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.lock, Args: []any{run + "l1", "me", 60}},
			{Q: q.lock, Args: []any{run + "l2", "me", 60}},
		}},
		{Name: "a conditional batch of two tables", Type: gocql.LoggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.lock, Args: []any{run + "l1", "me", 60}},
			{Q: q.put, Args: []any{run + "l1", []byte("v"), at}},
		}},
		{Name: "a SELECT in a batch", Type: gocql.UnloggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.get, Args: []any{run + "/a"}},
		}},
		{Name: "the files after the batches", Q: q.get, Args: []any{run + "/b2"}, Rows: true},
	}
	cqlwire.Compare(t, real, model, cases)
}
