package lifecycle

import (
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// A machine the tracker hears of afresh reaches the controller that runs
// then, and only it: none before a term, none after it.
func TestReturnsReachTheRunningController(t *testing.T) {
	r := NewReturns()
	r.Notify("before") // no term: dropped, and it must not block
	q := workqueue.NewTyped[string]()
	defer q.ShutDown()
	stop := r.receive(q)
	r.Notify("during")
	stop()
	r.Notify("after")
	if q.Len() != 1 {
		t.Fatalf("the term's queue holds %d machines, want 1 (the one heard during the term)", q.Len())
	}
	if got, _ := q.Get(); got != "during" {
		t.Errorf("queued %q, want during", got)
	}
}
