package memcached_test

import (
	"os"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestMain runs the parallel tests, which wait on TTLs and an outage, all
// at once.
func TestMain(m *testing.M) {
	testkit.SetParallel(4)
	os.Exit(m.Run())
}
