// Package mmdb reads a MaxMind database (.mmdb: the country database of
// package visitor, the ASN database of package visitclass) whole into
// memory, so that no file stays open and a replaced file is read anew.
package mmdb

import (
	"fmt"
	"os"

	"github.com/oschwald/maxminddb-golang/v2"
)

// Load reads the database at path and checks that it holds networks. Its
// errors name path; the caller adds which database it is.
func Load(path string) (*maxminddb.Reader, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	db, err := maxminddb.OpenBytes(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if db.Metadata.NodeCount == 0 {
		return nil, fmt.Errorf("%s: the database holds no networks", path)
	}
	return db, nil
}
