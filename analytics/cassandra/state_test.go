package cassandra

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/linkgate/linkgate/analytics/analyticstest"
)

// TestStateWhileConnecting: State says starting (no failed attempt), then
// why the cluster is not reachable with the attempts counted, then
// connected; after Close, closed.
func TestStateWhileConnecting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(analyticstest.DefaultPlan, nil)
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel, s.done, s.connErr = cancel, make(chan struct{}), errors.New("connecting")
		db := newFakeDB(time.Now())
		dials := 0
		release := make(chan struct{})
		go s.connect(ctx, func(context.Context) (backend, error) {
			dials++
			if dials == 1 {
				<-release
			}
			if dials < 3 {
				return nil, errors.New("dial tcp 10.0.0.1:9042: connection refused")
			}
			return db, nil
		})
		synctest.Wait()
		if st := s.State(); st.Open || st.Attempts != 0 || !errors.Is(st.Err, ErrNotConnected) || !strings.Contains(st.Err.Error(), "connecting") {
			t.Errorf("State during the first attempt = %+v, want not open, 0 attempts, connecting", st)
		}
		close(release)
		synctest.Wait()
		if st := s.State(); st.Open || st.Attempts != 1 || !strings.Contains(st.Err.Error(), "connection refused") {
			t.Errorf("State after a failed attempt = %+v, want 1 attempt and its error", st)
		}
		time.Sleep(2 * time.Second) // the backoff: 0.5 s, then 1 s
		synctest.Wait()
		if st := s.State(); !st.Open || st.Err != nil || st.Attempts != 2 {
			t.Errorf("State once connected = %+v, want open, usable, 2 failed attempts", st)
		}
		s.Close()
		if st := s.State(); !errors.Is(st.Err, ErrClosed) {
			t.Errorf("State after Close = %+v, want ErrClosed", st)
		}
	})
}
