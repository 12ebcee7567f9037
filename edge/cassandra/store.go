// Package cassandra is certmagic's Storage on Apache Cassandra (gocql): the
// certificates, keys and ACME account of a linkgate fleet in one place, so
// that the gateways share them, and locks with lightweight transactions
// (Paxos, SERIAL or LOCAL_SERIAL) and a TTL, so that when several gateways
// see a new name at once one obtains its certificate and the others wait
// for it and load it.
//
// Three tables, in the configured keyspace:
//
//	certmagic_kv    (key text PRIMARY KEY, value blob, modified timestamp)
//	certmagic_dir   (dir text, name text, file boolean, PRIMARY KEY (dir, name))
//	certmagic_locks (name text PRIMARY KEY, owner text)
//
// certmagic_kv holds the objects; certmagic_dir lists each folder's
// entries (a file, or a folder leading to files), one partition per
// folder, so that List reads a partition instead of scanning keys. The top
// folder's partition is "/" (rootDir): Cassandra refuses an empty partition
// key, and no other folder's name is "/" (keys are cleaned of their
// leading and trailing slashes).
// certmagic_locks rows are only ever written by lightweight transactions
// (Cassandra's rule: never mix them with plain writes on the same rows):
// INSERT ... IF NOT EXISTS USING TTL takes a lock, UPDATE ... USING TTL
// ... IF owner = refreshes it every third of the TTL while it is held, and
// DELETE ... IF owner = releases it. A holder that dies stops refreshing,
// and its lock expires by the TTL.
//
// Open returns at once; the session, which the gateway's analytics store
// shares when it names the same cluster (internal/cqlsession), connects in
// the background with retries and backoff and creates the keyspace and
// tables when missing: a gateway starts while Cassandra boots, and serves
// the certificates it has in memory or from static files meanwhile. Until
// the Store is connected every method fails fast with an error wrapping
// ErrNotConnected; Ready and Connected say when it is.
package cassandra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/internal/cqlsession"
)

// Store is certmagic.Storage on Cassandra. It is safe for concurrent use.
type Store struct {
	conn   *cqlsession.Handle
	cons   gocql.Consistency
	serial gocql.SerialConsistency
	ttl    time.Duration
	poll   time.Duration
	owner  string // this Store's lock owner prefix
	log    *slog.Logger
	q      statements

	mu     sync.Mutex
	held   map[string]*heldLock // by lock name
	closed bool                 // guarded by mu

	closing   chan struct{} // closed by Close
	closeOnce sync.Once
}

// ErrNotConnected is wrapped by the errors of a Store that has not
// connected to its cluster yet.
var ErrNotConnected = cqlsession.ErrNotConnected

// ErrClosed is returned by a Store after Close.
var ErrClosed = errors.New("cassandra: the certificate storage is closed")

type heldLock struct {
	owner string
	stop  context.CancelFunc
	done  chan struct{}
}

var (
	_ certmagic.Storage          = (*Store)(nil)
	_ certmagic.TryLocker        = (*Store)(nil)
	_ certmagic.LockLeaseRenewer = (*Store)(nil)
)

type statements struct {
	put, get, del, putDir, list, delDir, lock, refresh, unlock string
}

func newStatements(ks string) statements {
	return statements{
		put:     fmt.Sprintf("INSERT INTO %s.certmagic_kv (key, value, modified) VALUES (?, ?, ?)", ks),
		get:     fmt.Sprintf("SELECT value, modified FROM %s.certmagic_kv WHERE key = ?", ks),
		del:     fmt.Sprintf("DELETE FROM %s.certmagic_kv WHERE key = ?", ks),
		putDir:  fmt.Sprintf("INSERT INTO %s.certmagic_dir (dir, name, file) VALUES (?, ?, ?)", ks),
		list:    fmt.Sprintf("SELECT name, file FROM %s.certmagic_dir WHERE dir = ?", ks),
		delDir:  fmt.Sprintf("DELETE FROM %s.certmagic_dir WHERE dir = ? AND name = ?", ks),
		lock:    fmt.Sprintf("INSERT INTO %s.certmagic_locks (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?", ks),
		refresh: fmt.Sprintf("UPDATE %s.certmagic_locks USING TTL ? SET owner = ? WHERE name = ? IF owner = ?", ks),
		unlock:  fmt.Sprintf("DELETE FROM %s.certmagic_locks WHERE name = ? IF owner = ?", ks),
	}
}

