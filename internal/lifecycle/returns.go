package lifecycle

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// Returns carries the machines the liveness tracker hears of afresh
// (internal/liveness's OnReturn: a machine just joined, or heard again
// after it was forgotten) to the lifecycle controller of the current term,
// which looks at each at once rather than at its next pass over the fleet.
//
// It is made before both, so that neither completes the other: the tracker
// is made with Notify as its OnReturn, each term's controller with the
// Returns, and a controller receives only while it runs. A return that
// comes between terms is dropped; the next term's first pass looks at
// every machine.
type Returns struct {
	mu sync.Mutex
	to workqueue.TypedInterface[string]
}

// NewReturns returns a Returns no controller receives from yet.
func NewReturns() *Returns { return &Returns{} }

// Notify hands a machine to the running controller, if any. It never
// blocks: the tracker calls it for a request.
func (r *Returns) Notify(machine string) {
	r.mu.Lock()
	to := r.to
	r.mu.Unlock()
	if to != nil {
		to.Add(machine)
	}
}

// receive queues every return into q until stop is called: the term of
// one controller's Run.
func (r *Returns) receive(q workqueue.TypedInterface[string]) (stop func()) {
	r.mu.Lock()
	r.to = q
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.to == q {
			r.to = nil
		}
	}
}
