package limit_test

import (
	"os"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestMain runs up to 4 parallel tests at once: the real-clock expiry waits
// while the reference replays compute.
func TestMain(m *testing.M) {
	testkit.SetParallel(4)
	os.Exit(m.Run())
}