// Schema returns the statements that create the keyspace and tables.
func Schema(cfg edge.Cassandra) []string {
	ks := cfg.Keyspace
	return []string{
		fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}", ks, cfg.ReplicationFactor),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.certmagic_kv (key text PRIMARY KEY, value blob, modified timestamp)", ks),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.certmagic_dir (dir text, name text, file boolean, PRIMARY KEY (dir, name))", ks),
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.certmagic_locks (name text PRIMARY KEY, owner text)", ks),
	}
}

// Options tune a Store beyond its config.
type Options struct {
	// Pool holds the session of the Store's cluster, shared with the
	// gateway's other stores on it; nil: a pool of the Store's own.
	Pool *cqlsession.Pool
	// PollInterval is how often Lock tries again for a held lock. 0: 1s.
	PollInterval time.Duration
	// LockTTL replaces cfg.LockTTL when positive (a dying holder in tests).
	LockTTL time.Duration
}

// Open returns a Store for cfg's cluster, on its session in o.Pool, which
// connects in the background, creating the keyspace and tables when
// missing, retrying with backoff (half a second, doubling up to 30 s)
// until it succeeds or the last store on it closes. It does not wait for
// the network: ctx bounds Open itself only. cfg was checked by
// edge.Compile, so Open fails only when ctx is done. The caller must call
// Close.
func Open(ctx context.Context, cfg edge.Cassandra, log *slog.Logger, o Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: open: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var cons gocql.Consistency
	if err := cons.UnmarshalText([]byte(cfg.Consistency)); err != nil {
		return nil, fmt.Errorf("cassandra: consistency: %w", err)
	}
	serial := gocql.Serial
	if strings.HasPrefix(strings.ToUpper(cfg.Consistency), "LOCAL_") {
		serial = gocql.LocalSerial
	}
	s := &Store{
		cons: cons, serial: serial, ttl: cfg.LockTTL, poll: time.Second,
		owner: randomID(), log: log, q: newStatements(cfg.Keyspace), held: map[string]*heldLock{},
		closing: make(chan struct{}),
	}
	if o.PollInterval > 0 {
		s.poll = o.PollInterval
	}
	if o.LockTTL > 0 {
		s.ttl = o.LockTTL
	}
	pool := o.Pool
	if pool == nil {
		pool = cqlsession.NewPool(log)
	}
	s.conn = pool.Open(cqlsession.Config{Hosts: cfg.Hosts, Timeout: cfg.Timeout}, "tls", Schema(cfg))
	go func() {
		select {
		case <-s.conn.Ready():
			s.log.Info("certificate storage connected to cassandra")
		case <-s.closing:
		}
	}()
	return s, nil
}

// Ready returns nil once the Store is connected and its tables are in
// place, or the reason it is not (an error wrapping ErrNotConnected).
func (s *Store) Ready() error {
	_, err := s.session()
	return err
}

// session returns the connected session, or why there is none.
func (s *Store) session() (*gocql.Session, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return s.conn.Session()
}

// Connected is closed once the Store is connected.
func (s *Store) Connected() <-chan struct{} { return s.conn.Ready() }

// Close releases the locks still held and the session (closed once no
// store of the gateway uses it). Calls after the first do nothing.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		names := make([]string, 0, len(s.held))
		for n := range s.held {
			names = append(names, n)
		}
		s.mu.Unlock()
		for _, n := range names {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.Unlock(ctx, n)
			cancel()
		}
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.conn.Close()
	})
}

// abandon stops refreshing every lock held and releases the session
// without releasing them, as a gateway that dies does (tests).
func (s *Store) abandon() {
	s.mu.Lock()
	for _, h := range s.held {
		h.stop()
		<-h.done
	}
	s.held = map[string]*heldLock{}
	s.closed = true
	s.mu.Unlock()
	s.closeOnce.Do(func() { close(s.closing) })
	s.conn.Close()
}

