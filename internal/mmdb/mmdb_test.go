package mmdb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/mmdb"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// TestLoad: a country database loads; a missing file and a file that is
// no database are errors naming the path.
func TestLoad(t *testing.T) {
	good := visitortest.CountryDB(t, visitortest.GeoLite2, map[string]string{"192.0.2.0/24": "FR"})
	if db, err := mmdb.Load(good); err != nil || db.Metadata.NodeCount == 0 {
		t.Fatalf("Load(%s): %v", good, err)
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.mmdb")
	if err := os.WriteFile(junk, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.mmdb"), junk} {
		if _, err := mmdb.Load(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Load(%s): %v, want an error naming the path", path, err)
		}
	}
}
