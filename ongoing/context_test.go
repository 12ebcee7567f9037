package ongoing_test

import (
	"context"
	"testing"
	"time"

	"github.com/linkgate/linkgate/ongoing"
)

// TestRequestContextStops: a stop stops its own function only, also
// once the place the function was kept in holds another's; Cancel runs
// the functions not stopped, once, and Err, Done and Start say it ended
// and when the request began.
func TestRequestContextStops(t *testing.T) {
	var x ongoing.RequestContext
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	x.Init(context.Background(), start)
	ran := make(chan string, 4)
	stop1 := x.AfterFunc(func() { ran <- "1" })
	if !stop1() {
		t.Fatal("the first stop failed")
	}
	stop2 := x.AfterFunc(func() { ran <- "2" })
	stop3 := x.AfterFunc(func() { ran <- "3" })
	if stop1() {
		t.Error("a stop stopped again, or another's function")
	}
	if !stop3() {
		t.Error("the third stop failed")
	}
	if x.Err() != nil {
		t.Errorf("Err before Cancel: %v", x.Err())
	}
	x.Cancel()
	x.Cancel()
	select {
	case got := <-ran:
		if got != "2" {
			t.Errorf("ran %s, want 2", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the function not stopped did not run")
	}
	if stop2() {
		t.Error("a function that ran was stopped")
	}
	select {
	case <-x.Done():
	default:
		t.Error("Done open after Cancel")
	}
	if x.Err() != context.Canceled || !ongoing.Start(&x).Equal(start) {
		t.Errorf("Err %v, Start %v; want context.Canceled, %v", x.Err(), ongoing.Start(&x), start)
	}
	select {
	case got := <-ran:
		t.Errorf("%s ran too", got)
	case <-time.After(50 * time.Millisecond):
	}
}