func randomID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// query is stmt on the session, or why there is none.
func (s *Store) query(ctx context.Context, stmt string, args ...any) (*gocql.Query, error) {
	sess, err := s.session()
	if err != nil {
		return nil, err
	}
	return sess.Query(stmt, args...).WithContext(ctx).Consistency(s.cons), nil
}

// exec runs stmt.
func (s *Store) exec(ctx context.Context, stmt string, args ...any) error {
	q, err := s.query(ctx, stmt, args...)
	if err != nil {
		return err
	}
	return q.Exec()
}

// cas runs a lightweight transaction and reports whether it applied.
func (s *Store) cas(ctx context.Context, stmt string, args ...any) (bool, error) {
	q, err := s.query(ctx, stmt, args...)
	if err != nil {
		return false, err
	}
	return q.SerialConsistency(s.serial).MapScanCAS(map[string]any{})
}

// file reads the value and time of the file at key.
func (s *Store) file(ctx context.Context, key string) (value []byte, modified time.Time, err error) {
	q, err := s.query(ctx, s.q.get, key)
	if err == nil {
		err = q.Scan(&value, &modified)
	}
	return value, modified, err
}

// rootDir is the dir column of the top folder's entries: Cassandra refuses
// an empty partition key ("Key may not be empty"), and a cleaned key never
// is "/".
const rootDir = "/"

// dirKey is the partition of folder dir in certmagic_dir.
func dirKey(dir string) string {
	if dir == "" {
		return rootDir
	}
	return dir
}

// split returns a key's folder ("" at the top) and last component.
func split(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}

func clean(key string) string { return strings.Trim(path.Clean("/"+key), "/") }

// Store puts value at key, then lists it in its folder and each folder in
// its parent.
func (s *Store) Store(ctx context.Context, key string, value []byte) error {
	if err := s.Ready(); err != nil {
		return err
	}
	key = clean(key)
	if key == "" {
		return errors.New("cassandra: store: empty key")
	}
	if value == nil {
		value = []byte{}
	}
	if err := s.exec(ctx, s.q.put, key, value, time.Now()); err != nil {
		return fmt.Errorf("cassandra: store %s: %w", key, err)
	}
	file := true
	for k := key; k != ""; {
		dir, name := split(k)
		if err := s.exec(ctx, s.q.putDir, dirKey(dir), name, file); err != nil {
			return fmt.Errorf("cassandra: store %s: list in %q: %w", key, dir, err)
		}
		file, k = false, dir
	}
	return nil
}

// Load returns the value at key, fs.ErrNotExist when there is none.
func (s *Store) Load(ctx context.Context, key string) ([]byte, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	if key = clean(key); key == "" {
		return nil, fs.ErrNotExist // the top folder, never a file
	}
	value, _, err := s.file(ctx, key)
	if errors.Is(err, gocql.ErrNotFound) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("cassandra: load %s: %w", key, err)
	}
	return value, nil
}

type entry struct {
	name string
	file bool
}

func (s *Store) entries(ctx context.Context, dir string) ([]entry, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	q, err := s.query(ctx, s.q.list, dirKey(dir))
	if err != nil {
		return nil, err
	}
	it := q.Iter()
	var out []entry
	var e entry
	for it.Scan(&e.name, &e.file) {
		out = append(out, e)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("cassandra: list %q: %w", dir, err)
	}
	return out, nil
}

