package analyticstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// handle is one process's handle on a Memory; closed handles fail, as a
// closed store does.
type handle struct {
	*analyticstest.Memory
	closed *bool
}

var errClosed = errors.New("memory: closed")

func (h handle) Write(ctx context.Context, b analytics.Batch) error {
	if *h.closed {
		return errClosed
	}
	return h.Memory.Write(ctx, b)
}

func (h handle) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if *h.closed {
		return nil, errClosed
	}
	return h.Memory.Points(ctx, key, step, from, to)
}

// TestRun runs the suite against the in-memory store to show that a
// correct store passes.
func TestRun(t *testing.T) {
	analyticstest.Run(t, func(t *testing.T, plan *rollup.Plan) analyticstest.Harness {
		m := analyticstest.NewMemory(plan)
		closed := new(bool)
		cur := handle{m, closed}
		return analyticstest.Harness{
			Store: cur,
			Reopen: func() analyticstest.Store {
				*cur.closed = true
				cur = handle{m, new(bool)}
				return cur
			},
			Another: func() analyticstest.Store { return handle{m, new(bool)} },
			Expire:  m.Expire,
		}
	})
}