// Delete deletes key, or every key under it when it is a folder. A key that
// does not exist is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	key = clean(key)
	ents, err := s.entries(ctx, key)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := s.Delete(ctx, path.Join(key, e.name)); err != nil {
			return err
		}
	}
	if key == "" {
		return nil // the top folder: no row of its own, listed nowhere
	}
	if err := s.exec(ctx, s.q.del, key); err != nil {
		return fmt.Errorf("cassandra: delete %s: %w", key, err)
	}
	dir, name := split(key)
	if err := s.exec(ctx, s.q.delDir, dirKey(dir), name); err != nil {
		return fmt.Errorf("cassandra: delete %s: unlist: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a file or a folder holding files.
func (s *Store) Exists(ctx context.Context, key string) bool {
	_, err := s.Stat(ctx, key)
	return err == nil
}

// List returns the keys directly under prefix, or all the files under it
// when recursive.
func (s *Store) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	prefix = clean(prefix)
	ents, err := s.entries(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if len(ents) == 0 {
		return nil, fs.ErrNotExist
	}
	var out []string
	for _, e := range ents {
		k := path.Join(prefix, e.name)
		if !recursive || e.file {
			out = append(out, k)
			continue
		}
		sub, err := s.List(ctx, k, true)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		out = append(out, sub...)
	}
	return out, nil
}

// Stat describes key: a file with its size and time, or a folder.
func (s *Store) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	if err := s.Ready(); err != nil {
		return certmagic.KeyInfo{}, err
	}
	key = clean(key)
	var value []byte
	var modified time.Time
	err := gocql.ErrNotFound // the top folder is never a file
	if key != "" {
		value, modified, err = s.file(ctx, key)
	}
	if err == nil {
		return certmagic.KeyInfo{Key: key, Modified: modified, Size: int64(len(value)), IsTerminal: true}, nil
	}
	if !errors.Is(err, gocql.ErrNotFound) {
		return certmagic.KeyInfo{}, fmt.Errorf("cassandra: stat %s: %w", key, err)
	}
	ents, err := s.entries(ctx, key)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	if len(ents) == 0 {
		return certmagic.KeyInfo{}, fs.ErrNotExist
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

func ttlSeconds(d time.Duration) int { return max(int((d+time.Second-1)/time.Second), 1) }

// TryLock takes the lock name if no one holds it.
func (s *Store) TryLock(ctx context.Context, name string) (bool, error) {
	if err := s.Ready(); err != nil {
		return false, err
	}
	owner := s.owner + "-" + randomID()
	applied, err := s.cas(ctx, s.q.lock, name, owner, ttlSeconds(s.ttl))
	if err != nil {
		return false, fmt.Errorf("cassandra: lock %s: %w", name, err)
	}
	if !applied {
		return false, nil
	}
	hctx, stop := context.WithCancel(context.Background())
	h := &heldLock{owner: owner, stop: stop, done: make(chan struct{})}
	s.mu.Lock()
	if old := s.held[name]; old != nil {
		// Our own earlier hold that expired and was taken again: stop
		// refreshing it.
		old.stop()
	}
	s.held[name] = h
	s.mu.Unlock()
	go s.refreshLoop(hctx, name, h)
	return true, nil
}

// Lock takes the lock name, waiting while another holds it, until ctx is
// done.
func (s *Store) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("certificate storage: taking a lock failed; trying again", "lock", name, "err", err)
		} else if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// refreshLoop keeps a held lock alive, every third of the TTL, until
// Unlock stops it or the lock is found lost.
func (s *Store) refreshLoop(ctx context.Context, name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, s.ttl/3)
		ok, err := s.refresh(rctx, name, h.owner, s.ttl)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("certificate storage: refreshing a lock failed", "lock", name, "err", err)
		case err == nil && !ok:
			s.log.Warn("certificate storage: a held lock expired and was lost", "lock", name)
			return
		}
	}
}

func (s *Store) refresh(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	return s.cas(ctx, s.q.refresh, ttlSeconds(ttl), owner, name, owner)
}

// RenewLockLease extends a lock this Store holds to leaseDuration from now
// (certmagic calls it between retries of a long issuance).
func (s *Store) RenewLockLease(ctx context.Context, name string, leaseDuration time.Duration) error {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("cassandra: renew lock %s: not held", name)
	}
	ok, err := s.refresh(ctx, name, h.owner, max(leaseDuration, s.ttl))
	if err != nil {
		return fmt.Errorf("cassandra: renew lock %s: %w", name, err)
	}
	if !ok {
		return fmt.Errorf("cassandra: renew lock %s: lost", name)
	}
	return nil
}

// Unlock releases a lock this Store holds.
func (s *Store) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("cassandra: unlock %s: not held", name)
	}
	h.stop()
	<-h.done
	if _, err := s.cas(ctx, s.q.unlock, name, h.owner); err != nil {
		return fmt.Errorf("cassandra: unlock %s: %w", name, err)
	}
	return nil
}

// String names the storage (its keyspace) in certmagic's logs.
func (s *Store) String() string {
	return "cassandra:" + s.q.put[len("INSERT INTO "):strings.Index(s.q.put, ".")]
}
